"""Sweeps: a grid of spec values times seeds, run on local cores or on Ray, each trial recorded as it ends.

    explorer.sweep("tau-fig1-1/sqrt(L)", grid={"model.depth": [10, 30]}, seeds=3)

Trials run in worker processes (explorer.parallel's pool, one worker per core by default) or as Ray tasks
(the cluster at RAY_ADDRESS, or a local Ray). Workers only train; the calling process writes
every trial into the run store as soon as it returns, so the store needs no shared filesystem.
A trial that fails is recorded as "failed" with its error and the others go on; a diverged
trial is a result like any other. With `batched=True` the seeds of each grid point train as one
stacked model (explorer.batched) in one worker.

Each trial's row (`result_row`) carries its `point`: its value on each axis of the grid and its seed, which
`plots.grid_figure` lays out as a heatmap of the final loss (or accuracy) over two axes. A grid of shortcut
designs is a grid over topology.shortcuts on the `shortcuts` topology (`design_grid`), each design shown by its
canonical text ("0:3+1:4").
"""

from __future__ import annotations

import itertools
import os
import traceback
from collections.abc import Iterable
from typing import Any

from explorer.parallel import BACKENDS, Workers
from explorer.plots import GRID_METRICS
from explorer.registries import SpecError, check_text, quote
from explorer.spec import ExperimentSpec
from explorer.topology import parse_shortcuts, shortcuts_text
from explorer.training import finite

DESIGN_PATH = "topology.shortcuts"  # the axis of a grid of shortcut designs
SEED_AXIS = "seed"  # every row's point holds its seed under this axis
METRICS = GRID_METRICS  # a row's final metrics: key -> what it is


def trials(spec: ExperimentSpec, grid: dict[str, list] | None = None, seeds: int = 1) -> list[tuple[str, ExperimentSpec]]:
    """(label, spec) for every grid point and seed: seeds train.seed, train.seed + 1, ... of the base spec."""
    if seeds < 1:
        raise SpecError("seeds", f"must be at least 1, got {seeds}")
    grid = grid or {}
    for path, values in grid.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise SpecError(f"grid.{path}", "give a non-empty list of values, e.g. --grid model.depth=10,30")
    out = []
    for point in itertools.product(*grid.values()):
        changes = dict(zip(grid, point))
        base = spec.with_values(changes) if changes else spec
        for k in range(seeds):
            trial = base.with_values({"train.seed": spec.train.seed + k})
            label = " ".join([f"{path}={value}" for path, value in changes.items()] + [f"seed={spec.train.seed + k}"])
            out.append((label, trial))
    return out


def parse_grid(items: Iterable[str]) -> dict[str, list[str]]:
    """["model.depth=10,30", ...] -> {"model.depth": ["10", "30"]} (values are coerced by the spec).

    Values are separated by commas, or by semicolons where a value holds commas itself
    ("topology.shortcuts=0:3,1:4;0:2" is two designs)."""
    grid = {}
    for item in items:
        path, sep, values = item.partition("=")
        if not sep or not values.strip():
            raise SpecError("--grid", f"{item!r} is not PATH=V1,V2,...; write e.g. --grid model.depth=10,30")
        grid[path.strip()] = split_values(values, "--grid")
    return grid


def split_values(text: str, path: str = "grid") -> list[str]:
    """An axis' typed values: "a;b" or one per line when a value holds commas ("0:3,1:4; 0:2"), else "a,b".
    At most MAX_TEXT_CHARS characters (SpecError naming `path`); each value is checked by the spec's field."""
    check_text(text, path, ascii_only=False)
    separator = ";" if ";" in text or "\n" in text else ","
    return [value.strip() for value in text.replace("\n", ";").split(separator) if value.strip()]


def design_label(text: str) -> str:
    """A shortcut design's canonical text joined by "+" (it names a grid point): "1:4, 0:3" -> "0:3+1:4"."""
    return shortcuts_text(parse_shortcuts(text)).replace(",", "+")


def design_grid(spec: ExperimentSpec, designs: Iterable[str]) -> tuple[ExperimentSpec, dict[str, list[str]]]:
    """(base, grid) of a grid of shortcut designs: `spec` on the shortcuts topology and the designs' canonical
    texts on topology.shortcuts. SpecError naming the field and the design when one is malformed, repeated or
    does not fit the model (a shortcut past its last block)."""
    designs = list(designs)
    if not designs:
        raise SpecError(DESIGN_PATH, "give at least one shortcut design, e.g. 0:3 or 0:3,1:4")
    base = spec if spec.topology.name == "shortcuts" else spec.with_values({"topology.name": "shortcuts"})
    seen: dict[str, str] = {}
    for text in designs:
        try:
            canonical = shortcuts_text(parse_shortcuts(text))
            base.with_values({DESIGN_PATH: canonical})  # the model's own check: enough blocks, ...
        except SpecError as error:
            raise SpecError(error.path, f"design {quote(text.strip())}: {error.message}") from None
        if canonical in seen:
            spelled = "" if seen[canonical] == text.strip() else f" (as {seen[canonical]!r} and {text.strip()!r})"
            raise SpecError(DESIGN_PATH, f"the design {design_label(canonical)} is listed twice{spelled}; "
                                         "list each design once")
        seen[canonical] = text.strip()
    return base, {DESIGN_PATH: list(seen)}


def point(spec: ExperimentSpec, paths: Iterable[str]) -> dict[str, Any]:
    """The trial's value on each grid axis (a design by its label "0:3+1:4") and its seed."""
    found = {path: design_label(spec.get(path)) if path == DESIGN_PATH else spec.get(path) for path in paths}
    return {**found, SEED_AXIS: spec.train.seed}


def result_row(label: str, spec: ExperimentSpec, paths: Iterable[str], status: str,
               history: list[dict[str, Any]] | None = None, diverged_at: int | None = None, **extra: Any) -> dict:
    """One trial's row, as `sweep` returns it and `plots.grid_figure` reads it: label, point (see `point`),
    status, diverged_at, the final metrics of METRICS (None where not logged or not finite), its spec, and
    `extra` (run_id, error, ...). A trial still training has the metrics of its last logged row."""
    final = history[-1] if history else {}
    metrics = {key: finite(final.get(key.removeprefix("final_"))) for key in METRICS}
    return {"label": label, "point": point(spec, paths), "status": status, "diverged_at": diverged_at, **metrics,
            "spec": spec.to_dict(), **extra}


def _run_group(specs: list[dict], batched: bool, threads: int) -> list[dict[str, Any]]:
    """Worker: train one trial (or, batched, several seeds at once); never raises (errors are results)."""
    import torch

    from explorer.training import train

    torch.set_num_threads(max(1, threads))
    try:
        parsed = [ExperimentSpec.from_dict(s) for s in specs]
        if batched and len(parsed) > 1:
            from explorer.batched import train_batched

            runs = train_batched(parsed)
        else:
            runs = [train(s) for s in parsed]
        return [{"status": r.status, "summary": r.summary(), "checkpoint": _cpu(_checkpoint_of(r))} for r in runs]
    except Exception as error:  # noqa: BLE001  (a failed trial is recorded, the sweep goes on)
        message = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=4)}"
        return [{"status": "failed", "error": message} for _ in specs]


def _checkpoint_of(run) -> dict:
    """The run's full training state (separate and batched runs keep it until dropped); the weights and step of a
    run that no longer holds it."""
    try:
        return run.checkpoint()
    except RuntimeError:
        return {"model": run.model.state_dict(), "step": run.steps_done}


def _cpu(state):
    """A checkpoint with every tensor on the CPU (it crosses a process boundary and lands in the store)."""
    import torch

    if isinstance(state, torch.Tensor):
        return state.cpu()
    if isinstance(state, dict):
        return {k: _cpu(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_cpu(v) for v in state)
    return state


def _record(store, label: str, spec: ExperimentSpec, paths: list[str], sweep_label: str,
            outcome: dict) -> dict[str, Any]:
    """Write one finished trial into the store; its row (`result_row`) for the caller."""
    from explorer.runs import environment

    run_id = store.create(spec, f"{sweep_label} {label}".strip(), status="running")
    if outcome["status"] == "failed":
        store.set_status(run_id, "failed", final={"error": outcome["error"]})
        return result_row(label, spec, paths, "failed", run_id=run_id, error=outcome["error"].splitlines()[0])
    summary = outcome["summary"]
    store.append_history(run_id, summary["history"])
    store.save_checkpoint(run_id, outcome["checkpoint"])
    store.set_status(run_id, summary["status"], steps_done=summary["steps"], diverged_at=summary["diverged_at"],
                     wall_time=summary["wall_time"], final=summary["history"][-1] if summary["history"] else {},
                     environment=environment(summary["device"]))
    rest = {k: v for k, v in summary.items() if k not in ("history", "status", "diverged_at", "spec", *METRICS)}
    return {"run_id": run_id, **result_row(label, spec, paths, summary["status"], summary["history"],
                                           summary["diverged_at"], **rest)}


def _groups(items: list[tuple[str, ExperimentSpec]], seeds: int, batched: bool) -> list[list[tuple[str, ExperimentSpec]]]:
    if not batched:
        return [[item] for item in items]
    return [items[i:i + seeds] for i in range(0, len(items), seeds)]  # the seeds of one grid point


def sweep(spec: ExperimentSpec | str, grid: dict[str, list] | None = None, seeds: int = 1, backend: str = "local",
          workers: int | None = None, batched: bool = False, store=None, label: str = "", progress: bool = True,
          callback=None) -> list[dict[str, Any]]:
    """Run every trial of `grid` x `seeds`; return their summaries (run_id, label, status, final metrics, ...).

    `spec` is an ExperimentSpec or a preset name. `callback(row)` is called as each trial is recorded.
    Ctrl-C cancels the trials not started, stops the workers and re-raises KeyboardInterrupt; the trials
    finished so far are in the store.
    """
    from explorer.papers import preset
    from explorer.runs import default_store

    if backend not in BACKENDS:
        raise SpecError("backend", f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if workers is not None and workers < 1:
        raise SpecError("workers", f"must be at least 1, got {workers}")
    base = preset(spec) if isinstance(spec, str) else spec
    items = trials(base, grid, seeds)
    groups = _groups(items, seeds, batched)
    store = store if store is not None else default_store()
    cores = os.cpu_count() or 1
    workers = workers or min(cores, len(groups))
    threads = max(1, cores // workers)
    bar = _bar(len(items)) if progress else None
    results: list[dict[str, Any]] = []

    def finished(group, outcomes):
        for (trial_label, trial_spec), outcome in zip(group, outcomes):
            row = _record(store, trial_label, trial_spec, list(grid or {}), label, outcome)
            results.append(row)
            if callback is not None:
                callback(row)
            if bar is not None:
                bar.update(1)

    try:
        with Workers(workers, backend, threads) as pool:
            pool.map(_run_group, [([s.to_dict() for _, s in group], batched, threads) for group in groups],
                     on_done=lambda index, outcomes: finished(groups[index], outcomes))
    finally:
        if bar is not None:
            bar.close()
    order = {trial_label: i for i, (trial_label, _) in enumerate(items)}
    return sorted(results, key=lambda row: order[row["label"]])


def _bar(total: int):
    import sys

    from tqdm.auto import tqdm

    return tqdm(total=total, unit="trial", file=sys.stderr, desc="sweep")

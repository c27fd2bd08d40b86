"""`explorer` on the command line: train presets or spec files, probe them, list registries. JSON out with --json.

Errors in a spec print the SpecError (field path and fix) and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

from explorer import settings
from explorer.papers import PAPERS
from explorer.parallel import BACKENDS
from explorer.registries import KINDS, SpecError, registry
from explorer.runs import StoreError, damaged_database, home
from explorer.spec import ExperimentSpec


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="explorer", description="Residual Explorer: train and inspect residual networks.")
    sub = parser.add_subparsers(dest="command", required=True)

    train = _with_spec_source(sub.add_parser("train", help="train a preset or a spec file"))
    train.add_argument("--json", action="store_true", help="print the run summary as JSON")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("--no-record", action="store_true", help="do not record the run in the run store (EXPLORER_HOME)")
    train.add_argument("--checkpoint-every", type=int, metavar="N",
                       help="also checkpoint every N steps, so a killed run can resume (`explorer runs resume`)")

    probe = _with_spec_source(sub.add_parser("probe", help="train a preset or spec briefly (or not at all) and probe "
                                                         "the model"))
    probe.add_argument("--train-steps", type=int, default=0, metavar="N", help="train N steps first (default 0: at init)")
    probe.add_argument("--probe", required=True, help="the probe (see `explorer list probes`)")
    probe.add_argument("--option", dest="options", action="append", default=[], metavar="NAME=VALUE",
                       help="a probe option, e.g. --option k=8 (repeatable)")
    probe.add_argument("--inputs", type=int, default=64, metavar="N", help="validation examples to probe with (default 64)")
    probe.add_argument("--json", action="store_true", help="print the result arrays as JSON")

    sweep = _with_spec_source(sub.add_parser("sweep", help="run a grid of values x seeds on local cores or Ray; every "
                                                         "trial is recorded"))
    sweep.add_argument("--grid", action="append", default=[], metavar="PATH=V1,V2,...",
                       help="values to sweep, e.g. --grid model.depth=10,30 (repeatable: the product is run)")
    sweep.add_argument("--seeds", type=int, default=1, help="seeds per grid point (train.seed, +1, ...)")
    _with_workers(sweep, "trials")
    sweep.add_argument("--label", default="", help="a label prefix for the recorded trials")
    sweep.add_argument("--json", action="store_true", help="print the list of trial summaries as JSON")

    claims = sub.add_parser("claims", help="check the papers' claims on real runs and print the table")
    claims.add_argument("--paper", choices=list(PAPERS), help="one paper only")
    claims.add_argument("--fast", action="store_true",
                        help="one seed and small runs (as in CI; also EXPLORER_FAST=1): decides only large effects")
    claims.add_argument("--id", dest="ids", action="append", metavar="ID", help="only this claim (repeatable)")
    claims.add_argument("--scale", choices=("cpu", "paper"), default="cpu",
                        help="cpu (default), or the paper-size spec where a claim has one (needs a GPU: --device cuda)")
    claims.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the paper-scale runs train")
    claims.add_argument("--json", action="store_true",
                        help="print every field of the claim results as JSON (statement, source, set-up, per-seed "
                             "numbers, rule, threshold, verdict) on stdout, alone (progress goes to stderr)")
    claims.add_argument("--reproduce", metavar="PAPER/ID",
                        help="rerun one seed of a recorded claim in full mode and print, per per-seed series, the "
                             "recorded and the rerun value and their difference, and both machines")
    claims.add_argument("--seed", type=int, metavar="N", help="with --reproduce: the recorded seed to rerun (default 0)")
    claims.add_argument("--recorded", action="store_true",
                        help="run nothing: show the full-mode results recorded with the package (3 seeds), with "
                             "when and where they were recorded")
    _with_workers(claims, "runs of a claim (its seeds and arms; one torch thread each)")
    claims.add_argument("--record", action="store_true",
                        help="full mode only: write the rows into the package's recorded results "
                             "(explorer/papers/claims_full.json), replacing those of the claims run")

    sub.add_parser("presets", help="list the presets")
    lister = sub.add_parser("list", help="list a registry's names")
    lister.add_argument("kind", choices=KINDS)
    lister.add_argument("--json", action="store_true", help="print {name: description} as JSON")

    runs = sub.add_parser("runs", help="list, show, export and delete recorded runs (in EXPLORER_HOME)")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    runs_list = runs_sub.add_parser("list", help="the recorded runs, newest first")
    runs_list.add_argument("--status", help="only runs with this status (running, finished, diverged, stopped, ...)")
    runs_list.add_argument("--limit", type=int, metavar="N", help="at most N runs")
    runs_list.add_argument("--json", action="store_true", help="print the runs as JSON")
    runs_show = runs_sub.add_parser("show", help="one run: status, spec, environment, final metrics")
    runs_show.add_argument("id", help="a run id or a unique prefix of one")
    runs_show.add_argument("--json", action="store_true", help="print everything (history and probes too) as JSON")
    runs_export = runs_sub.add_parser("export", help="write a run to .json (everything) or .csv (the history)")
    runs_export.add_argument("id", help="a run id or a unique prefix of one")
    runs_export.add_argument("path", type=Path, help="the file to write, ending in .json or .csv")
    runs_delete = runs_sub.add_parser("delete", help="remove a run and its checkpoint")
    runs_delete.add_argument("id", help="a run id or a unique prefix of one")
    runs_delete.add_argument("--force", action="store_true",
                             help="delete it even while a process trains it (that run's recording then fails)")
    runs_sub.add_parser("check", help="what the store holds and what is wrong with it (a damaged or missing "
                                      "database, checkpoints that do not load); exit 1 when something is")
    runs_resume = runs_sub.add_parser("resume", help="continue a stopped or interrupted run from its last checkpoint")
    runs_resume.add_argument("id", help="a run id or a unique prefix of one")
    runs_resume.add_argument("--json", action="store_true", help="print the run summary as JSON")
    return parser


def _with_workers(parser, what: str):
    """The flags of parallel runs (explorer.parallel), the same for sweeps and claims."""
    parser.add_argument("--workers", type=int, help=f"{what} at once, in worker processes (default: one per core; "
                                                    "1: one after the other in this process)")
    parser.add_argument("--backend", choices=BACKENDS, default="local",
                        help="local worker processes, or Ray tasks (the cluster at RAY_ADDRESS, else a local Ray)")
    parser.add_argument("--batched", action="store_true",
                        help="train the seeds of each grid point or arm as one stacked model (explorer.batched; its "
                             "members match their separate runs to float32 rounding)")
    return parser


def _with_spec_source(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--preset or --spec, and repeatable --set PATH=VALUE (read back by load_spec)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", help="a preset name (see `explorer presets`)")
    source.add_argument("--spec", type=Path, help="a spec JSON file")
    parser.add_argument("--set", dest="changes", action="append", default=[], metavar="PATH=VALUE",
                        help="change a value by its dotted path, e.g. --set model.depth=30 (repeatable)")
    parser.add_argument("--max-data-mb", type=int, metavar="MB",
                        help="memory one dataset may take (default: EXPLORER_MAX_DATA_MB, else 512)")
    parser.add_argument("--max-model-mb", type=int, metavar="MB",
                        help="memory training one model may take (default: EXPLORER_MAX_MODEL_MB, else 2048)")
    return parser


def _apply_caps(args) -> None:
    """--max-data-mb / --max-model-mb set EXPLORER_MAX_DATA_MB / EXPLORER_MAX_MODEL_MB for this process."""
    import os

    for flag, variable in (("max_data_mb", "EXPLORER_MAX_DATA_MB"), ("max_model_mb", "EXPLORER_MAX_MODEL_MB")):
        value = getattr(args, flag, None)
        if value is not None:
            if value < 1:
                raise SpecError(f"--{flag.replace('_', '-')}", "must be a positive number of megabytes")
            os.environ[variable] = str(value)


def load_spec(preset: str | None, spec_file: Path | None, changes: list[str]) -> ExperimentSpec:
    """The spec named on the command line, with --set changes applied, checked against the memory caps."""
    from explorer.papers import preset as load_preset

    if preset is not None:
        spec = load_preset(preset)
    else:
        spec = ExperimentSpec.from_json(_read_spec_file(spec_file))
    values = {}
    for change in changes:
        path, sep, value = change.partition("=")
        if not sep:
            raise SpecError("--set", f"{change!r} is not PATH=VALUE; write e.g. --set model.depth=30")
        values[path.strip()] = value.strip()
    spec = spec.with_values(values) if values else spec
    from explorer.budget import check

    check(spec)  # before any data or model is allocated
    return spec


def _read_spec_file(path: Path) -> str:
    """The text of a spec file, refused before reading when it is not a regular file (/dev/zero, a pipe, a
    folder) or larger than a spec can be."""
    import stat

    from explorer.spec import MAX_SPEC_BYTES

    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise SpecError("--spec", f"{path} is not a regular file; give a spec JSON file")
        if info.st_size > MAX_SPEC_BYTES:
            raise SpecError("--spec", f"{path} is {info.st_size:,} bytes, more than a spec can be "
                                      f"({MAX_SPEC_BYTES:,}); give a spec JSON file")
        with open(path, "rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise SpecError("--spec", f"cannot read {path}: {err.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError("--spec", f"{path} is not a UTF-8 text file; give a spec JSON file") from None


def _train(args) -> int:
    from explorer.training import out_of_memory, train

    spec = load_spec(args.preset, args.spec, args.changes)
    callbacks = [] if args.quiet or args.json else [_progress_bar(spec.train.steps)]
    recorder = None
    if not args.no_record:
        from explorer.runs import StoreRecorder

        recorder = StoreRecorder(label=args.preset, checkpoint_every=args.checkpoint_every)
        callbacks.insert(0, recorder)
    seen = []  # the run being trained, once it has started: the steps a failed run got through

    def keep(event) -> None:
        seen[:] = [event.run]

    try:
        run = train(spec, callbacks=[keep, *callbacks])
    except Exception as error:
        reason = out_of_memory(error)
        if recorder is not None:  # the run row ends as error (where the store still takes the write)
            recorder.fail(reason or f"{type(error).__name__}: {error}", seen[0] if seen else None)
        if reason is None:
            raise
        print(f"error: {reason}", file=sys.stderr)
        return 1
    _report(run, args.json, recorder.run_id if recorder else None)
    return 0


def _report(run, as_json: bool, run_id: str | None) -> None:
    summary = run.summary()
    if run_id is not None:
        summary["run_id"] = run_id
    if as_json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)


def _probe(args) -> int:
    import numpy as np

    from explorer.probes import PROBES, probe, validation_tensors
    from explorer.training import build, train

    spec = load_spec(args.preset, args.spec, args.changes)
    PROBES.lookup(args.probe, "--probe")  # an unknown probe is refused before anything trains
    if args.train_steps < 0 or args.inputs < 1:
        raise SpecError("--train-steps" if args.train_steps < 0 else "--inputs", "must be a positive number")
    if args.train_steps:
        steps = {"train.steps": args.train_steps, "train.log_every": min(spec.train.log_every, args.train_steps)}
        run = train(spec.with_values(steps), callbacks=[] if args.json else [_progress_bar(args.train_steps)])
        model, data = run.model, run.data
    else:
        model, data = build(spec)
    options = {}
    for item in args.options:
        key, sep, value = item.partition("=")
        if not sep:
            raise SpecError("--option", f"{item!r} is not NAME=VALUE; write e.g. --option k=8")
        options[key.strip()] = value.strip()
    x = data.x_val[:args.inputs]
    result = probe(model, x, args.probe, **validation_tensors(args.probe, data, args.inputs), **options)
    if args.json:
        print(json.dumps({"probe": args.probe, "train_steps": args.train_steps, "inputs": len(x),
                          "result": {k: _jsonable(np.asarray(v)) for k, v in result.items()}}))
    else:
        for key, value in result.items():
            value = np.asarray(value)
            if value.dtype.kind == "f" and value.size:
                finite = value[np.isfinite(value)]
                stats = f"min {finite.min():.4g}  max {finite.max():.4g}" if finite.size else "no finite values"
            else:
                stats = " ".join(map(str, value.ravel()[:6])) + (" ..." if value.size > 6 else "")
            print(f"{key:<26} shape {str(value.shape):<18} {stats}")
    return 0


def _jsonable(value):
    """Nested lists with NaN and infinities as None (JSON has neither)."""
    import numpy as np

    if value.dtype.kind == "f":
        return np.where(np.isfinite(value), value, None).tolist()
    return value.tolist()


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    bar = tqdm(total=total, unit="step", file=sys.stderr, mininterval=0.5)

    def on_event(event) -> None:
        if event.kind == "log":
            bar.update(event.step - bar.n)
            bar.set_postfix(loss=f"{event.metrics['loss']:.4g}")
        elif event.kind == "end":
            bar.close()

    return on_event


def _print_summary(summary: dict) -> None:
    lines = [f"status      {summary['status']}" + (f" at step {summary['diverged_at']}" if summary["diverged_at"] is not None else ""),
             f"steps       {summary['steps']}"]
    for key in ("final_loss", "final_val_loss", "final_val_accuracy"):
        if summary[key] is not None:
            lines.append(f"{key[6:]:<11} {summary[key]:.6g}")
    lines.append(f"time        {summary['wall_time']:.2f} s ({summary['steps_per_second']} steps/s on {summary['device']})")
    if summary.get("run_id"):
        lines.append(f"run         {summary['run_id'][:12]} (explorer runs show {summary['run_id'][:12]})")
    print("\n".join(lines))


def _list(kind: str, as_json: bool) -> int:
    names = registry(kind).describe()
    if as_json:
        print(json.dumps(names, indent=2))
    else:
        width = max(map(len, names), default=0)
        for name, description in names.items():
            print(f"{name:<{width}}  {description}")
    return 0


def _sweep(args) -> int:
    from explorer.sweeps import parse_grid, sweep

    spec = load_spec(args.preset, args.spec, args.changes)
    label = args.label or args.preset or ""
    try:
        rows = sweep(spec, parse_grid(args.grid), seeds=args.seeds, backend=args.backend, workers=args.workers,
                     batched=args.batched, label=label, progress=not args.json)
    except KeyboardInterrupt:
        print("interrupted: the trials finished so far are in the run store (explorer runs list)", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(rows))
        return 0
    width = max((len(r["label"]) for r in rows), default=0)
    for r in rows:
        if r["status"] == "failed":
            print(f"{r['run_id'][:12]}  {r['label']:<{width}}  failed: {r['error']}")
            continue
        status = r["status"] + (f" at step {r['diverged_at']}" if r.get("diverged_at") is not None else "")
        loss = r.get("final_val_loss")
        print(f"{r['run_id'][:12]}  {r['label']:<{width}}  {status:<20} val loss {'-' if loss is None else f'{loss:.4g}'}")
    return 0


def _claims(args) -> int:
    """`explorer claims`: run the claims and print the table (or JSON); exit 0 whatever the verdicts."""
    from explorer.papers.claims import record, recorded, run_claims, select, table

    if args.seed is not None and args.reproduce is None:
        raise SpecError("--seed", "picks the seed of --reproduce PAPER/ID: add --reproduce, or drop --seed")
    if args.reproduce is not None:
        return _reproduce(args)
    if args.recorded:
        stored = recorded(args.paper)
        rows = [r for r in stored["rows"] if args.ids is None or r["id"] in args.ids]
        if args.json:
            print(json.dumps({"about": stored["about"], "rows": rows}))
        else:
            about = stored["about"]
            for when in [about, *about.get("earlier", [])]:  # the newest recording first
                print(f"Recorded {when.get('date', '?')} on {when.get('machine', '?')}: {when.get('command', '?')}")
            print(f"{about['note']}. " if about.get("note") else "", end="")
            print("A claim marked STALE has changed since it was recorded.\n")
            print(table([{**r, "verdict": r["verdict"] + (" (STALE)" if r["stale"] else "")} for r in rows]))
        return 0
    fast = args.fast or settings.fast_mode()
    if args.record and (fast or args.scale != "cpu"):
        raise SpecError("--record", "only full-mode CPU-scale results are recorded: drop --fast (and EXPLORER_FAST=1) "
                                    "and --scale paper")
    if args.record and settings.papers_cache_dir() is not None:
        raise SpecError("--record", "a recorded row states the seconds its runs took here: unset "
                                    "EXPLORER_PAPERS_CACHE_DIR, so that no run is read from another process's folder")
    total = len(select(args.paper, args.ids))  # an unknown id is refused before anything starts
    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    if workers < 1:
        raise SpecError("--workers", f"must be at least 1, got {workers}")
    done = []
    bar = _claims_bar(total)

    def show(row) -> None:
        done.append(row)
        bar.write(f"[{len(done)}/{total}] {row['paper']}/{row['id']} ({row['section']}): {row['verdict']}"
                  f" in {row['seconds']:.1f} s", file=sys.stderr)
        bar.update(1)

    def progress(state) -> None:
        bar.set_postfix_str(state.text(), refresh=True)

    started = time.time()
    try:
        rows = run_claims(args.paper, fast=fast, ids=args.ids, callback=show, scale=args.scale, device=args.device,
                          workers=workers, backend=args.backend, batched=args.batched, progress=progress)
    finally:
        bar.close()
    if args.record:
        path = record(rows, started=started, workers=workers, backend=args.backend, batched=args.batched)
        print(f"recorded {len(rows)} rows in {path}", file=sys.stderr)
    print(json.dumps(rows) if args.json else table(rows))
    return 0


def _reproduce(args) -> int:
    """`explorer claims --reproduce PAPER/ID [--seed N]`: rerun one recorded seed, print recorded vs now (JSON with
    --json)."""
    from explorer.papers.claims import reproduce

    key = args.reproduce if "/" in args.reproduce or args.paper is None else f"{args.paper}/{args.reproduce}"
    result = reproduce(key, 0 if args.seed is None else args.seed)
    if args.json:
        print(json.dumps(result))
        return 0
    was, now = result["recorded"], result["now"]
    print(f"{result['key']}, seed {result['seed']}, rerun in full mode in {result['seconds']:.1f} s")
    if was is None:
        print("machine: the row does not store one; this one: " + ", ".join(f"{k} {v}" for k, v in now.items()))
    else:
        for name in now:
            print(f"machine {name}: recorded {was.get(name, '-')}; now {now[name]}"
                  f"{'' if was.get(name) == now[name] else ' (differs)'}")
    for name, before, after, difference in result["series"]:
        print(f"{name}:\n  recorded {before}\n  now      {after}\n  "
              f"difference {'(not numbers, and they differ)' if difference is None else difference}")
    return 0


def _claims_bar(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="claim", desc="claims", file=sys.stderr, dynamic_ncols=True)


def _runs(args) -> int:
    """`explorer runs list|show|export|delete|check|resume`: the run store in EXPLORER_HOME (see explorer.runs).
    A listing that skips damaged runs says so on stderr (stdout stays the listing)."""
    import datetime

    from explorer.runs import check_store, default_store

    if args.runs_command == "check":  # must work on a store too damaged to open
        facts, problems = check_store()
        print("\n".join(facts + [f"problem     {p}" for p in problems] + ([] if problems else ["ok"])))
        return 1 if problems else 0
    store = default_store()

    def when(t: float) -> str:
        return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")

    if args.runs_command == "list":
        records = store.list(status=args.status, limit=args.limit)
        if records.notice():
            print(f"note: {records.notice()}", file=sys.stderr)
        if args.json:
            print(json.dumps(records, indent=2))
            return 0
        if not records:
            print("no runs recorded" + (f" with status {args.status!r}" if args.status else ""))
        for r in records:
            loss = (r["final"] or {}).get("loss")
            loss = "-" if loss is None else f"{loss:.4g}"
            print(f"{r['id'][:12]}  {when(r['created'])}  {r['status']:<9} {r['steps_done']:>7} steps  "
                  f"loss {loss:<10} {r['label'] or ''}".rstrip())
        return 0
    if args.runs_command == "show":
        record = store.get(args.id, arrays=False)
        if args.json:
            print(json.dumps(record, indent=2))
            return 0
        env = record["environment"] or {}
        lines = [f"id          {record['id']}", f"label       {record['label'] or '-'}",
                 f"status      {record['status']}" + (f" at step {record['diverged_at']}" if record["diverged_at"] is not None else ""),
                 f"created     {when(record['created'])}   updated {when(record['updated'])}",
                 f"steps       {record['steps_done']}   wall time {record['wall_time'] or 0:.2f} s",
                 "spec        " + "  ".join(f"{k}={v['name']}" for k, v in record["spec"].items() if "name" in v),
                 f"history     {len(record['history'])} rows   probes {len(record['probes'])} results",
                 f"environment torch {env.get('torch')}, python {env.get('python')}, {env.get('device')} on {env.get('hostname')}",
                 f"checkpoint  {record['checkpoint'] or '-'}"]
        for key, value in (record["final"] or {}).items():
            if key == "error":
                lines.append(f"error       {value}")
            elif key != "step" and isinstance(value, (int, float)):
                lines.append(f"final {key:<12} {value:.6g}")
        print("\n".join(lines))
        return 0
    if args.runs_command == "export":
        try:
            path = store.export(args.id, args.path)
        except OSError as err:
            raise SpecError("PATH", f"cannot write {args.path}: {err.strerror}") from None
        print(f"wrote {path}")
        return 0
    if args.runs_command == "resume":
        from explorer.runs import resume

        run = resume(args.id, store)
        _report(run, args.json, store.resolve(args.id))
        return 0
    print(f"deleted {store.delete(args.id, force=args.force)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code = _command(args)
        sys.stdout.flush()  # here, so that a reader that has gone away is noticed inside the try
        return code
    except BrokenPipeError:  # the reader stopped early (`explorer runs list | head -5`): nothing left to say
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a writer whose reader went away
    except (SpecError, StoreError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as err:  # the run store went bad while it was read
        print(f"error: {damaged_database(home() / 'runs.sqlite', err)}", file=sys.stderr)
        return 2


def _command(args) -> int:
    """Run the parsed command; its exit status."""
    _apply_caps(args)
    if args.command == "train":
        return _train(args)
    if args.command == "probe":
        return _probe(args)
    if args.command == "runs":
        return _runs(args)
    if args.command == "sweep":
        return _sweep(args)
    if args.command == "claims":
        return _claims(args)
    if args.command == "presets":
        return _list("presets", False)
    return _list(args.kind, args.json)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's flush at exit does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor (captured in tests)
        pass


if __name__ == "__main__":
    sys.exit(main())

"""The design challenge: wire a deep linear network with at most two shortcuts so that it trains fastest.

The task is Case Study 3.1 of "ANCRe: Adaptive Neural Connection Reassignment for Efficient Depth Scaling"
(Sec. 3.1-3.2): whitened regression with a rank-4 target, a K-layer linear network from a small random
initialisation, full-batch gradient descent. Where a shortcut goes decides whether gradient descent converges at a
linear rate or a sublinear one, so the number of steps to a small loss is a fair score. A shortcut i:j is the
library's (explorer.topology.SHORTCUT_NOTATION), and the answer's text says it with `describe_shortcut`. The
notebooks' design widget and the app share these rules:

    from explorer import challenge
    run = challenge.train_design("0:4")
    challenge.score(run)          # first logged step with training loss <= CHALLENGE.target_loss
    challenge.reference()         # the papers' answer and its measured steps

A run is scored only when it trained the challenge's set-up with a valid design from start to end; otherwise
`design_of` and `judge` say in one line why not (the field that differs and its value, a rewire, a stop).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from explorer.papers import PAPERS, preset
from explorer.registries import SpecError, quote
from explorer.spec import ExperimentSpec
from explorer.topology import describe_shortcut, parse_shortcuts, shortcuts_text
from explorer.training import Run, StopTraining, train

PATH = "topology.shortcuts"
_NO_SHORTCUT = ("", "none")  # designs that mean the plain chain W_K ... W_1


@dataclass(frozen=True)
class Challenge:
    """The task: `depth` blocks, at most `max_shortcuts` shortcuts, reach `target_loss` in the fewest steps of
    `base` (the case-study net without shortcuts; its `train.steps` is the step cap, logged every step)."""

    text: str
    depth: int
    target_loss: float
    max_shortcuts: int
    base: ExperimentSpec


def _base(depth: int, steps: int) -> ExperimentSpec:
    """ANCRe's case-study linear net (the Figure 2a preset) at `depth` blocks, no shortcut, logged every step."""
    return preset("ancre-fig2a-K4").with_values({"model.depth": depth, "train.steps": steps, "train.log_every": 1})


# Depth 5: the net without shortcuts does not leave its starting loss within the cap, 0:1 and 0:5 stall, and the
# papers' shortcut 0:4 reaches 1e-6 in under 150 steps, so a try is quick on a CPU and poor designs show clearly.
_DEPTH, _CAP = 5, 1000
CHALLENGE = Challenge(
    text=(f"Train a depth-{_DEPTH} linear net to training loss 1e-6 in the fewest gradient steps with at most two "
          "shortcuts i:j."),
    depth=_DEPTH,
    target_loss=1e-6,
    max_shortcuts=2,
    base=_base(_DEPTH, _CAP),
)


def _weights(design: str) -> dict[tuple[int, int], float]:
    """{(i, j): weight} of a design; SpecError naming topology.shortcuts when it is not a valid one."""
    if not isinstance(design, str):
        raise SpecError(PATH, f"a design is text such as '0:{CHALLENGE.depth - 1}' or '1:2,3:4', not "
                              f"{type(design).__name__}")
    if design.strip().lower() in _NO_SHORTCUT:
        return {}
    weights = parse_shortcuts(design, CHALLENGE.depth, PATH)
    if len(weights) > CHALLENGE.max_shortcuts:
        raise SpecError(PATH, f"{len(weights)} shortcuts, but the challenge allows at most "
                              f"{CHALLENGE.max_shortcuts}; remove {len(weights) - CHALLENGE.max_shortcuts}")
    return weights


def design_text(design: str) -> str:
    """The canonical text of a valid design ("none" for no shortcut), so the same design reads the same."""
    return shortcuts_text(_weights(design)) or "none"


def challenge_spec(design: str) -> ExperimentSpec:
    """The challenge's base spec wired with `design` ("0:4", "1:2,3:4", "0:4*0.5"; "" or "none" for no shortcut).

    A SpecError naming topology.shortcuts refuses a design that does not parse, leaves the net's blocks or has
    more than CHALLENGE.max_shortcuts shortcuts (a weighted shortcut counts as one)."""
    weights = _weights(design)
    if not weights:
        return CHALLENGE.base
    return CHALLENGE.base.with_values({"topology.name": "shortcuts", PATH: shortcuts_text(weights)})


IGNORED = ("train.device",)  # fields a scored run may set as it likes: where it trains is not the task


def design_of(spec: ExperimentSpec) -> str:
    """The canonical design `spec` trains ("0:4", "0:4*0.5,1:3"; "none" for the plain chain), so "0:4 ", "0:4*1"
    and "0:4" are one design. A SpecError in one line refuses a spec that is not the challenge's set-up wired with
    a valid design: it names the first field that differs, its value and the challenge's (topology.shortcuts for
    a design that breaks the rules)."""
    if not isinstance(spec, ExperimentSpec):
        raise SpecError("spec", f"expected an ExperimentSpec, got {type(spec).__name__}")
    topology = spec.topology
    if topology.name not in ("none", "shortcuts"):
        raise SpecError("topology.name", f"is {quote(topology.name)} here; the challenge wires the net with "
                                         "shortcuts (topology.name=shortcuts) or none")
    design = design_text(topology.params["shortcuts"] if topology.name == "shortcuts" else "none")
    wanted = challenge_spec(design)
    for section in ("data", "model", "topology", "init", "optim", "train"):
        have, want = getattr(spec, section).to_dict(), getattr(wanted, section).to_dict()
        for key in dict.fromkeys([*want, *have]):
            path = f"{section}.{key}"
            if path in IGNORED or path == PATH or have.get(key) == want.get(key):
                continue
            if key == "name" or key not in want or key not in have:
                raise SpecError(f"{section}.name", f"is {quote(have.get('name'))} here; the challenge's set-up has "
                                                   f"{quote(want.get('name'))}: load the challenge to score a run")
            raise SpecError(path, f"is {quote(have[key])} here; the challenge's set-up has {quote(want[key])}: "
                                  f"set {path}={want[key]} (or load the challenge) to score a run")
    return design


def judge(spec: ExperimentSpec, history: Sequence[Mapping[str, Any]], status: str = "finished",
          rewires: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """An ended run's row in a session's table: its `entry` (status "finished" or "diverged", or stopped once it
    reached the target, as `train_design` stops), or {"design": the design or None, "why": one line} when it is
    not scored: not the challenge's set-up (see `design_of`), rewired while it trained, or ended before the target
    and the cap."""
    try:
        design = _check_scored(spec, rewires)
    except SpecError as error:
        return {"design": None, "why": str(error)}
    history = list(history)
    if status not in ("finished", "diverged") and score(history) is None:
        last = history[-1]["step"] if history else 0
        return {"design": design, "why": f"{status} at step {last}, before it reached {CHALLENGE.target_loss:g} "
                                         f"or the {CHALLENGE.base.train.steps}-step cap; train it to the end to "
                                         "score it"}
    return entry(design, SimpleNamespace(history=history, final=history[-1] if history else {}))


def score(run_or_history: Run | Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> int | None:
    """The first logged step whose training loss is at most CHALLENGE.target_loss; None when none is.

    Takes a Run, a run summary (a dict with "history") or the history itself (rows with "step" and "loss"). A Run
    or a summary that is not a run of the challenge (see `judge`) is a SpecError saying why it is not scored."""
    history = getattr(run_or_history, "history", run_or_history)
    if isinstance(run_or_history, Run):
        _check_scored(run_or_history.initial_spec or run_or_history.spec, run_or_history.rewires)
    elif isinstance(history, Mapping):
        if "spec" in history:
            _check_scored(ExperimentSpec.from_dict(history.get("initial_spec", history["spec"]), runnable=False),
                          history.get("rewires") or ())
        history = history.get("history") or []
    for row in history:
        loss = row.get("loss")
        if loss is not None and math.isfinite(loss) and loss <= CHALLENGE.target_loss:
            return int(row["step"])
    return None


def _check_scored(spec: ExperimentSpec, rewires: Sequence[Mapping[str, Any]]) -> str:
    """The design of a run of `spec` changed by `rewires`; SpecError, in one line, unless it can be scored."""
    design = design_of(spec)
    if rewires:
        raise SpecError("rewires", f"the run was rewired at step {rewires[0].get('step')}: a design changed while "
                                   "it trains is not scored; train the design you ended with from the start")
    return design


def stop_at_target(event: Any) -> None:
    """A training callback that stops the run at the first logged step that reaches the target: the steps after
    it cannot change the score."""
    loss = (event.metrics or {}).get("loss") if event.kind == "log" else None
    if loss is not None and math.isfinite(loss) and loss <= CHALLENGE.target_loss:
        raise StopTraining


def train_design(design: str, callbacks: Iterable[Callable[[Any], Any]] = (), stop: Any = None) -> Run:
    """Train `design` on the challenge until it reaches the target or the step cap; `callbacks` and `stop` as in
    explorer.train (e.g. explorer.plots.training_progress for a progress bar)."""
    return train(challenge_spec(design), callbacks=[*callbacks, stop_at_target], stop=stop)


def entry(design: str, run: Run) -> dict[str, Any]:
    """One row of a session's table of designs tried: design, shortcuts, steps (the score; None when the target
    was not reached within the cap) and the last training loss."""
    weights = _weights(design)
    final = run.final.get("loss")
    return {"design": shortcuts_text(weights) or "none", "shortcuts": len(weights), "steps": score(run),
            "final_loss": final if final is None or math.isfinite(final) else None}


def ranked(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A session's table, best first: designs that reached the target by steps (equal steps: the lower last loss,
    the run that went further below the target by then), then the others by last loss; each design once (its best
    try). Rows that tie on both keep their order."""

    def key(row):
        steps, loss = row.get("steps"), row.get("final_loss")
        loss = math.inf if loss is None else loss
        return (0, steps, loss) if steps is not None else (1, 0, loss)

    best: dict[str, dict[str, Any]] = {}
    for row in sorted((dict(r) for r in entries), key=key):
        best.setdefault(row["design"], row)
    return list(best.values())


REFERENCE_DESIGN = f"0:{CHALLENGE.depth - 1}"


def loss_text(loss: float | None) -> str:
    """A last loss as a table shows it: 3 significant digits, scientific when small ("4e-13"); "not finite" for
    None (a diverged run)."""
    return "not finite" if loss is None or not math.isfinite(loss) else f"{loss:.3g}"


def against_answer(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """One line comparing a table of designs tried (`ranked`) with the papers' answer REFERENCE_DESIGN, once the
    table has scored the answer: which design beat it and by how many steps, or that none has yet. None while the
    answer is not in the table (its steps are unknown here) or nothing reached the target."""
    scored = [row for row in rows if row.get("steps") is not None]
    answer = next((row for row in scored if row["design"] == REFERENCE_DESIGN), None)
    if answer is None:
        return None
    best = min(scored, key=lambda row: row["steps"])
    if best["steps"] < answer["steps"]:
        return (f"A design in the table beat the answer: {best['design']} reached {CHALLENGE.target_loss:g} in "
                f"{best['steps']} steps against {REFERENCE_DESIGN} in {answer['steps']}. {REFERENCE_DESIGN} is the "
                f"papers' best single shortcut; the rules allow {CHALLENGE.max_shortcuts}, and a second one can "
                "shorten the path from the input.")
    return (f"No design in the table beat the answer yet: {REFERENCE_DESIGN} reached {CHALLENGE.target_loss:g} in "
            f"{answer['steps']} steps.")


def _why() -> str:
    """The papers' answer in words: why 0:K-1, why not 0:1, and why two shortcuts can beat it."""
    k = CHALLENGE.depth

    def says(i: int, j: int) -> str:
        return describe_shortcut(i, j, k)

    return (f"{PAPERS['ancre'].title}, Sec. 3.2: by Theorem 3.3, extended to K layers in Appendix B.4, the single "
            "shortcut 0:K-1 makes gradient flow from a small initialisation converge at a linear (exponential) rate. "
            f"Here {says(0, k - 1)}, so the last block sees the input itself and learns the regression at once, "
            f"while the product of the deeper blocks grows from its small start. In contrast, {says(0, 1)}; by "
            "Theorem 3.2 it converges only sublinearly (loss at least of order 1/t^2). "
            f"{REFERENCE_DESIGN} is the papers' single-shortcut answer, but the rules allow "
            f"{CHALLENGE.max_shortcuts}, and a second one from the input beats it: with 0:2 as well, x_{k - 1} = x_0 + W_{k - 1} W_{k - 2} x_0 "
            f"+ W_{k - 1} ... W_1 x_0, so the last block's input gains a shorter trainable path from the input "
            f"(W_{k - 1} W_{k - 2} x_0), which grows faster from the small start and saves a few steps; 0:3 as "
            f"well (the path W_{k - 1} x_0) saves more.")


_WHY = _why()


@functools.lru_cache(maxsize=2)
def reference(measure: bool = True) -> dict[str, Any]:
    """The papers' answer: {"design", "steps" (measured by training it, once per process; None with
    measure=False, for a server that trains nothing in its own process), "why"}."""
    return {"design": REFERENCE_DESIGN, "steps": score(train_design(REFERENCE_DESIGN)) if measure else None,
            "why": _WHY}

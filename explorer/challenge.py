"""The design challenge: wire a deep linear network with at most two shortcuts so that it trains fastest.

The task is ANCRe's case study 3.1 (000_c5b5d97025f97627.txt, Sec. 3.1-3.2): whitened regression with a rank-4
target, a K-layer linear network from a small random initialisation, full-batch gradient descent. Where a
shortcut goes decides whether gradient descent converges at a linear rate or a sublinear one, so the number of
steps to a small loss is a fair score. The notebooks' design widget and the app share these rules:

    from explorer import challenge
    run = challenge.train_design("0:4")
    challenge.score(run)          # first logged step with training loss <= CHALLENGE.target_loss
    challenge.reference()         # the papers' answer and its measured steps
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from explorer.papers import preset
from explorer.registries import SpecError
from explorer.spec import ExperimentSpec
from explorer.topology import parse_shortcuts, shortcuts_text
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


def score(run_or_history: Run | Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> int | None:
    """The first logged step whose training loss is at most CHALLENGE.target_loss; None when none is.

    Takes a Run, a run summary (a dict with "history") or the history itself (rows with "step" and "loss")."""
    history = getattr(run_or_history, "history", run_or_history)
    if isinstance(history, Mapping):
        history = history.get("history") or []
    for row in history:
        loss = row.get("loss")
        if loss is not None and math.isfinite(loss) and loss <= CHALLENGE.target_loss:
            return int(row["step"])
    return None


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
    """A session's table, best first: designs that reached the target by steps, then the others by last loss;
    each design once (its best try)."""

    def key(row):
        steps, loss = row.get("steps"), row.get("final_loss")
        return (0, steps, 0.0) if steps is not None else (1, 0, math.inf if loss is None else loss)

    best: dict[str, dict[str, Any]] = {}
    for row in sorted((dict(r) for r in entries), key=key):
        best.setdefault(row["design"], row)
    return list(best.values())


REFERENCE_DESIGN = f"0:{CHALLENGE.depth - 1}"
_WHY = (f"ANCRe (000_c5b5d97025f97627.txt), Sec. 3.2: by Theorem 3.3, extended to K layers in Appendix B.4, the "
        f"single shortcut 0:K-1 ({REFERENCE_DESIGN} here) from the input to the last layer's input makes gradient flow "
        "from a small initialisation converge at a linear (exponential) rate, while by Theorem 3.2 the shortcut 0:1 "
        "converges only sublinearly (loss at least of order 1/t^2). The last layer then sees the input itself and "
        "learns the regression at once, while the product of the deeper layers grows from its small start.")


@functools.lru_cache(maxsize=2)
def reference(measure: bool = True) -> dict[str, Any]:
    """The papers' answer: {"design", "steps" (measured by training it, once per process; None with
    measure=False, for a server that trains nothing in its own process), "why"}."""
    return {"design": REFERENCE_DESIGN, "steps": score(train_design(REFERENCE_DESIGN)) if measure else None,
            "why": _WHY}

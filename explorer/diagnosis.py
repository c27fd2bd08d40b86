"""A diagnosis of a run in the papers' own terms: what their theories speak about, measured on this model.

    diagnosis = explorer.diagnose(spec, run=run)
    diagnosis.quantities      # name, measured, predicted or threshold, paper and section, verdict
    diagnosis.summary_lines(run)  # three short lines: what grew, the bound it broke, what to try
    diagnosis.explain(run)    # the full paragraph when the run diverged or stalled
    diagnosis.table()         # the quantities as rows, their verdicts in words

Every quantity is measured on the model built from the spec with its seed (at initialisation, no training);
with a run (or a model) the ones that make sense on trained weights are measured on its final weights too.
A quantity's verdict says how it stands against its paper: "explains" (its rule accounts for the run's
divergence or stall), "consistent" (measured as the theory predicts, or inside its bound), "differs" (outside
the predicted range) or "n/a" (the paper predicts no number for this model); `Quantity.why` says what differs
from what, or why nothing applies, and `Diagnosis.table` shows the verdict in those words. A run the rules do
not account for is said to be unexplained, never given a cause.

`summary_lines` are short enough for a projector (at most SUMMARY_WIDTH characters each) and quote the same
formatted numbers as `explain`'s paragraph, which stays the detail.

The rules belong to the papers: each paper's module (explorer/papers/<id>.py) passes its `diagnosis(context)` to its
`Paper` record, which registers it here (`register_rules`), with the probes it runs for the memory check. A rule
reads the `Context` (the spec, the model at initialisation and after training, the data, the validation inputs)
and adds its `Quantity` rows, the `Rule`s that explain a failure, and notes on settings that differ from the
paper's. This module holds only the framework: the records, the outcome of a run, the texts, and the stream growth
that the tau paper's rule and its claims both read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from explorer import budget
from explorer.registries import SpecError
from explorer.spec import ExperimentSpec
from explorer.training import build

__all__ = ["Context", "Diagnosis", "Quantity", "Rule", "diagnose", "outcome", "register_rules"]

STALL_FRACTION = 0.95  # stalled: the last logged loss is still at least this share of the first one
INPUTS = 128  # validation examples the stream norms are measured on (as the tau claims measure them)
JACOBIAN_INPUTS = 4  # of those, the ones an input-output Jacobian is computed on
JACOBIAN_MAX_DIM = 512  # a Jacobian only for streams of at most this many numbers per example (a backward pass each)
SUMMARY_WIDTH = 90  # the most characters a summary line is written to hold (a projector's line)


@dataclass(frozen=True)
class Quantity:
    """One measured quantity set against a paper: `measured` and `predicted` are short texts with the numbers,
    `value` the measured number itself (NaN where undefined), `paper` names the paper and its section, `why`
    what differs from what (verdict "differs"), why the paper gives no verdict ("n/a"), or how it agrees."""

    name: str
    measured: str
    predicted: str
    paper: str
    verdict: str  # "explains", "consistent", "differs" or "n/a"
    value: float = math.nan
    why: str = ""

    @property
    def verdict_text(self) -> str:
        """The verdict in words, for a reader who does not know the codes."""
        if self.verdict == "n/a":
            return f"not applicable: {self.why or 'the paper predicts no number for this model'}"
        if self.verdict == "differs":
            return f"differs: {self.why or 'outside the prediction of the paper'}"
        if self.verdict == "consistent":
            return f"agrees: {self.why or 'as the paper predicts'}"
        return "explains the failure" if self.verdict == "explains" else self.verdict


@dataclass(frozen=True)
class Outcome:
    """What a run came to, read from a Run, a job's view or a stored run's record (`outcome`)."""

    status: str
    diverged_at: int | None
    first_loss: float | None
    last_loss: float | None

    @property
    def diverged(self) -> bool:
        return self.status == "diverged"

    @property
    def stalled(self) -> bool:
        """Not diverged, and the last logged loss is within (1 - STALL_FRACTION) of the first one."""
        if self.diverged or self.first_loss is None or self.last_loss is None:
            return False
        if not (math.isfinite(self.first_loss) and math.isfinite(self.last_loss)) or self.first_loss <= 0:
            return False
        return self.last_loss >= STALL_FRACTION * self.first_loss

    @property
    def failed(self) -> bool:
        return self.diverged or self.stalled


def outcome(run: Any) -> Outcome:
    """The outcome of `run`: an explorer.Run, anything with `status`, `diverged_at` and `history` attributes
    (the app's job views) or a dict with those keys (a stored run's record)."""
    get = run.get if isinstance(run, dict) else lambda key, default=None: getattr(run, key, default)
    history = [row for row in (get("history") or []) if row.get("loss") is not None]
    losses = [float(row["loss"]) for row in history]
    return Outcome(str(get("status") or ""), get("diverged_at"), losses[0] if losses else None,
                   losses[-1] if len(losses) > 1 else None)


@dataclass(frozen=True)
class Rule:
    """A rule that fires on this model: the sentence that explains a failure, what to try, and which failures;
    `short` is the sentence in two short lines (what grew, the bound it broke) and `try_short` the remedy in a
    few words, with the sentence's numbers."""

    quantity: str
    sentence: str
    remedy: str
    on: tuple[str, ...]  # "diverged", "stalled"
    short: tuple[str, str] = ("", "")
    try_short: str = ""


@dataclass(frozen=True)
class Diagnosis:
    """The quantities measured on one spec's model (see the module docstring) and the rules that fire on it."""

    spec: ExperimentSpec
    quantities: tuple[Quantity, ...]
    rules: tuple[Rule, ...] = ()
    notes: tuple[str, ...] = ()  # settings that differ from a paper's, said when a run failed
    tries: tuple[str, ...] = ()  # the notes' advice in a few words, for the summary's last line
    run: Outcome | None = field(default=None, compare=False)

    def quantity(self, name: str) -> Quantity | None:
        """The quantity called `name`, or None when it does not apply to this model."""
        return next((q for q in self.quantities if q.name == name), None)

    def explanations(self, run: Any = None) -> list[Rule]:
        """The rules that explain `run`'s failure (the run diagnosed when None); empty when it did not fail."""
        result = outcome(run) if run is not None else self.run
        if result is None or not result.failed:
            return []
        kind = "diverged" if result.diverged else "stalled"
        return [rule for rule in self.rules if kind in rule.on]

    def explain(self, run: Any = None) -> str:
        """One or two sentences on why `run` (a Run, a job view or a stored record; the run diagnosed when None)
        diverged or stalled, with the numbers and the paper's section, and what to try; when no rule of the
        papers explains it, says so and lists the generic suspects without naming a cause."""
        result = outcome(run) if run is not None else self.run
        if result is None:
            return "No run given: nothing to explain (the quantities are measured at initialisation)."
        if not result.failed:
            return "The run neither diverged nor stalled: nothing to explain."
        what = f"diverged at step {result.diverged_at}" if result.diverged else \
            f"stalled (its loss went from {result.first_loss:.4g} to {result.last_loss:.4g})"
        rules = self.explanations(run)
        notes = " ".join(self.notes)
        if rules:
            text = " ".join(f"{rule.sentence} Try {rule.remedy}." for rule in rules[:2])
            return text + (f" {notes}" if notes else "")
        lr = self.spec.optim.params.get("lr")
        suspects = f"the learning rate (lr = {lr:g}: try it 10x smaller)" if lr is not None else "the learning rate"
        return (f"No rule of the papers explains why this run {what}: " + self._summary() +
                f" Generic suspects, not a diagnosis: {suspects}, the batch size, the init's scale." +
                (f" {notes}" if notes else ""))

    def summary_lines(self, run: Any = None) -> list[str]:
        """Three short lines on why `run` (as `explain` takes it) diverged or stalled: what grew, the bound it
        broke (the paper and section), what to try. The numbers are `explain`'s, formatted the same; each line
        holds about SUMMARY_WIDTH characters. One line when there is nothing to explain; for a failure no rule
        explains: what happened, that no rule of the papers explains it, and the generic suspects."""
        result = outcome(run) if run is not None else self.run
        if result is None or not result.failed:
            return [self.explain(run)]
        rules = self.explanations(run)
        if rules:
            rule = rules[0]
            tries = [rule.try_short, *self.tries]
            return [*rule.short, "Try " + ", or ".join(t for t in tries if t) + "."]
        what = f"The run diverged at step {result.diverged_at}." if result.diverged else \
            f"The run stalled: its loss went from {result.first_loss:.4g} to {result.last_loss:.4g}."
        lr = self.spec.optim.params.get("lr")
        suspects = f"lr = {lr:g} (try 10x smaller)" if lr is not None else "the learning rate"
        return [what, "No rule of the papers explains it; their quantities are in the detail.",
                f"Generic suspects, not a diagnosis: {suspects}, batch size, init scale."]

    def _summary(self) -> str:
        shown = [f"{q.name} {q.measured} ({q.verdict})" for q in self.quantities if q.verdict != "n/a"]
        return ("; ".join(shown) + ".") if shown else "none of their quantities applies to this model."

    def table(self) -> list[dict[str, str]]:
        """The quantities as rows for a table, the verdict first and in words (`Quantity.verdict_text`), then the
        quantity, measured, predicted or threshold, and paper."""
        return [{"verdict": q.verdict_text, "quantity": q.name, "measured": q.measured,
                 "predicted / threshold": q.predicted, "paper": q.paper} for q in self.quantities]


@dataclass
class Context:
    """What a paper's rules read, and where they write (see `register_rules`): `initial` is the spec's model at
    initialisation (its seed, on the CPU), `model` the final weights of the run diagnosed (None without a run),
    `x` the first INPUTS validation inputs; `jacobian` False leaves out the measurements that take a backward
    pass per stream number."""

    spec: ExperimentSpec
    initial: nn.Module
    model: nn.Module | None
    data: Any
    x: torch.Tensor
    jacobian: bool
    quantities: list[Quantity] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # settings that differ from a paper's, said when a run failed
    tries: list[str] = field(default_factory=list)  # the notes' advice in a few words, for the summary's last line

    @property
    def has_stream(self) -> bool:
        """Whether the model has a residual stream to measure: an embedding and a block stack."""
        return hasattr(self.initial, "embed") and hasattr(self.initial, "stack")


@dataclass(frozen=True)
class _Registered:
    paper: str
    rules: Callable[[Context], None]
    probes: Callable[[bool], dict[str, dict]]  # jacobian -> {probe: options} run on the INPUTS validation inputs
    batch_probes: dict[str, dict]  # {probe: options} costed on one training batch


_RULES: dict[str, _Registered] = {}


def register_rules(paper: str, rules: Callable[[Context], None], probes: Callable[[bool], dict[str, dict]] | None = None,
                   batch_probes: dict[str, dict] | None = None) -> None:
    """Register `paper`'s `rules(context)` (explorer.papers.base.register_paper does, from the Paper record).
    `probes(jacobian)` names the probes the rules run on the validation inputs and `batch_probes` those on one
    training batch, so `diagnose` checks the memory budget before building anything."""
    if paper in _RULES:
        raise ValueError(f"the diagnosis rules of paper {paper!r} are registered twice")
    _RULES[paper] = _Registered(paper, rules, probes or (lambda jacobian: {}), dict(batch_probes or {}))


def diagnose(spec: ExperimentSpec, run: Any = None, model: nn.Module | None = None, *,
             jacobian: bool = True, inputs: int = INPUTS) -> Diagnosis:
    """Measure the papers' quantities on `spec`'s model at initialisation (built with the spec's seed, on the
    CPU), and on the final weights of `run` (an explorer.Run) or `model` when given: every registered paper's
    rules, in the papers' order. `run` may also be a job view or a stored run's record: then only its outcome is
    read (for `Diagnosis.explain`). jacobian=False leaves out the measurements that take a backward pass per
    stream number (the slow part). SpecError before anything is built when the model, or probing it as the rules
    do, would pass the memory caps (explorer.budget)."""
    if not isinstance(spec, ExperimentSpec):
        raise SpecError("spec", f"expected an ExperimentSpec, got {type(spec).__name__}; pass explorer.preset(...) "
                                "or ExperimentSpec.from_dict(...)")
    for registered in _RULES.values():
        budget.check_probes(spec, registered.probes(jacobian), inputs)
        budget.check_probes(spec, registered.batch_probes, spec.train.batch_size)
    initial, data = build(spec, device="cpu")
    if model is None and run is not None and isinstance(getattr(run, "model", None), nn.Module):
        model = run.model
    context = Context(spec, initial, model, data, data.x_val[:inputs], jacobian)
    for registered in _RULES.values():
        registered.rules(context)
    return Diagnosis(spec, tuple(context.quantities), tuple(context.rules), tuple(context.notes),
                     tuple(context.tries), outcome(run) if run is not None else None)


def device_of(model: nn.Module) -> torch.device:
    """The device of `model`'s first parameter (the CPU for a model without any)."""
    first = next(model.parameters(), None)
    return torch.device("cpu") if first is None else first.device


@torch.no_grad()
def stream_growth(model: nn.Module, x: torch.Tensor) -> float:
    """||h_n|| / ||h_0|| of the block stack, as the tau paper's theorems bound it: the root of the mean over the
    examples of ||stack(h_0)||^2 / ||h_0||^2, h_0 = model.embed(x), in float64 so that an exploding stream stays
    finite as long as it can (NaN when it is not finite). The tau claims (explorer.papers.tau) measure the
    same quantity on the same INPUTS validation examples, so a run's diagnosis and the Papers page agree."""
    was = model.training
    model.eval()
    try:
        h0 = model.embed(x)
        hn = model.stack(h0)
    finally:
        model.train(was)
    ratio2 = hn.double().flatten(1).pow(2).sum(1) / h0.double().flatten(1).pow(2).sum(1)
    ratio = float(ratio2.mean().sqrt())
    return ratio if math.isfinite(ratio) else math.nan


def times(value: float) -> str:
    """A growth factor as the texts write it ("3.2x"; "not finite")."""
    return "not finite" if not math.isfinite(value) else f"{value:.3g}x"

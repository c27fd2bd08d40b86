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

The rules, each from a paper's statement:

* tau paper (Stability and Convergence Theory for Learning ResNet), Theorem 1 (Sec. 3.1) and Theorem 4
  (Sec. 3.3, App. G), on its model h_l = relu(h_{l-1} + tau W_l h_{l-1}) (model mlp-resnet with the tau or the
  cascaded topology, tau = 1): the forward process is bounded for tau <= 1/sqrt(L) and grows with depth
  above it. The growth ||h_n|| / ||h_0|| over the n residual blocks is set against
  `theory.predicted_norm_growth` (square roots of its bounds on the squared norm). The rule explains a
  divergence when tau > 1/sqrt(L) and the measured growth exceeds the most the bounded regime allows, the
  upper bound at tau = 1/sqrt(L).
* IDInit, Sec. 2 (Dynamical Isometry, Eq. 2): chi, the mean squared singular value of the block stack's
  input-output Jacobian; chi > 1 is the chaotic phase (gradients explode), chi < 1 the ordered one (they
  vanish). Reported with the phase; it explains nothing on its own (a residual stack has chi > 1 whenever its
  stream grows), so no rule reads it.
* Cutting the Skip, Proposition 1 (Sec. 5.2): for a ViT, the attention maps' condition number kappa against
  the proposition's diffuse-rows bound kappa >~ tau / Delta (Delta: the logits' largest row range, read from
  the maps as log-probabilities, which keep every row's range). On a skipless Transformer (the paper's
  subject) a stall or divergence is explained when the logits are diffuse (Delta < 1, the softmax
  temperature being 1 here: the proposition's Delta << tau), the regime the paper names the main cause of an
  ill-conditioned attention Jacobian; the fix is its Eq. 11 init, W_Q W_K^T = alpha Z + beta I. A GPT's causal
  maps are reported without the bound (the proposition treats full rows).
* ANCRe, Theorems 3.2 and 3.3 (Sec. 3.2, App. B.4) on the linear networks of its case study (model linear
  with the shortcuts or ancre topology): with the single shortcut 0:1 gradient flow converges no faster than
  sublinearly (Omega(1/t^2)); with 0:K-1 (the input added to the last layer's input) it converges linearly.
  The quantity is the coefficient mass of the shortcut from the input to each later layer, with the regime
  it implies. No rule reads it: the theorems compare convergence rates, and a slow run on the sublinear
  layout is as much its learning rate's doing, which they do not separate.
* DCA (DeepCrossAttention), Theorems 4.1 and 4.2 (Sec. 4.1, 4.2), on its low-rank linear model (model lowrank
  with the none, cascaded or GRN topologies): the end-to-end map A_hat = D + M, D the input's own path (the map
  with every block's output set to zero: 0, I, alpha I or a diagonal), M what the blocks add. Theorem 4.1 bounds
  rank M by the collective rank r_* = sum_t r_t (by min_t r_t without a residual); the excess risk
  ||A - A_hat||_F^2 (A read from the training data by least squares; the paper's Sec. 4.2 with E[x x^T] = I)
  is at least its class's optimum ER*, and Theorem 4.2 bounds how much lower GRN-v1/v2's optimum is than a
  ResNet's of the same r_* (the gain tr(Delta)^2 / (d - r_*), and max of that and sum_i Delta_ii^2). A run that
  stalled at its class's optimum (its final excess risk within DCA_FLOOR of ER* > 0) is explained by the class:
  more rank or GRN-v1 is what helps. GRN-v3 with active gates is not linear: no map, no rank.

The learning rate is a setting the tau paper fixes (lr 0.001, Sec. 5.1) and the presets do not (0.01): on its
model the explanation says which one the run used and what the same rule does at the other (the fig1 claim's
measurements, the story notebook 04 and the Papers tab tell).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from explorer import budget, theory
from explorer.data import loss_function
from explorer.probes import probe
from explorer.probes.probes import stacks
from explorer.registries import SpecError
from explorer.spec import ExperimentSpec
from explorer.training import build

__all__ = ["Diagnosis", "Quantity", "diagnose", "outcome"]

STALL_FRACTION = 0.95  # stalled: the last logged loss is still at least this share of the first one
INPUTS = 128  # validation examples the stream norms are measured on (as the tau claims measure them)
JACOBIAN_INPUTS = 4  # of those, the ones chi is computed on
JACOBIAN_MAX_DIM = 512  # chi only for streams of at most this many numbers per example (a backward pass per number)
TAU_PAPER = "tau paper (Stability and Convergence Theory for Learning ResNet)"
TAU_PAPER_LR = 0.001  # its Figure 1's learning rate (Sec. 5.1)
DCA_PAPER = "DCA (DeepCrossAttention)"
DCA_TOPOLOGIES = ("none", "cascaded", "grn-v1", "grn-v2", "grn-v3")  # the architectures of its Theorem 4.1
DCA_FLOOR = 1.05  # stalled at the class's optimum: the final excess risk within 5% of ER*
SUMMARY_WIDTH = 90  # the most characters a summary line is written to hold (a projector's line)
LINEAR_TOLERANCE = 1e-8  # relative error of A_hat x against the model's output for the model to count as linear


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
class _Rule:
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
    rules: tuple[_Rule, ...] = ()
    notes: tuple[str, ...] = ()  # settings that differ from a paper's, said when a run failed
    tries: tuple[str, ...] = ()  # the notes' advice in a few words, for the summary's last line
    run: Outcome | None = field(default=None, compare=False)

    def quantity(self, name: str) -> Quantity | None:
        """The quantity called `name`, or None when it does not apply to this model."""
        return next((q for q in self.quantities if q.name == name), None)

    def explanations(self, run: Any = None) -> list[_Rule]:
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


def diagnose(spec: ExperimentSpec, run: Any = None, model: nn.Module | None = None, *,
             jacobian: bool = True, inputs: int = INPUTS) -> Diagnosis:
    """Measure the papers' quantities on `spec`'s model at initialisation (built with the spec's seed, on the
    CPU), and on the final weights of `run` (an explorer.Run) or `model` when given. `run` may also be a job
    view or a stored run's record: then only its outcome is read (for `Diagnosis.explain`).
    jacobian=False leaves chi out (a backward pass per stream number: the slow part); streams of more than
    JACOBIAN_MAX_DIM numbers per example get no chi either. SpecError before anything is built when the model,
    or probing it as the diagnosis does, would pass the memory caps (explorer.budget)."""
    if not isinstance(spec, ExperimentSpec):
        raise SpecError("spec", f"expected an ExperimentSpec, got {type(spec).__name__}; pass explorer.preset(...) "
                                "or ExperimentSpec.from_dict(...)")
    _check_budget(spec, inputs, jacobian)
    initial, data = build(spec, device="cpu")
    if model is None and run is not None and isinstance(getattr(run, "model", None), nn.Module):
        model = run.model
    x = data.x_val[:inputs]
    quantities: list[Quantity] = []
    rules: list[_Rule] = []
    notes: list[str] = []
    tries: list[str] = []
    growth = _stream_growth(initial, x)
    if growth is not None:
        _tau_paper(spec, initial, growth, quantities, rules, notes, tries)
        if model is not None:
            final = _stream_growth(model, x.to(_device(model)))
            value = math.nan if final is None else final
            quantities.append(Quantity("stream growth, final weights", _times(value),
                                       "no closed form after training", TAU_PAPER + ", Sec. 3", "n/a", value,
                                       "the paper bounds the stream at initialisation, not after training"))
        if jacobian:
            _chi(initial, x[:JACOBIAN_INPUTS], quantities)
        _gradients(initial, data, spec, quantities, tau_model=spec.model.name == "mlp-resnet")
    _attention(spec, initial, x, quantities, rules)
    _ancre(spec, initial, quantities)
    if model is not None:
        _ancre(spec, model, quantities, "after training")
    _dca(spec, initial, data, model, quantities, rules)
    return Diagnosis(spec, tuple(quantities), tuple(rules), tuple(notes), tuple(tries),
                     outcome(run) if run is not None else None)


# --------------------------------------------------------------------------------------
# measurements
# --------------------------------------------------------------------------------------
def _check_budget(spec: ExperimentSpec, inputs: int, jacobian: bool) -> None:
    """SpecError when the diagnosis' probes would pass EXPLORER_MAX_MODEL_MB (explorer.budget.check_probes): the
    stream norms on `inputs` validation inputs, chi's Jacobians, the attention maps, and the gradients of one
    training batch (a backward pass, costed as the dead-unit probe's)."""
    measured = {"norms": {}, "attention": {}}
    if jacobian:
        measured["jacobian"] = {"max_dim": JACOBIAN_MAX_DIM, "max_inputs": JACOBIAN_INPUTS}
    budget.check_probes(spec, measured, inputs)
    budget.check_probes(spec, {"dead": {}}, spec.train.batch_size)


def _device(model: nn.Module) -> torch.device:
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


def _stream_growth(model: nn.Module, x: torch.Tensor) -> float | None:
    if not (hasattr(model, "embed") and hasattr(model, "stack")):
        return None
    return stream_growth(model, x)


def _times(value: float) -> str:
    return "not finite" if not math.isfinite(value) else f"{value:.3g}x"


def _tau_paper(spec, model, growth: float, quantities, rules, notes, tries) -> None:
    """The stream's growth against the tau paper's Theorems 1 and 4 (its own model only)."""
    name = "stream growth ||h_n|| / ||h_0|| at init"
    topology = stacks(model)[0].topology
    section = spec.topology
    applies = (spec.model.name == "mlp-resnet" and section.name in ("tau", "cascaded")
               and section.params.get("placement", "branch") == "branch")
    if not applies:
        quantities.append(Quantity(name, _times(growth), "the tau paper's bounds hold for its MLP-ResNet with tau "
                                   "or cascaded residuals only", TAU_PAPER + ", Theorems 1, 4", "n/a", growth,
                                   f"the bounds are for the tau paper's MLP-ResNet with tau or cascaded residuals "
                                   f"(this is model {spec.model.name}, topology {section.name})"))
        return
    depth = int(spec.model.params["depth"])
    blocks = topology.n_blocks
    tau = float(topology.branch_scales().mean())
    g = _weight_variance(stacks(model)[0])
    threshold = depth ** -0.5
    predicted = theory.predicted_norm_growth(blocks, tau, weight_variance=g)
    low, high = math.sqrt(predicted.lower[-1]), math.sqrt(predicted.upper[-1])
    bounded = math.sqrt(theory.predicted_norm_growth(blocks, threshold, weight_variance=g).upper[-1])
    inside = low * 0.5 <= growth <= high * 1.5  # a finite batch scatters about the expectation's bounds
    where = "inside" if inside else "below" if math.isfinite(growth) and growth < low * 0.5 else "outside"
    quantities.append(Quantity(
        name, _times(growth),
        f"{low:.3g}x to {high:.3g}x for tau = {tau:.3g} over {blocks} blocks (at most {bounded:.3g}x for "
        f"tau <= 1/sqrt(L) = {threshold:.2f})",
        TAU_PAPER + ", Theorems 1 and 4 (Sec. 3.1, 3.3)", "consistent" if inside else "differs", growth,
        f"{_times(growth)} is {where} the predicted {low:.3g}x to {high:.3g}x"
        + (" (widened by half either side for a finite batch)" if inside else "")))
    above = tau > threshold
    quantities.append(Quantity("tau vs 1/sqrt(L)", f"tau = {tau:.3g}", f"threshold 1/sqrt({depth}) = {threshold:.3g}",
                               TAU_PAPER + ", Sec. 3", "differs" if above else "consistent", tau,
                               f"tau = {tau:.3g} is {'above' if above else 'at or below'} the threshold "
                               f"1/sqrt({depth}) = {threshold:.3g}"
                               + (": the stream is not bounded" if above else ": the stream stays bounded")))
    if above and (not math.isfinite(growth) or growth > bounded):
        grew = f"grew {_times(growth)}" if math.isfinite(growth) else "overflowed (not finite)"
        rules.append(_Rule(
            name,
            f"tau = {tau:.2f} at depth {depth} is above the tau paper's threshold 1/sqrt(L) = {threshold:.2f}: at "
            f"initialisation the stream grew {_times(growth)} over its {blocks} residual blocks, where the paper "
            f"bounds it for tau <= 1/sqrt(L) (Theorem 1, Sec. 3.1: at most {bounded:.3g}x here) and predicts growth "
            f"without bound above it (Theorem 4, Sec. 3.3: {low:.3g}x to {high:.3g}x for this tau and L).",
            f"tau = 1/sqrt(L) = {threshold:.2f} (the tau-fig1-1/sqrt(L) preset)", ("diverged", "stalled"),
            (f"The stream {grew} at initialisation (depth {depth}, tau = {tau:.2f}).",
             f"Bounded (at most {bounded:.3g}x) only for tau <= 1/sqrt(L) = {threshold:.2f} (tau paper, Theorem 4, "
             f"Sec. 3.3)."),
            f"tau = 1/sqrt(L) = {threshold:.2f}"))
    lr = spec.optim.params.get("lr")
    if lr is None:
        return
    paper_setting = spec.optim.name == "sgd" and math.isclose(lr, TAU_PAPER_LR)
    quantities.append(Quantity("learning rate vs the paper's", f"lr {lr:g} ({spec.optim.name})",
                               f"lr {TAU_PAPER_LR:g}, SGD (Figure 1)", TAU_PAPER + ", Sec. 5.1",
                               "consistent" if paper_setting else "differs", float(lr),
                               "the paper's Figure 1 setting" if paper_setting else
                               f"lr {lr:g} with {spec.optim.name} here, lr {TAU_PAPER_LR:g} with SGD in the paper"))
    if tau <= threshold:
        return
    # where L^-1/4 starts to diverge on digits at each rate: the fig1-threshold claim's runs (notebook 04)
    digits = spec.data.name == "digits"
    if math.isclose(lr, TAU_PAPER_LR):
        notes.append(f"This run already uses the paper's Figure 1 rate lr {TAU_PAPER_LR:g} (Sec. 5.1): with the stream "
                     f"grown {_times(growth)} at depth {depth} a smaller step is not the fix"
                     + (" (on digits tau = L^-1/4 trains at depth 30 at this rate and, within 50 steps, diverges "
                        "from depth 50-60 on)." if digits else "."))
    else:
        notes.append(f"The learning rate decides where this growth turns into a divergence: this run trains with lr "
                     f"{lr:g}, {lr / TAU_PAPER_LR:.3g}x the paper's Figure 1 rate {TAU_PAPER_LR:g} (Sec. 5.1)"
                     + (f"; on digits tau = L^-1/4 diverges from about depth 30 at lr 0.01, while at lr "
                        f"{TAU_PAPER_LR:g} it trains at depth 30 and, within 50 steps, diverges only from depth 50-60 on"
                        if digits else "")
                     + (f". Try lr {TAU_PAPER_LR:g} as well." if lr > TAU_PAPER_LR else "."))
        if lr > TAU_PAPER_LR:
            tries.append(f"lr {TAU_PAPER_LR:g} (the paper's)")


def _weight_variance(stack) -> float:
    """g = fan_in x mean(W^2) over the residual branches' weights (2 for the paper's Kaiming N(0, 2/m))."""
    values = [float(p.detach().double().pow(2).mean()) * p.shape[1]
              for p in stack.blocks.parameters() if p.dim() == 2]
    return float(np.mean(values)) if values else 2.0


def _chi(model, x, quantities) -> None:
    """IDInit's chi from the Jacobian probe (left out, with its reason, where the probe refuses the stream)."""
    name = "chi (mean squared singular value of the stack's Jacobian)"
    paper = "IDInit, Sec. 2 (Dynamical Isometry, Eq. 2)"
    try:
        result = probe(model, x, "jacobian", max_dim=JACOBIAN_MAX_DIM)
    except SpecError as error:
        quantities.append(Quantity(name, f"not computed: {error.message}", "1 (dynamical isometry)", paper, "n/a",
                                   why="not computed on this model (see measured)"))
        return
    chi = float(np.nanmean(result["chi"])) if np.isfinite(result["chi"]).any() else math.nan
    phase = "not finite" if not math.isfinite(chi) else \
        "chaotic phase: gradients grow" if chi > 1 else "ordered phase: gradients shrink" if chi < 1 else "critical"
    quantities.append(Quantity(name, f"{chi:.4g} ({phase})", "1 (dynamical isometry); > 1 chaotic, < 1 ordered",
                               paper, "n/a", chi,
                               "a phase to read, not a bound: a growing residual stream has chi > 1"))


def _gradients(model, data, spec, quantities, tau_model: bool) -> None:
    """The loss gradient's norm in each block on one training batch, at initialisation."""
    blocks = [block for stack in stacks(model) for block in stack.blocks]
    n = min(spec.train.batch_size, len(data.x_train))
    x, y = data.x_train[:n], data.y_train[:n]
    was = model.training
    model.eval()
    params = [list(block.parameters()) for block in blocks]
    try:
        with torch.enable_grad():
            loss = loss_function(data.task)(model(x), y)
            flat = [p for group in params for p in group]
            grads = torch.autograd.grad(loss, flat, allow_unused=True)
    finally:
        model.train(was)
    norms, k = [], 0
    for group in params:
        total = sum(float(g.double().pow(2).sum()) for g in grads[k:k + len(group)] if g is not None)
        norms.append(math.sqrt(total))
        k += len(group)
    finite = [v for v in norms if math.isfinite(v)]
    ratio = (max(finite) / min(finite)) if finite and min(finite) > 0 else math.nan
    shown = ", ".join(f"{v:.3g}" for v in norms[:3]) + (" ... " + f"{norms[-1]:.3g}" if len(norms) > 3 else "")
    predicted, paper = ("bounded for tau <= 1/sqrt(L) (Theorem 3)", TAU_PAPER + ", Sec. 3.2") if tau_model else \
        ("no closed form for this model", "none")
    quantities.append(Quantity("gradient norm by block at init", f"{shown} (max / min {ratio:.3g})", predicted, paper,
                               "n/a", ratio, "the bound has no number to check against" if tau_model else
                               "no paper predicts it for this model"))


def _attention(spec, model, x, quantities, rules) -> None:
    """Attention kappa against Cutting the Skip's Proposition 1 (Transformers only)."""
    if spec.model.name not in ("gpt", "vit"):
        return
    paper = "Cutting the Skip, Proposition 1 (Sec. 5.2)"
    result = probe(model, x[:1], "attention")
    kappa = float(np.nanmedian(result["kappa"])) if np.isfinite(result["kappa"]).any() else math.nan
    name = "attention kappa at init (median over blocks and heads)"
    if spec.model.name == "gpt":
        quantities.append(Quantity(name, f"{kappa:.3g}", "no bound for causal maps (the proposition treats full rows)",
                                   paper, "n/a", kappa,
                                   "a GPT's attention is causal; the proposition treats full rows"))
        return
    maps = np.asarray(result["maps"], dtype=float)  # (blocks, heads, T, T)
    ranges, lower = [], []
    with np.errstate(divide="ignore"):
        for a in maps.reshape(-1, *maps.shape[-2:]):
            logits = np.log(a)  # softmax logits up to a shift per row, which keeps every row's range
            if not np.isfinite(logits).all():
                continue
            bounds = theory.softmax_condition_bounds(logits)
            ranges.append(bounds.row_range)
            lower.append(bounds.diffuse_lower)
    if not ranges:
        quantities.append(Quantity(name, f"{kappa:.3g}", "undefined: the maps underflow to 0", paper, "n/a", kappa,
                                   "the attention maps underflow to 0, so their logits are unknown"))
        return
    delta, bound = float(np.median(ranges)), float(np.median(lower))
    diffuse = delta < 1.0
    quantities.append(Quantity(
        name, f"{kappa:.3g} (logit row range Delta = {delta:.3g})",
        f">= {bound:.3g} (diffuse rows: kappa >~ 1/Delta)" if diffuse else
        "well-conditioned if the logits are diagonally dominant",
        paper, "consistent" if not diffuse or kappa >= bound else "differs", kappa,
        f"Delta = {delta:.3g} >= 1: the diffuse-rows bound does not apply" if not diffuse else
        f"kappa = {kappa:.3g} is {'at or above' if kappa >= bound else 'below'} the bound {bound:.3g}"))
    if diffuse and spec.topology.name == "skipless":
        rules.append(_Rule(
            name,
            f"This skipless ViT starts with diffuse attention logits (row range Delta = {delta:.2g} < 1): by Cutting "
            f"the Skip's Proposition 1 (Sec. 5.2) its attention maps are near-uniform and ill-conditioned "
            f"(kappa = {kappa:.3g}, bound >~ {bound:.3g}), which the paper names the main cause of an "
            f"ill-conditioned attention Jacobian without skips.",
            "the paper's init W_Q W_K^T = alpha Z + beta I (Eq. 11; the skip-table1-skipless-init preset)",
            ("diverged", "stalled"),
            (f"The attention logits start diffuse (row range Delta = {delta:.2g} < 1) in this skipless ViT.",
             f"Cutting the Skip, Prop. 1 (Sec. 5.2): ill-conditioned maps, kappa = {kappa:.3g} (>~ {bound:.3g})."),
            "the paper's init W_Q W_K^T = alpha Z + beta I (Eq. 11)"))


def _ancre(spec, model, quantities, when: str = "at init") -> None:
    """The input's shortcut mass on ANCRe's linear case study, against Theorems 3.2 and 3.3."""
    if spec.model.name != "linear" or spec.topology.name not in ("shortcuts", "ancre"):
        return
    paper = "ANCRe, Theorems 3.2 and 3.3 (Sec. 3.2, App. B.4)"
    own = np.asarray(stacks(model)[0].topology.coefficients().own, dtype=float)
    k = own.shape[0] - 1  # layers
    from_input = own[1:, 0]  # mass of the shortcut 0:j, j = 1..K
    last = float(own[k - 1, 0]) if k >= 2 else math.nan
    shown = ", ".join(f"0:{j} {v:.3g}" for j, v in enumerate(from_input, start=1))
    only_first = from_input[0] > 0 and not (from_input[1:] > 0).any()
    if k >= 2 and last > 0:
        regime = f"linear rate (the 0:{k - 1} shortcut, Theorem 3.3)"
    elif only_first:
        regime = "sublinear, no faster than Omega(1/t^2) (only the 0:1 shortcut, Theorem 3.2)"
    else:
        regime = "not covered by the theorems (neither 0:1 alone nor 0:K-1)"
    quantities.append(Quantity(f"input shortcut mass {when}", shown, regime, paper, "n/a", last,
                               "the theorems compare convergence rates; the mass only says which regime applies"))


def _dca(spec, initial, data, model, quantities, rules) -> None:
    """DCA's Theorems 4.1 and 4.2 on its low-rank linear model: the rank of what the blocks add to the end-to-end
    map against the collective rank, and the excess risk against the class's optimum (see the module docstring)."""
    topology = spec.topology.name
    if spec.model.name != "lowrank":
        if topology in ("grn-v1", "grn-v2", "grn-v3", "dca"):
            quantities.append(Quantity("DCA collective rank (Theorem 4.1)", "not measured",
                                       "the theorems are for the low-rank linear model (model lowrank) only",
                                       DCA_PAPER + ", Sec. 4", "n/a",
                                       why=f"the theorems are for model lowrank; this is {spec.model.name}"))
        return
    if topology not in DCA_TOPOLOGIES:
        return
    paper = DCA_PAPER + ", Theorem 4.1 (Sec. 4.1)"
    depth, rank, d = int(spec.model.params["depth"]), int(spec.model.params["rank"]), int(spec.model.params["width"])
    ranks = [rank] * depth
    r_star = theory.collective_rank(ranks)
    bound, what = (min(ranks), "min_t r_t (no residual)") if topology == "none" else \
        (r_star, f"r_* = sum_t r_t = {depth} x {rank}")
    target = target_map(data)
    optimum = _class_optimum(topology, target, ranks, d) if target is not None else None
    for when, net in (("at init", initial), ("after training", model)):
        if net is None:
            continue
        maps = end_to_end_map(net, d)
        if maps is None:
            quantities.append(Quantity(f"rank of the blocks' part M = A_hat - D {when}", "not linear (active gates)",
                                       f"<= {bound}", paper, "n/a",
                                       why="the gates make the network non-linear: it has no map A_hat, no rank"))
            continue
        a_hat, own = maps
        finite = bool(np.isfinite(a_hat).all())
        m_rank = int(np.linalg.matrix_rank(a_hat - own)) if finite else -1
        quantities.append(Quantity(
            f"rank of the blocks' part M = A_hat - D {when}", f"{m_rank}" if finite else "not finite",
            f"<= {bound} ({what})", paper, ("consistent" if m_rank <= bound else "differs") if finite else "n/a",
            float(m_rank) if finite else math.nan,
            (f"rank {m_rank} is {'within' if m_rank <= bound else 'above'} the bound {bound}") if finite else
            "the map is not finite (the weights overflowed)"))
        if optimum is None:
            continue
        risk = float(np.sum((target - a_hat) ** 2)) if finite else math.nan
        floor, exact, text = optimum
        above = math.isfinite(risk) and risk >= floor * (1 - 1e-6) - 1e-9
        quantities.append(Quantity(
            f"excess risk ||A - A_hat||_F^2 {when}", f"{risk:.4g}" if finite else "not finite", text,
            DCA_PAPER + ", Theorems 4.1 and 4.2 (Sec. 4.2)",
            ("consistent" if above else "differs") if exact and finite else "n/a", risk,
            "the map is not finite (the weights overflowed)" if not finite else
            f"{risk:.4g} is {'at or above' if above else 'below'} the class's optimum {floor:.4g}" if exact else
            "the theorem gives GRN's optimum only an upper bound, which a run may be above or below"))
        if when == "after training" and topology.startswith("grn") and finite:
            _dca_gain(target, ranks, d, topology, risk, quantities)
        if when == "after training" and exact and floor > 0 and math.isfinite(risk) and risk <= DCA_FLOOR * floor:
            name = "a ResNet" if topology == "cascaded" else "a network without residuals"
            rules.append(_Rule(
                f"excess risk ||A - A_hat||_F^2 {when}",
                f"The run is at its architecture's floor: by DCA's Theorem 4.1 (Sec. 4.1) {name} of {depth} layers of "
                f"rank {rank} expresses only maps whose learned part has rank <= {bound}, and the best of them is "
                f"ER* = {floor:.4g} from A (Theorem 4.2, Sec. 4.2); this run reached {risk:.4g}.",
                "GRN-v1 (topology.name=grn-v1), which Theorem 4.2 lets go lower at the same collective rank, or a larger "
                "model.rank", ("stalled",),
                (f"The run is at its architecture's floor: it reached {risk:.4g}, the best is ER* = {floor:.4g}.",
                 f"DCA's Theorem 4.1 (Sec. 4.1): {depth} layers of rank {rank} learn maps of rank <= {bound} only."),
                "GRN-v1 (topology.name=grn-v1), or a larger model.rank"))


def target_map(data) -> np.ndarray | None:
    """The target A of a regression y = A x (+ b) read from the training data by least squares (with an
    intercept, which takes the b of the affine task); None for other tasks."""
    if data.task != "regression":
        return None
    x = data.x_train.detach().double().cpu().numpy().reshape(len(data.x_train), -1)
    y = data.y_train.detach().double().cpu().numpy().reshape(len(data.y_train), -1)
    if x.shape[1] != y.shape[1]:
        return None
    design = np.hstack([x, np.ones((len(x), 1))])
    coefficients = np.linalg.lstsq(design, y, rcond=None)[0]
    return coefficients[:-1].T


@torch.no_grad()
def end_to_end_map(model: nn.Module, width: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(A_hat, D) of a linear network x -> A_hat x, in float64: A_hat from its outputs on the basis vectors, D the
    same with every block's output set to zero (the input's own path). None when the network is not linear
    (checked on random inputs)."""
    net = copy.deepcopy(model).double().eval()
    device = _device(net)
    eye = torch.eye(width, dtype=torch.float64, device=device)
    a_hat = net(eye).T.cpu().numpy()
    x = torch.randn(8, width, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(device)
    if np.isfinite(a_hat).all():
        out = net(x).cpu().numpy()
        error = np.abs(out - x.cpu().numpy() @ a_hat.T).max()
        if error > LINEAR_TOLERANCE * max(np.abs(out).max(), 1.0):
            return None
    for block in stacks(net)[0].blocks:
        for p in block.parameters():
            p.zero_()
    return a_hat, net(eye).T.cpu().numpy()


def _class_optimum(topology: str, target: np.ndarray, ranks: list[int], d: int) -> tuple[float, bool, str] | None:
    """(ER* or a bound on it, whether it is exact, the text) of the class Theorem 4.1 gives the topology."""
    r_star = sum(ranks)
    if topology == "none":
        value = theory.optimal_baseline(target, ranks).excess_risk
        return value, True, f">= ER*(C_base) = {value:.4g}: the best rank-{min(ranks)} map (Theorem 4.1, Eckart-Young)"
    if r_star > d or (topology != "cascaded" and r_star >= d):
        return None
    resnet = theory.optimal_resnet(target, r_star).excess_risk
    if topology == "cascaded":
        text = f">= ER*(C_res) = {resnet:.4g}: I + the best rank-{r_star} map (Theorems 4.1, 4.2)"
        if r_star < d:
            text += f"; GRN-v1 at this r_* reaches <= {theory.excess_risk_bounds(target, ranks).grn_v1:.4g}"
        return resnet, True, text
    bounds = theory.excess_risk_bounds(target, ranks)
    version = "v1" if topology == "grn-v1" else "v2"  # GRN-v3's linear maps (inactive gates) are GRN-v2's class
    value = bounds.grn_v1 if version == "v1" else bounds.grn_v2
    return value, False, (f"ER*(C_GRN-{version}) <= {value:.4g} (Theorem 4.2), below ResNet's ER*(C_res) = "
                          f"{resnet:.4g} at the same r_* = {r_star}")


def _dca_gain(target, ranks, d, topology, risk, quantities) -> None:
    """A GRN run's excess risk below the best ResNet of the same collective rank, against Theorem 4.2's gain."""
    r_star = sum(ranks)
    resnet = theory.optimal_resnet(target, r_star).excess_risk
    bounds = theory.excess_risk_bounds(target, ranks)
    version = "v1" if topology == "grn-v1" else "v2"
    guaranteed = resnet - (bounds.grn_v1 if version == "v1" else bounds.grn_v2)
    gain = resnet - risk
    quantities.append(Quantity(
        "gain over the best ResNet ER*(C_res) - ER after training", f"{gain:.4g}",
        f">= {guaranteed:.4g} at the class's optimum (Theorem 4.2: GRN-{version}'s optimum is at least this far "
        f"below ResNet's at r_* = {r_star})", DCA_PAPER + ", Theorem 4.2 (Sec. 4.2)",
        "consistent" if gain >= guaranteed * (1 - 1e-3) else "differs", gain,
        f"the gain {gain:.4g} is {'at or above' if gain >= guaranteed * (1 - 1e-3) else 'below'} the guaranteed "
        f"{guaranteed:.4g}"))

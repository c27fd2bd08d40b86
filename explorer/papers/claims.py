"""Claims: a paper's statement, checked on real runs, with a verdict a reviewer would accept.

A claim is a function `check(mode, **controls) -> Verdict` registered with `@claim(...)`, which
names the paper, where the statement is (`section`), the statement, the paper's own words
(`source`, quoted with its location) and what running it at the paper's size needs (`paper_scale`).

Four verdicts (plus "error", an exception in the check):

* holds / does-not-hold: the measured effect is above the claim's threshold / below it (or reversed), at a
  stated error rate;
* inconclusive: the effect is within the run-to-run noise, a score sits at its trivial floor (chance
  accuracy, an all-background mIoU, float noise), or the run is too short to decide;
* not-tested: no set-up here tests the paper's statement itself (a proxy is not the claim); the reason
  says what it would need and what was seen on the nearest set-up.

`decide` is the one rule used for stochastic comparisons: it takes the paired same-seed
differences (oriented so that positive supports the claim) and runs a one-sided paired t-test at level
ALPHA against the claim's minimum effect; docs/verdicts.md gives the rule, its reasoning and its error
rate. Full mode runs at least 3 seeds (`Mode.seeds`), and a claim with a seed schedule
(`@claim(..., seeds=(3, 5, 10))`) adds seeds while the verdict is inconclusive for noise, each look at
its share of ALPHA (`spent_alpha`); fast mode (CI) runs one, and then answers holds / does-not-hold
only when the difference is larger than the claim's declared fast-mode margin. `decide_all` is the rule for
per-seed pass/fail checks (a theorem's bound on every seed). Every row carries the statement and
its source, our set-up and how it differs, the per-seed numbers, the rule, the threshold and where
it comes from, and the verdict:

    from explorer.papers.claims import run_claims
    rows = run_claims(paper="tau", fast=True)   # [{"paper", "id", "verdict", "per_seed", "rule", ...}, ...]

The rule, the claims registry, running, recording and reproducing rows and their figures share the row format, so
they live in one module.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import os
import statistics
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer import settings
from explorer.papers.base import PAPERS
from explorer.plots import per_seed_summary as summary_of  # the measured line of a row without a summary
from explorer.registries import SpecError

VERDICTS = ("holds", "does-not-hold", "inconclusive", "not-tested", "error")
SCALES = ("cpu", "paper")
FULL_SEEDS = (0, 1, 2)
ALPHA = 0.05  # decide: the level of the one-sided paired t-test (the rate of a false "holds"), over all looks
RULE = ("one-sided paired t-test, alpha 0.05 spent over the seed schedule's looks; a decided verdict must survive "
        "the one-ulp init spread, v2")  # part of every fingerprint
# the rule in two sentences, as the Papers page, the notebooks and the docs quote it (docs/verdicts.md has the rest)
RULE_SUMMARY = ("Full mode runs each claim's seeds (3 or more; some claims add seeds while undecided) and decides on "
                "the paired same-seed differences with a one-sided paired t-test at level 0.05 against the claim's "
                "minimum effect, fixed before measuring; a decided verdict must survive every difference moved by what a "
                "one-ulp change of the initial weights moves it, and a score at its trivial floor (chance accuracy, "
                "float noise) is inconclusive. Fast mode runs one seed of smaller runs and decides only beyond a wide margin: a "
                "smoke test that can disagree with full mode, whose verdict is the evidence.")
RECORDED = Path(__file__).with_name("claims_full.json")  # the full-mode rows recorded with the package
# the time one paper's claims may take in full mode with two worker processes on a 2-core CPU (the rows' own
# seconds, summed): what a lecturer preparing a session can wait for; docs/sync.py says which papers are within it
FULL_MODE_BUDGET_S = 15 * 60


@dataclass(frozen=True)
class Mode:
    """How a claim runs: fast (CI: one seed, smaller runs) or full (>= 3 seeds), at CPU or paper scale.

    In full mode `full_seeds` is the number of seeds of this look at the data: a claim with a seed schedule
    (`schedule`, e.g. (3, 5, 10)) is run once per stage until it decides, and `alpha` is the share of ALPHA this
    look spends. `only_seed`: run that one seed in full mode (`explorer claims --reproduce`)."""

    fast: bool = False
    scale: str = "cpu"
    device: str = "cpu"
    full_seeds: int = len(FULL_SEEDS)
    deterministic: bool = False  # one run decides (no seed changes it): the label says so
    schedule: tuple[int, ...] = ()  # the claim's seed schedule; () is one stage of full_seeds
    only_seed: int | None = None

    @property
    def seeds(self) -> tuple[int, ...]:
        if self.only_seed is not None:
            return (self.only_seed,)
        return (0,) if self.fast else tuple(range(self.full_seeds))

    @property
    def alpha(self) -> float:
        """The level of this look's one-sided test: ALPHA spent over the schedule's looks (see `spent_alpha`)."""
        return spent_alpha(self.schedule or (self.full_seeds,), self.full_seeds)

    @property
    def label(self) -> str:
        runs = "one deterministic run" if self.deterministic else \
            f"{len(self.seeds)} seed{'s' if len(self.seeds) > 1 else ''}"
        return f"{'fast' if self.fast else 'full'} mode, {runs}, {self.scale} scale"


def spent_alpha(schedule: Sequence[int], seeds: int) -> float:
    """The level of the look at `seeds` seeds of `schedule` (increasing stage sizes n_1 < ... < n_K = N): the
    alpha-spending split ALPHA x ((n_k / N)^2 - (n_(k-1) / N)^2). The looks' levels sum to ALPHA, so by the union
    bound a claim run until it decides holds falsely with probability at most ALPHA. A count not in the
    schedule is a single look at ALPHA."""
    if seeds not in schedule:
        return ALPHA
    k, cap = list(schedule).index(seeds), schedule[-1]
    before = schedule[k - 1] if k else 0
    return ALPHA * ((seeds / cap) ** 2 - (before / cap) ** 2)


@dataclass(frozen=True)
class Decision:
    """A verdict, the rule that produced it (text) and why it came out that way (text, with the numbers).
    `noisy`: inconclusive only because the interval is too wide, so more seeds may decide it (a claim with a
    seed schedule then runs its next stage); False at a floor, for a non-finite value and for any other verdict."""

    verdict: str
    rule: str
    reason: str
    noisy: bool = False


# The look decide() is part of: (alpha, text for the rule). Claim.run sets it for each stage of a seed schedule,
# so the checks call decide() as they always do.
_LOOK: contextvars.ContextVar[tuple[float, str]] = contextvars.ContextVar("look", default=(ALPHA, ""))


@functools.cache
def _t_quantile(p: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(p, df))


def t_interval(values: Sequence[float], alpha: float = ALPHA) -> tuple[float, float]:
    """(lower, upper): the one-sided (1 - alpha) confidence bounds of the mean of `values` (Student's t with n - 1
    degrees of freedom): the true mean is above `lower` with confidence 1 - alpha, and below `upper` with the same."""
    n = len(values)
    if n < 2:
        raise ValueError("a t interval needs at least two values")
    mean, half = statistics.fmean(values), _t_quantile(1 - alpha, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean - half, mean + half


@dataclass(frozen=True)
class Looked:
    """One decision a check made (recorded while `Claim.run` listens): its kind ("t-test" for `decide`, "per-seed"
    for `decide_all`), the values it decided on (paired differences, or pass flags), the arguments to decide them
    again, and the verdict."""

    kind: str
    values: tuple
    options: dict
    verdict: str


_HEARD: contextvars.ContextVar[list[Looked] | None] = contextvars.ContextVar("heard", default=None)


def _heard(kind: str, values: Sequence, options: dict, decision: Decision) -> Decision:
    heard = _HEARD.get()
    if heard is not None:
        heard.append(Looked(kind, tuple(values), options, decision.verdict))
    return decision


def decide(diffs: Sequence[float], *, fast_margin: float, min_effect: float = 0.0, floors: dict[str, bool] | None = None,
           what: str = "difference", alpha: float | None = None) -> Decision:
    """The verdict from paired same-seed differences `diffs` (positive supports the claim); docs/verdicts.md
    explains the rule.

    Any floor that is True (e.g. {"accuracy at chance 0.2": True}) -> inconclusive. With n >= 2 seeds: a one-sided
    paired t-test at level `alpha` (default: this look's, ALPHA outside a seed schedule), with [lower, upper] the
    one-sided (1 - alpha) bounds of the mean difference: holds if lower > min_effect; does-not-hold if
    upper < min_effect (the effect points the other way, or is smaller than the claim's threshold); otherwise
    inconclusive (noisy: more seeds may decide). With one seed (fast mode) the noise is unknown: holds only when
    the difference exceeds `fast_margin`, does-not-hold only below -fast_margin, else inconclusive.
    The reason gives the mean and its interval, and a floor never hides differences that all point against the
    claim: the reason says so first; an undecided reason also says how many seeds point against the claim.
    """
    values = [float(d) for d in diffs]
    if not values:
        raise ValueError("decide needs at least one paired difference")
    alpha = _LOOK.get()[0] if alpha is None else alpha
    options = {"fast_margin": fast_margin, "min_effect": min_effect, "floors": floors, "what": what, "alpha": alpha}
    return _heard("t-test", values, options, _decide(values, **options))


def _decide(values: list[float], *, fast_margin: float, min_effect: float, floors: dict[str, bool] | None, what: str,
            alpha: float) -> Decision:
    hit = [name for name, on in (floors or {}).items() if on]
    n, mean = len(values), statistics.fmean(values)
    finite = all(math.isfinite(v) for v in values)
    threshold = f"the claim's threshold {min_effect:g}" if min_effect else "0"
    if n >= 2:
        look = _LOOK.get()[1]
        level = f"{100 * (1 - alpha):.4g}%"
        spread = statistics.stdev(values) if finite else math.nan
        lower, upper = t_interval(values, alpha) if finite else (math.nan, math.nan)
        rule = (f"{what} per seed (positive supports the claim), {n} seeds: one-sided paired t-test at level "
                f"{alpha:.3g}{look}: holds if the {level} one-sided lower bound of the mean > {min_effect:g}; "
                f"does-not-hold if the {level} one-sided upper bound < {min_effect:g}; otherwise inconclusive")
        stats = (f"mean {mean:.4g}, {level} one-sided interval " + (
            f"[{lower:.4g}, inf)" if lower > min_effect else f"(-inf, {upper:.4g}]" if upper < min_effect else
            f"[{lower:.4g}, inf) and (-inf, {upper:.4g}]")
            + f", paired std {spread:.3g}, values {', '.join(f'{v:.4g}' for v in values)}")
    else:
        rule = (f"{what} (positive supports the claim), one seed (fast mode): holds if > {fast_margin:g}, "
                f"does-not-hold if < -{fast_margin:g}, otherwise inconclusive")
        stats = f"value {mean:.4g}"
    if floors:
        rule += "; inconclusive at a floor (" + "; ".join(floors) + ")"
    if not finite:
        return Decision("inconclusive", rule, f"a difference is not finite ({stats})")
    against = sum(v < 0 for v in values)
    contrary = (f"{against} of {n} seeds point against the claim" + (", and so does the mean" if mean < 0 else "")
                if against else "")  # evidence in the other direction, never left out of an undecided reason
    if hit:
        return Decision("inconclusive", rule,
                        (f"every {'seed points' if n > 1 else 'difference points'} against the claim ({stats}), "
                         f"but a floor keeps it from deciding: {'; '.join(hit)}" if against == n else
                         f"at a floor: {'; '.join(hit)}" + (f"; {contrary}" if contrary else "") + f" ({stats})"))
    if n == 1:
        margin = max(fast_margin, min_effect)
        verdict = "holds" if mean > margin else "does-not-hold" if mean < -margin else "inconclusive"
        why = {"holds": "above the fast-mode margin", "does-not-hold": "below minus the fast-mode margin",
               "inconclusive": f"within the fast-mode margin {margin:g} (one seed cannot measure the noise)"
                               + ("; it points against the claim" if mean < 0 else "")}
        return Decision(verdict, rule, f"{why[verdict]} ({stats})")
    if lower > min_effect:
        return Decision("holds", rule, f"the {level} one-sided interval of the mean lies above {threshold}"
                                       + (f"; {contrary}" if contrary else "") + f" ({stats})")
    if upper < min_effect:
        why = ("the effect points the other way: the {level} one-sided interval of the mean lies below 0" if upper < 0
               else "the effect is smaller than the claim's threshold: the {level} one-sided interval of the mean "
                    "lies below {min_effect:g}").format(level=level, min_effect=min_effect)
        return Decision("does-not-hold", rule, f"{why} ({stats})")
    why = f"within the noise at {n} seeds: the {level} one-sided bounds of the mean lie on either side of {threshold}"
    return Decision("inconclusive", rule, why + (f"; {contrary}" if contrary else "") + f" ({stats})", noisy=True)


def decide_all(passed: Sequence[bool], test: str, floors: dict[str, bool] | None = None) -> Decision:
    """Per-seed pass/fail of `test` (text): holds if every seed passes, does-not-hold if none does,
    inconclusive if they disagree or a floor is hit."""
    flags = [bool(p) for p in passed]
    return _heard("per-seed", flags, {"test": test, "floors": floors}, _decide_all(flags, test, floors))


def _decide_all(flags: list[bool], test: str, floors: dict[str, bool] | None) -> Decision:
    rule = f"per seed: {test}; holds if every seed passes, does-not-hold if none does, otherwise inconclusive"
    hit = [name for name, on in (floors or {}).items() if on]
    if floors:
        rule += "; inconclusive at a floor (" + "; ".join(floors) + ")"
    tally = f"{sum(flags)} of {len(flags)} seeds pass"
    if hit:
        return Decision("inconclusive", rule, f"at a floor: {'; '.join(hit)} ({tally})")
    if all(flags):
        return Decision("holds", rule, tally)
    if not any(flags):
        return Decision("does-not-hold", rule, tally)
    return Decision("inconclusive", rule, f"the seeds disagree ({tally})")


def combine(parts: dict[str, Decision]) -> Decision:
    """A claim made of several parts: holds if all hold, does-not-hold if any does not, else inconclusive (noisy
    when every part that does not hold is noisy: more seeds may decide it)."""
    verdicts = [d.verdict for d in parts.values()]
    verdict = "holds" if all(v == "holds" for v in verdicts) else \
        "does-not-hold" if "does-not-hold" in verdicts else "inconclusive"
    rule = " AND ".join(f"[{name}] {d.rule}" for name, d in parts.items())
    reason = "; ".join(f"[{name}] {d.verdict}: {d.reason}" for name, d in parts.items())
    noisy = verdict == "inconclusive" and all(d.noisy for d in parts.values() if d.verdict != "holds")
    return Decision(verdict, rule, reason, noisy)


@dataclass(frozen=True)
class Verdict:
    """What a check returns: the decision, the per-seed numbers it rests on, the threshold with its
    source ("Table 1: ..." or "ours: <reason>"), our set-up and how it differs from the paper's,
    other measured numbers, a note, and `summary`: the one line a table shows of what was measured
    (e.g. "L^-1/4: val acc 0.79 / 0.64 at depth 10 / 30; 1/sqrt(L): 0.56 / 0.50"; empty: one is made
    from the per-seed numbers)."""

    decision: Decision
    per_seed: dict[str, list]
    threshold: str
    setup: str
    measured: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    summary: str = ""


@dataclass(frozen=True)
class Claim:
    paper: str
    id: str
    section: str
    statement: str
    source: str
    paper_scale: str
    check: Callable[..., Verdict] = field(repr=False)
    paper_spec: bool = False  # whether --scale paper runs something other than "no paper-scale spec"
    seeds: tuple[int, ...] = (len(FULL_SEEDS),)  # full mode's seed schedule: the seeds of each look, increasing
    deterministic: bool = False  # one run decides whatever the seed (the mode's label says so)

    @property
    def full_seeds(self) -> int:
        """The most seeds full mode runs (the schedule's cap)."""
        return self.seeds[-1]

    @functools.cached_property  # the source is read once per claim (the Papers page asks on every rerun)
    def fingerprint(self) -> str:
        """A hash of the decision rule (RULE) and the check's source with its `@claim(...)`: a recorded result whose
        fingerprint differs was made by other code or under another rule."""
        return hashlib.sha256((RULE + "\n" + inspect.getsource(self.check)).encode()).hexdigest()[:16]

    def run(self, fast: bool = False, scale: str = "cpu", device: str = "cpu", only_seed: int | None = None,
            **controls) -> dict[str, Any]:
        """The claim's row (see ROW_KEYS); `controls` go to the check (the tests' negative controls).

        Full mode runs the seed schedule's first stage and, while the verdict is inconclusive only for noise
        (`Decision.noisy`), the next stage, each look at its share of ALPHA (`spent_alpha`); the seeds of an
        earlier stage are not retrained where the check's runs are cached (`explorer.papers.base.train_all`).
        The row's mode says how many seeds ran and why it stopped. `only_seed`: that one seed in full mode (the
        per-seed numbers of a recorded row, rerun; its verdict is the one-seed rule's)."""
        if scale not in SCALES:
            raise SpecError("--scale", f"unknown scale {scale!r}; use one of {', '.join(SCALES)}")
        staged = not fast and not self.deterministic and only_seed is None and len(self.seeds) > 1
        mode = Mode(fast=fast, scale=scale, device=device, full_seeds=self.seeds[0], deterministic=self.deterministic,
                    schedule=self.seeds, only_seed=only_seed)
        start = time.perf_counter()
        row = {"paper": self.paper, "id": self.id, "section": self.section, "statement": self.statement,
               "source": self.source, "paper_scale": self.paper_scale, "mode": mode.label,
               "fingerprint": self.fingerprint}
        if scale == "paper" and not self.paper_spec:
            row.update({"verdict": "inconclusive", "reason": f"no paper-scale spec for this claim: {self.paper_scale}",
                        "rule": "", "threshold": "", "setup": "", "per_seed": {}, "measured": {}, "note": "",
                        "float_spread": {},
                        "summary": "", "seconds": 0.0})
            return row
        try:
            for n in self.seeds if staged else (mode.full_seeds,):
                mode = dataclasses.replace(mode, full_seeds=n)
                look = (f" (look {self.seeds.index(n) + 1} of {len(self.seeds)} after {', '.join(map(str, self.seeds))}"
                        f" seeds; {ALPHA:g} in all)") if staged else ""
                heard: list[Looked] = []
                tokens = _LOOK.set((mode.alpha, look)), _HEARD.set(heard)
                try:
                    result = self.check(mode, **controls)
                finally:
                    _LOOK.reset(tokens[0])
                    _HEARD.reset(tokens[1])
                if not result.decision.noisy:
                    break
            decided = result.decision.verdict in ("holds", "does-not-hold")
            spread = self._float_spread(mode, heard, controls) \
                if decided and not fast and only_seed is None and not self.deterministic else {}
            if spread and spread["survives"] is False:
                result = dataclasses.replace(result, decision=Decision(
                    "inconclusive", result.decision.rule, f"{result.decision.verdict} on the seeds, but not once every "
                    f"paired difference moves by the float-level spread: {spread['text']} ({result.decision.reason})"))
            row["float_spread"] = spread
            row.update({"verdict": result.decision.verdict, "reason": result.decision.reason,
                        "rule": result.decision.rule, "threshold": result.threshold, "setup": result.setup,
                        "per_seed": _jsonable(result.per_seed), "measured": _jsonable(result.measured),
                        "note": result.note})
            row["summary"] = result.summary or summary_of(row["per_seed"])
            if staged:
                n = mode.full_seeds
                undone = spread.get("survives") is False
                stop = (f"cap of {n} seeds reached" if result.decision.noisy else
                        f"decided at {n} seeds" if result.decision.verdict in ("holds", "does-not-hold") else
                        f"decided at {n} seeds, then undone by the float-level spread" if undone else
                        f"stopped at {n} seeds: undecided for a reason more seeds do not change")
                row["mode"] = mode.label.replace(" seeds,", f" seeds ({stop}; schedule "
                                                             f"{', '.join(map(str, self.seeds))}),", 1)
            else:
                row["mode"] = mode.label
        except Exception as error:  # noqa: BLE001  (a claim that errors is reported, the table goes on)
            row.update({"verdict": "error", "reason": f"{type(error).__name__}: {error}", "rule": "", "threshold": "",
                        "setup": "", "per_seed": {}, "measured": {}, "summary": "", "float_spread": {},
                        "note": f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}"})
        row["seconds"] = round(time.perf_counter() - start, 2)
        return row


    def _float_spread(self, mode: Mode, heard: list[Looked], controls: dict) -> dict[str, Any]:
        """How far a float-level change moves this claim's evidence, and whether its verdict survives that: seed 0
        is run again with every model built one ulp off (explorer.training.float_perturbation), each decision's
        seed-0 value is compared with the recorded one, and each decided part is decided again with every paired
        difference moved against its verdict by that distance (a pass flag that flips, flipped). Returns
        {"moved": [distance per decision], "survives": bool or None (not measured), "text": one line}."""
        from explorer.training import float_perturbation

        perturbed: list[Looked] = []
        token = _HEARD.set(perturbed)
        try:
            with float_perturbation():
                self.check(dataclasses.replace(mode, only_seed=0), **controls)
        except Exception as error:  # noqa: BLE001  (the verdict stands; the row says the spread is unknown)
            return {"moved": [], "survives": None, "text": f"not measured: the perturbed run failed ({error})"}
        finally:
            _HEARD.reset(token)
        if [h.kind for h in heard] != [h.kind for h in perturbed]:
            return {"moved": [], "survives": None,
                    "text": "not measured: the perturbed seed took another path through the check"}
        moved, survives = [], True
        for was, now in zip(heard, perturbed):
            if was.kind == "t-test":
                distance = max(abs(a - b) for a, b in zip(was.values, now.values))
                against = -distance if was.verdict == "holds" else distance
                again = _decide([v + against for v in was.values], **was.options).verdict
            else:
                distance = float(was.values[0] != now.values[0])
                again = _decide_all([not was.values[0], *was.values[1:]] if distance else list(was.values),
                                    **was.options).verdict
            moved.append(distance)
            if was.verdict in ("holds", "does-not-hold") and again != was.verdict:
                survives = False
        parts = [f"moved its paired difference by {m:.3g}" if h.kind == "t-test" else
                 f"{'flipped' if m else 'kept'} its pass/fail" for h, m in zip(heard, moved)]
        text = ("rerun with every initial weight one ulp up, seed 0 " + (
            "; ".join(f"{part} (decision {i + 1})" for i, part in enumerate(parts)) if len(parts) > 1 else
            "".join(parts)) + "; the verdict " + ("survives" if survives else "does not survive")
                + " every seed's value moved that far against it")
        return {"moved": moved, "survives": survives, "text": text}


ROW_KEYS = ("paper", "id", "section", "statement", "source", "paper_scale", "mode", "fingerprint", "verdict", "reason",
            "rule", "threshold", "setup", "per_seed", "measured", "summary", "note", "float_spread", "seconds")
CLAIMS: dict[str, Claim] = {}


def claim(paper: str, id: str, section: str, statement: str, source: str, paper_scale: str, paper_spec: bool = False,
          full_seeds: int | None = None, deterministic: bool = False, seeds: Sequence[int] | None = None):
    """Register `check(mode, **controls) -> Verdict` as a claim of `paper` (in PAPERS: its module registers its
    `Paper` above its claims), under a unique `id`.

    `source`: the paper's words, quoted, with their location; `paper_scale`: what running the claim at the
    paper's size means here (`--scale paper`), with the hardware and time it needs, or why it is the same;
    `paper_spec`: True when `--scale paper` runs it (at the paper's size, or because the CPU check already is);
    otherwise `--scale paper` answers inconclusive with `paper_scale` as the reason; `seeds`: full mode's seed
    schedule, e.g. (3, 5, 10): look after 3 seeds, add seeds up to 5 while the verdict is inconclusive for noise,
    then up to 10 (the cap); `full_seeds=N` is the one-stage schedule (N,) (default 3); `deterministic`: one run
    decides, whatever the seed."""
    if paper not in PAPERS:
        raise ValueError(f"paper {paper!r} is not registered: register its Paper (register_paper) above its claims; "
                         f"registered: {', '.join(PAPERS)}")
    if seeds is not None and full_seeds is not None:
        raise ValueError(f"claim {paper}/{id}: give seeds=(...) or full_seeds=N, not both")
    schedule = tuple(seeds) if seeds is not None else (full_seeds or len(FULL_SEEDS),)
    if not schedule or schedule[0] < 2 or any(b <= a for a, b in zip(schedule, schedule[1:])) \
            or not all(isinstance(n, int) for n in schedule):
        raise ValueError(f"claim {paper}/{id}: seeds={schedule} must be increasing whole numbers of seeds, the first "
                         "at least 2 (a t-test needs two paired differences), e.g. seeds=(3, 5, 10)")

    def register(check: Callable[..., Verdict]) -> Callable[..., Verdict]:
        key = f"{paper}/{id}"
        if key in CLAIMS:
            raise ValueError(f"claim {key} is registered twice")
        CLAIMS[key] = Claim(paper, id, section, statement, source, paper_scale, check, paper_spec, schedule,
                            deterministic)
        return check

    return register


def claims(paper: str | None = None) -> list[Claim]:
    """The registered claims, of one paper or all, in registration order (importing explorer.papers registers them)."""
    if paper is not None and paper not in PAPERS:
        raise SpecError("--paper", f"unknown paper {paper!r}; use one of {', '.join(PAPERS)}")
    return [c for c in CLAIMS.values() if paper is None or c.paper == paper]


def select(paper: str | None = None, ids: list[str] | None = None) -> list[Claim]:
    """The claims of `paper` (or all), only `ids` when given, in registration order; an id that is no claim (of
    `paper`) is a SpecError listing the valid ones."""
    chosen = claims(paper)
    if ids is None:
        return chosen
    valid = [c.id for c in chosen]
    unknown = [i for i in ids if i not in valid]
    if unknown:
        raise SpecError("--id", f"no claim {', '.join(map(repr, unknown))}"
                                f"{' of ' + paper if paper else ''}; valid ids: {', '.join(valid)}")
    return [c for c in chosen if c.id in ids]


def run_claims(paper: str | None = None, fast: bool | None = None, ids: list[str] | None = None,
               callback: Callable[[dict], None] | None = None, scale: str = "cpu", device: str = "cpu",
               workers: int = 1, backend: str = "local", batched: bool = False,
               progress: Callable[[Progress], None] | None = None, stop=None) -> list[dict[str, Any]]:
    """Run the claims (of one paper, or only `ids`) and return their rows; `callback(row)` after each.

    A claim's seeds and arms train as independent jobs: `workers` processes of one thread each (1: here,
    one after the other), on `backend` "local" or "ray" (RAY_ADDRESS), the seeds of an arm stacked into one
    model when `batched` (explorer.batched). `progress(Progress)` is called as each claim starts and each of its
    runs ends, with time estimates; a set `stop` (threading.Event) skips the claims not started. fast=None reads
    EXPLORER_FAST=1 from the environment. An id that is no
    claim (of `paper`) is a SpecError listing the valid ones."""
    from explorer.papers.base import execution

    if fast is None:
        fast = settings.fast_mode()
    chosen = select(paper, ids)
    clock = _Clock(chosen, fast, progress)
    rows = []
    with execution(workers=workers, backend=backend, batched=batched, progress=clock.runs):
        for index, c in enumerate(chosen):
            if stop is not None and stop.is_set():
                break
            clock.start(index)
            row = c.run(fast, scale=scale, device=device)
            clock.finish(row["seconds"])
            rows.append(row)
            if callback is not None:
                callback(row)
    return rows


@dataclass(frozen=True)
class Progress:
    """Where a claims run stands: claim `index` (0-based) of `total` (`key` "paper/id"), `runs_done` of its
    `runs_total` runs (0 of 0 until its first batch of runs is known), seconds `elapsed` in all, and the
    estimated seconds left for this claim and for the whole run (None until there is a basis)."""

    key: str
    index: int
    total: int
    runs_done: int
    runs_total: int
    elapsed: float
    claim_left: float | None
    total_left: float | None

    def text(self) -> str:
        """One line: "claim 3 of 21 (tau/fig1-threshold): run 4 of 18, ~1 min 20 s left (all: ~14 min left)"."""
        return f"claim {self.index + 1} of {self.total} ({self.key}){self.where()}"

    def where(self) -> str:
        """The runs and the time left: ": run 4 of 18, ~1 min 20 s left (all: ~14 min left)" (empty with neither)."""
        runs = f" run {self.runs_done} of {self.runs_total}," if self.runs_total else ""
        left = f" ~{duration(self.claim_left)} left" if self.claim_left is not None else ""
        overall = f" (all: ~{duration(self.total_left)} left)" if self.total_left is not None else ""
        text = (runs + left + overall).rstrip(",")
        return f":{text}" if text else ""


def duration(seconds: float) -> str:
    """"45 s", "3 min 20 s", "1 h 05 min"."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class _Clock:
    """Time estimates for a claims run. A claim's expected seconds are its recorded full-mode seconds (fast mode:
    a tenth of them), scaled by how the claims done so far compared with theirs; inside a claim, its runs done so
    far extrapolate to the rest."""

    def __init__(self, chosen: list[Claim], fast: bool, report: Callable[[Progress], None] | None):
        stored = {f"{r['paper']}/{r['id']}": r.get("seconds") for r in _stored_results()["rows"]}
        known = [v for v in stored.values() if v]
        fallback = statistics.median(known) if known else 60.0
        self.keys = [f"{c.paper}/{c.id}" for c in chosen]
        self.expected = [(stored.get(k) or fallback) * (0.1 if fast else 1.0) for k in self.keys]
        self.report = report
        self.began = time.perf_counter()
        self.index, self.claim_began = 0, self.began
        self.spent, self.planned = 0.0, 0.0  # seconds taken by the finished claims, and what they were expected

    def _factor(self) -> float:
        return self.spent / self.planned if self.planned > 0 else 1.0

    def start(self, index: int) -> None:
        self.index, self.claim_began = index, time.perf_counter()
        self._emit(0, 0)

    def runs(self, done: int, total: int) -> None:
        self._emit(done, total)

    def finish(self, seconds: float) -> None:
        self.spent += seconds
        self.planned += self.expected[self.index]

    def _emit(self, done: int, total: int) -> None:
        if self.report is None:
            return
        now = time.perf_counter()
        in_claim = now - self.claim_began
        if total and done:
            claim_left = in_claim * (total - done) / done
        else:
            claim_left = max(self.expected[self.index] * self._factor() - in_claim, 0.0)
        rest = sum(self.expected[self.index + 1:]) * self._factor()
        self.report(Progress(self.keys[self.index], self.index, len(self.keys), done, total, now - self.began,
                             claim_left, claim_left + rest))


def recorded(paper: str | None = None) -> dict[str, Any]:
    """The full-mode results shipped with the package (3 seeds; hours of CPU, so run once by the developers and
    stored in `RECORDED`): {"about": how, when and where they were recorded, "rows": the claims' rows}, of one
    paper or all, in the claims' order. A row whose claim's check has changed since is marked "stale": True;
    a row of a claim that no longer exists is left out. No file: no rows."""
    stored = _stored_results()
    by_key = {f"{r['paper']}/{r['id']}": r for r in stored["rows"]}
    rows = []
    for c in claims(paper):
        row = by_key.get(f"{c.paper}/{c.id}")
        if row is not None:
            rows.append({**row, "summary": row.get("summary") or summary_of(row.get("per_seed") or {}),
                         "stale": row.get("fingerprint") != c.fingerprint})
    return {"about": dict(stored["about"]), "rows": rows}


def record(rows: list[dict], started: float, workers: int, backend: str, batched: bool, path: Path | None = None) -> Path:
    """Write full-mode `rows` into the recorded results (`path`, default RECORDED), replacing the rows of the same
    claims and keeping the others; each new row gets "environment", what it ran on (see `environment`), and "about"
    says when, on which commit and machine, how (workers, backend) and how long the run took. Rows of fast mode or
    of the paper scale are refused: the file holds full-mode CPU-scale evidence."""
    import platform
    import subprocess

    import torch

    for row in rows:
        if not row["mode"].startswith("full mode") or not row["mode"].endswith("cpu scale"):
            raise SpecError("--record", f"{row['paper']}/{row['id']} ran in {row['mode']}: only full-mode CPU-scale "
                                        "rows are recorded")
    path = path or RECORDED
    stored = json.loads(path.read_text()) if path.exists() else {"about": {}, "rows": []}
    ran_on = environment(run_threads=torch.get_num_threads() if workers == 1 and backend == "local" else 1)
    new = {f"{r['paper']}/{r['id']}": {**r, "environment": ran_on} for r in rows}
    kept = {f"{r['paper']}/{r['id']}": r for r in stored["rows"] if f"{r['paper']}/{r['id']}" not in new}
    order = [f"{c.paper}/{c.id}" for c in claims()]
    merged = [{k: v for k, v in (new.get(key) or kept[key]).items() if k != "stale"}
              for key in order if key in new or key in kept]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    about = {"date": time.strftime("%Y-%m-%d"), "commit": commit or "unknown",
             "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or platform.system()}",
             "command": f"explorer claims --record --workers {workers} --backend {backend}" + (" --batched" if batched else "")
             + f" ({len(rows)} claims; full mode)",
             "wall_seconds": round(time.time() - started, 1), "load_average_at_end": load,
             "torch": torch.__version__}
    if kept:  # every recording whose rows are still kept, newest first
        previous = {k: v for k, v in stored["about"].items() if k not in ("earlier", "note")}
        about["earlier"] = [previous, *stored["about"].get("earlier", [])] if previous else []
        about["note"] = (f"{len(kept)} rows were recorded earlier (their claims did not run this time; see "
                         "'earlier', newest first)")
    path.write_text(json.dumps({"about": about, "rows": merged}, indent=1) + "\n")
    _stored_results.cache_clear()
    return path


def environment(run_threads: int | None = None) -> dict[str, Any]:
    """What a row ran on, as far as it changes float results: the CPU model and a short hash of its flags (its
    instruction sets pick the kernels), the torch version and build, this process's torch threads, the threads
    each run trained with (`run_threads`, default the same) and OMP_NUM_THREADS."""
    import platform

    import torch

    model, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and not model:
                model = value.strip()
            elif name.strip() == "flags" and not flags:
                flags = value.strip()
    except OSError:  # no /proc (not Linux): the platform's words
        pass
    git = (torch.version.git_version or "unknown")[:12]
    return {"cpu": model or platform.processor() or platform.machine(),
            "cpu_flags": (hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:12] if flags
                          else "unknown"),
            "torch": torch.__version__,
            "torch_build": f"git {git}, " + (f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only"),
            "torch_threads": torch.get_num_threads(), "run_threads": run_threads or torch.get_num_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "")}


def reproduce(key: str, seed: int = 0) -> dict[str, Any]:
    """Rerun one seed of a recorded claim ("paper/id") in full mode, with the threads its runs trained with:
    {"key", "seed", "recorded": the row's environment (None when it has none), "now": this machine's,
    "series": [(name, recorded value, rerun value, difference), ...] for every per-seed series of the row, "seconds"}.
    The difference is rerun - recorded (per element for lists; None where the values are not numbers and differ).
    A key or seed that was not recorded is a SpecError naming --reproduce or --seed."""
    import torch

    rows = {f"{r['paper']}/{r['id']}": r for r in recorded()["rows"]}
    row = rows.get(key)
    if row is None:
        raise SpecError("--reproduce", f"no recorded claim {key!r}; give paper/id, one of: {', '.join(rows)}")
    series = {name: values for name, values in row["per_seed"].items() if isinstance(values, list)}
    if not series:
        raise SpecError("--reproduce", f"{key} records no per-seed numbers ({row['verdict']}): there is nothing to "
                                       "rerun; pick a claim whose row has per-seed numbers")
    seeds = max(len(values) for values in series.values())
    if not isinstance(seed, int) or not 0 <= seed < seeds:
        raise SpecError("--seed", f"{key} recorded seeds 0 to {seeds - 1}; give --seed N with N in that range")
    was = row.get("environment")
    threads = torch.get_num_threads()
    torch.set_num_threads(int((was or {}).get("run_threads") or threads))
    try:
        now_env = environment()
        rerun = CLAIMS[key].run(fast=False, only_seed=seed)
    finally:
        torch.set_num_threads(threads)
    if rerun["verdict"] == "error":
        raise RuntimeError(f"{key} seed {seed} failed on rerun: {rerun['reason']}")
    out = []
    for name, values in series.items():
        before = values[seed] if seed < len(values) else None
        after = rerun["per_seed"].get(name, [None])[0] if name in rerun["per_seed"] else "(no such series now)"
        out.append((name, before, after, _difference(before, after)))
    return {"key": key, "seed": seed, "recorded": was, "now": now_env, "series": out, "seconds": rerun["seconds"]}


def _difference(before: Any, after: Any) -> Any:
    """after - before for numbers (0 for equal values of any kind), per element for lists, else None."""
    if before == after:
        return 0 if not isinstance(before, list) else [_difference(b, a) for b, a in zip(before, after)]
    number = (int, float)
    if isinstance(before, number) and isinstance(after, number) and not isinstance(before, bool) \
            and not isinstance(after, bool):
        return after - before
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [_difference(b, a) for b, a in zip(before, after)]
    return None


@functools.cache
def _stored_results() -> dict[str, Any]:
    """RECORDED, read once per process (callers get copies of its rows and never change them)."""
    return json.loads(RECORDED.read_text()) if RECORDED.exists() else {"about": {}, "rows": []}


def per_seed_text(per_seed: dict[str, list]) -> str:
    """The per-seed numbers as one line: "name: a, b, c; name: ..."."""
    def short(v):
        if isinstance(v, float):
            return f"{v:.3g}"
        if isinstance(v, list):
            return "[" + ", ".join(short(x) for x in v) + "]"
        return "-" if v is None else str(v)

    return "; ".join(f"{name}: {', '.join(short(v) for v in values)}" for name, values in per_seed.items())


def table(rows: list[dict]) -> str:
    """The rows as a plain-text table a student can read: verdict, claim, per-seed numbers, rule, reason."""
    lines = []
    for r in rows:
        lines.append(f"{r['verdict'].upper():14s} {r['paper']}/{r['id']}  [{r['section']}]  ({r['mode']}, "
                     f"{r['seconds']} s)")
        lines.append(f"    claim:     {r['statement']}")
        if r["verdict"] == "error":
            lines.append(f"    error:     {r['reason']}")
            continue
        lines.append(f"    source:    {r['source']}")
        lines.append(f"    set-up:    {r['setup']}")
        lines.append(f"    measured:  {r.get('summary') or summary_of(r['per_seed'])}")
        lines.append(f"    per seed:  {per_seed_text(r['per_seed'])}")
        lines.append(f"    rule:      {r['rule']}")
        lines.append(f"    threshold: {r['threshold']}")
        lines.append(f"    why:       {r['reason']}")
        if (r.get("float_spread") or {}).get("text"):
            lines.append(f"    spread:    {r['float_spread']['text']}")
        if r["note"]:
            lines.append(f"    note:      {r['note']}")
    return "\n".join(lines)


# ---- figures: what a claim decided on, drawn ------------------------------------------------------------------------

def _tau_norm_figure(row: dict):
    """tau/init-norm-sharp-threshold: the measured norm ratio against depth, with Theorems 1 and 4's bounds."""
    from explorer import plots

    m = row["measured"]
    curves = {"measured, τ = 1/√L": m["R[1/sqrt(L)]"], "Theorem 1's ceiling, τ = 1/√L": m["theory_R_upper[1/sqrt(L)]"],
              "measured, τ = L^-1/4": m["R[1/L^0.25]"], "Theorem 4's floor L^1/4, τ = L^-1/4": m["theorem4_floor[1/L^0.25]"]}
    return plots.theory_curves(m["depths"], curves, "Norm growth at initialisation: ||h_(L-1)|| / ||h_0||",
                               "depth L", "RMS norm ratio R", log_x=True, log_y=True)


def _width_figure(row: dict):
    """dca/table2-width-trend: DCA's gain (Transformer - DCA validation loss) against width, one curve per seed."""
    from explorer import plots

    per_seed, prefix = row["per_seed"], "gain (transformer - DCA) at width "
    widths = sorted(int(key.removeprefix(prefix)) for key in per_seed if key.startswith(prefix))
    n_seeds = len(per_seed[f"{prefix}{widths[0]}"])
    curves = {f"seed {i}": [per_seed[f"{prefix}{w}"][i] for w in widths] for i in range(n_seeds)}
    return plots.theory_curves(widths, curves, "DCA's gain over the Transformer against width (one curve per seed)",
                               "width", "gain: val loss Transformer - DCA (nats)", log_x=True)


def _trainability_figure(row: dict):
    """tau/fig1-threshold, fig1-depth30-explodes and fig2-no-norm-needs-tau: validation accuracy against depth for
    each tau rule, a panel per learning rate, a marker per seed and a line through the seeds' mean; a run that exploded
    has no accuracy: the panel says at which depth and on how many seeds, in the rule's colour."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from explorer import plots

    per_seed, depths, lrs = row["per_seed"], row["measured"]["depths"], row["measured"]["lrs"]
    rules = list(dict.fromkeys(key.split(", ", 1)[1].split(" @ ")[0] for key in per_seed if " @ L=" in key))
    colours = plots.run_colors([f"τ = {rule}" for rule in rules])
    fig = make_subplots(rows=1, cols=len(lrs), shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=[f"lr {lr:g}" for lr in lrs])
    for col, lr in enumerate(lrs, start=1):
        for k, rule in enumerate(rules):
            colour, name = colours[f"τ = {rule}"], f"τ = {rule}"
            runs = {L: per_seed[f"lr {lr:g}, {rule} @ L={L}: val acc / final loss"] for L in depths}
            means, exploded = [], []
            for L in depths:
                accs = [run[0] for run in runs[L] if run and run[0] is not None]
                means.append(sum(accs) / len(accs) if len(accs) == len(runs[L]) else None)
                if len(accs) < len(runs[L]):
                    exploded.append((L, len(runs[L]) - len(accs), len(runs[L])))
            fig.add_trace(go.Scatter(x=list(depths), y=means, mode="lines", name=name, legendgroup=name,
                                     showlegend=False, line=dict(color=colour, width=2),
                                     hovertemplate=f"{name}, depth %{{x}}: mean val acc %{{y:.3f}}<extra></extra>"),
                          row=1, col=col)
            for seed in range(max(len(v) for v in runs.values())):
                points = [(L, run[seed]) for L, run in runs.items() if seed < len(run) and run[seed]
                          and run[seed][0] is not None]
                fig.add_trace(go.Scatter(
                    x=[x for x, _ in points], y=[p[0] for _, p in points], mode="markers", name=name,
                    legendgroup=name, showlegend=col == 1 and seed == 0,
                    marker=dict(size=10, color=colour, opacity=0.8, line=dict(width=1, color="white")),
                    customdata=[p[1] for _, p in points],
                    hovertemplate=f"{name}, seed {seed}, depth %{{x}}<br>val acc %{{y:.3f}}, final loss "
                                  f"%{{customdata:.3g}}<extra></extra>"), row=1, col=col)
            for L, n, total in exploded:
                fig.add_annotation(x=math.log10(L), y=0.06 + 0.09 * k, xref=f"x{col if col > 1 else ''}",
                                   yref=f"y{col if col > 1 else ''} domain", text=f"✕ {n}/{total}",
                                   showarrow=False, font=dict(color=colour, size=13))
        fig.update_xaxes(title=dict(text="depth L (log scale)"), type="log", tickvals=list(depths),
                         ticktext=[str(L) for L in depths], row=1, col=col)
    fig.update_yaxes(title=dict(text="validation accuracy"), row=1, col=1)
    return fig.update_layout(
        template="plotly_white", title=dict(text="Val accuracy by depth (✕ n/N: exploded)", font=dict(size=15)),
        height=460, font=dict(size=14), margin=dict(l=10, r=20, t=70, b=40),
        legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0.0))


def _overhead_figure(row: dict):
    """ancre/table6-overhead: the time ratio (with / without ANCRe) of each interleaved repeat, with the claim's limit
    and the paper's LLaMA-350M ratio."""
    import plotly.graph_objects as go

    m = row["measured"]
    ratios = m["time ratio per repeat"]
    fig = go.Figure(go.Scatter(x=ratios, y=[f"repeat {k + 1}" for k in range(len(ratios))], mode="markers",
                               name="time ratio per repeat", marker=dict(size=11),
                               hovertemplate="%{y}: %{x:.4f}<extra></extra>"))
    # the two lines can be close: one label at the top, the other at the bottom, so they never overlap
    for x, text, dash, place in ((1 + m["limit on the time overhead"], "limit", "dash", "top right"),
                                 (1 + m["paper: LLaMA-350M runtime overhead"], "paper, LLaMA-350M", "dot",
                                  "bottom right")):
        fig.add_vline(x=x, line_dash=dash, annotation_text=text, annotation_position=place)
    return fig.update_layout(template="plotly_white", title="Time per step with / without ANCRe, per repeat",
                             xaxis_title="CPU time ratio with / without ANCRe", height=360, showlegend=False,
                             margin=dict(l=10, r=20, t=60, b=40))


def _trains_grid_figure(row: dict):
    """idinit/fig6-hyperparameter-robustness: a learning-rate x weight-decay heatmap per init, one above the other (a
    column of the Papers page is narrow), each cell coloured by the share of seeds that train there and labelled
    "k/n" with the seeds' mean val accuracy (hover: each seed's)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    m = row["measured"]
    lrs, wds, arms = m["lrs"], m["wds"], m["arms"]
    trains, accuracy = m["trains [lr][wd][seed]"], m["val accuracy [lr][wd][seed]"]
    fig = make_subplots(rows=len(arms), cols=1, shared_xaxes=True, vertical_spacing=0.14,
                        subplot_titles=[f"{a}: {sum(map(sum, (c for r in trains[a] for c in r)))} runs train"
                                        for a in arms])
    xs, ys = [f"{wd:g}" for wd in wds], [f"{lr:g}" for lr in lrs]
    for place, arm in enumerate(arms, start=1):
        share = [[sum(cell) / len(cell) for cell in r] for r in trains[arm]]

        def label(accs, flags):
            found = [a for a in accs if a is not None]
            return f"{sum(flags)}/{len(flags)}" + (f"<br>{sum(found) / len(found):.2f}" if found else "<br>diverged")

        text = [[label(a, t) for a, t in zip(ra, rt)] for ra, rt in zip(accuracy[arm], trains[arm])]
        hover = [[f"lr {y}, weight decay {x}<br>" + "<br>".join(
            f"seed {s}: " + ("diverged" if a is None else f"val acc {a:.3f}") + (" (trains)" if t else "")
            for s, (a, t) in enumerate(zip(ac, tc))) for x, ac, tc in zip(xs, ra, rt)]
            for y, ra, rt in zip(ys, accuracy[arm], trains[arm])]
        fig.add_trace(go.Heatmap(z=share, x=xs, y=ys, text=text, texttemplate="%{text}", textfont=dict(size=12),
                                 customdata=hover, hovertemplate="%{customdata}<extra></extra>", zmin=0, zmax=1,
                                 colorscale=[[0, "#e8e8e8"], [1, "#2a9d8f"]], showscale=False, xgap=2, ygap=2),
                      row=place, col=1)
        fig.update_yaxes(type="category", title=dict(text="learning rate"), row=place, col=1)
        fig.update_xaxes(type="category", row=place, col=1)
    fig.update_xaxes(title=dict(text="weight decay"), row=len(arms), col=1)
    return fig.update_layout(
        template="plotly_white", height=260 * len(arms) + 90, font=dict(size=13), margin=dict(l=10, r=20, t=90, b=40),
        title=dict(text="Where each init trains<br><sup>cell: seeds that train / seeds, mean val accuracy; "
                        "green: all train</sup>", font=dict(size=15)))


#: claims with a figure of their own (the per-seed strip plot draws the others): (paper, id) -> draw(row)
FIGURES: dict[tuple[str, str], Callable[[dict], Any]] = {
    ("tau", "init-norm-sharp-threshold"): _tau_norm_figure,
    ("tau", "fig1-depth30-explodes"): _trainability_figure,
    ("tau", "fig1-threshold"): _trainability_figure,
    ("tau", "fig2-no-norm-needs-tau"): _trainability_figure,
    ("dca", "table2-width-trend"): _width_figure,
    ("ancre", "table6-overhead"): _overhead_figure,
    ("idinit", "fig6-hyperparameter-robustness"): _trains_grid_figure,
}


def figure(row: dict):
    """A claim row's figure (plotly), the same in the notebooks and on the Papers page: the claim's own (`FIGURES`)
    where it has one, else (also when the row's numbers are not shaped as that figure needs) the per-seed numbers
    (`explorer.plots.claim_figure`); None when the row has no numbers to draw."""
    from explorer import plots

    draw = FIGURES.get((row.get("paper"), row.get("id")))
    if draw is not None:
        try:
            return draw(row)
        except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError):
            pass  # numbers not shaped as that figure needs: draw them as they are
    return plots.claim_figure(row)


def steps_saved(run, reference, key: str = "val_loss") -> float:
    """The share of its training steps `run` saves to match `reference` (two runs of the same length T, their
    `key` logged along the way): when `run` ends at or below the reference's final value L, 1 - t / T with t the
    first logged step at which `run` reaches L (the papers' "matches the perplexity of ... using 34.3% fewer
    training iterations"); when it ends above, minus the same share for the reference reaching `run`'s final
    value. NaN when a final value is missing or not finite."""

    def curve(r):
        return [(int(row["step"]), float(row[key])) for row in r.history
                if row.get(key) is not None and math.isfinite(float(row[key]))]

    mine, theirs = curve(run), curve(reference)
    if not mine or not theirs or mine[-1][0] != run.steps_done or theirs[-1][0] != reference.steps_done:
        return math.nan  # a run without a final value (diverged, or never logged)
    total = max(run.steps_done, 1)

    def first_at(points, level):
        return next(step for step, value in points if value <= level)  # the final point reaches it at least

    if mine[-1][1] <= theirs[-1][1]:
        return 1 - first_at(mine, theirs[-1][1]) / total
    return -(1 - first_at(theirs, mine[-1][1]) / total)


def time_speedup(run, reference, key: str = "val_loss") -> float:
    """The reference's training seconds over `run`'s up to the first logged step at which its `key` is at or below
    the reference's final value (each history row's "time": seconds since its run started, validation passes
    included): above 1 when `run` gets there sooner in wall time. NaN where it never does or a value is missing."""
    rows = [row for row in run.history if row.get(key) is not None and math.isfinite(float(row[key]))]
    final = reference.history[-1] if reference.history else {}
    if not rows or final.get(key) is None or not math.isfinite(float(final[key])):
        return math.nan
    reached = next((row for row in rows if float(row[key]) <= float(final[key])), None)
    return final["time"] / reached["time"] if reached is not None and reached["time"] > 0 else math.nan


def steps_to(run, level: float, key: str = "loss") -> int | None:
    """The first logged step at which `run`'s `key` (by default the training loss) is at or below `level`; None if
    it never is (non-finite values are skipped)."""
    for row in run.history:
        value = row.get(key)
        if value is not None and math.isfinite(float(value)) and float(value) <= level:
            return int(row["step"])
    return None

def seeded(spec, seed: int):
    """`spec` with train.seed = `seed` (the model's init and the batch order; the dataset stays the same)."""
    return spec.with_values({"train.seed": seed})


def _jsonable(value: Any) -> Any:
    """Numbers, strings, lists and dicts only (numpy scalars and arrays converted; NaN/inf -> None)."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, (np.integer,)):
        return int(value)
    return value

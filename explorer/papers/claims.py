"""Claims: a paper's statement, checked on real runs, with a verdict a reviewer would accept.

A claim is a function `check(mode, **controls) -> Verdict` registered with `@claim(...)`, which
names the paper, where the statement is (`section`), the statement, the paper's own words
(`source`, quoted with its location) and what running it at the paper's size needs (`paper_scale`).

Four verdicts (plus "error", an exception in the check):

* holds / does-not-hold: the measured effect points one way on every seed, by more than its noise;
* inconclusive: the effect is within the run-to-run noise, a score sits at its trivial floor (chance
  accuracy, an all-background mIoU, float noise), or the run is too short to decide;
* not-tested: no set-up here tests the paper's statement itself (a proxy is not the claim); the reason
  says what it would need and what was seen on the nearest set-up.

`decide` is the one rule used for stochastic comparisons: it takes the paired same-seed
differences (oriented so that positive supports the claim). Full mode runs at least 3 seeds
(`Mode.seeds`); fast mode (CI) runs one, and then answers holds / does-not-hold only when the
difference is larger than the claim's declared fast-mode margin. `decide_all` is the rule for
per-seed pass/fail checks (a theorem's bound on every seed). Every row carries the statement and
its source, our set-up and how it differs, the per-seed numbers, the rule, the threshold and where
it comes from, and the verdict:

    from explorer.papers.claims import run_claims
    rows = run_claims(paper="tau", fast=True)   # [{"paper", "id", "verdict", "per_seed", "rule", ...}, ...]
"""

from __future__ import annotations

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

from explorer.papers.base import PAPERS
from explorer.plots import per_seed_summary as summary_of  # the measured line of a row without a summary
from explorer.registries import SpecError

VERDICTS = ("holds", "does-not-hold", "inconclusive", "not-tested", "error")
SCALES = ("cpu", "paper")
FULL_SEEDS = (0, 1, 2)
SIGMAS = 2.0  # decide: |mean paired difference| must exceed SIGMAS x their standard deviation
RECORDED = Path(__file__).with_name("claims_full.json")  # the full-mode rows recorded with the package


@dataclass(frozen=True)
class Mode:
    """How a claim runs: fast (CI: one seed, smaller runs) or full (>= 3 seeds), at CPU or paper scale."""

    fast: bool = False
    scale: str = "cpu"
    device: str = "cpu"
    full_seeds: int = len(FULL_SEEDS)  # a claim may ask for more (its noise needs them)
    deterministic: bool = False  # one run decides (no seed changes it): the label says so

    @property
    def seeds(self) -> tuple[int, ...]:
        return (0,) if self.fast else tuple(range(self.full_seeds))

    @property
    def label(self) -> str:
        runs = "one deterministic run" if self.deterministic else \
            f"{len(self.seeds)} seed{'s' if len(self.seeds) > 1 else ''}"
        return f"{'fast' if self.fast else 'full'} mode, {runs}, {self.scale} scale"


@dataclass(frozen=True)
class Decision:
    """A verdict, the rule that produced it (text) and why it came out that way (text, with the numbers)."""

    verdict: str
    rule: str
    reason: str


def decide(diffs: Sequence[float], *, fast_margin: float, min_effect: float = 0.0, floors: dict[str, bool] | None = None,
           what: str = "difference") -> Decision:
    """The verdict from paired same-seed differences `diffs` (positive supports the claim).

    Any floor that is True (e.g. {"accuracy at chance 0.2": True}) -> inconclusive. With >= 2 seeds:
    holds when every difference is > 0, the mean exceeds SIGMAS x their standard deviation and
    |mean| > min_effect; does-not-hold when every difference is < 0 with the same margins;
    otherwise inconclusive. With one seed (fast mode) the noise is unknown: holds only when the
    difference exceeds `fast_margin`, does-not-hold only below -fast_margin, else inconclusive.
    The reason says which test failed (the seeds' signs, the noise, the threshold), and a floor never
    hides differences that all point against the claim: the reason says so first; an undecided reason also says
    how many seeds point against the claim.
    """
    values = [float(d) for d in diffs]
    if not values:
        raise ValueError("decide needs at least one paired difference")
    hit = [name for name, on in (floors or {}).items() if on]
    n, mean = len(values), statistics.fmean(values)
    if n >= 2:
        spread = statistics.stdev(values)
        rule = (f"{what} per seed (positive supports the claim), {n} seeds: holds if all > 0 and mean > "
                f"{SIGMAS:g} x paired std" + (f" and mean > {min_effect:g}" if min_effect else "")
                + "; does-not-hold if all < 0 with the same margins; otherwise inconclusive")
        stats = f"mean {mean:.4g}, paired std {spread:.3g}, values {', '.join(f'{v:.4g}' for v in values)}"
    else:
        spread = math.nan
        rule = (f"{what} (positive supports the claim), one seed (fast mode): holds if > {fast_margin:g}, "
                f"does-not-hold if < -{fast_margin:g}, otherwise inconclusive")
        stats = f"value {mean:.4g}"
    if floors:
        rule += "; inconclusive at a floor (" + "; ".join(floors) + ")"
    if any(not math.isfinite(v) for v in values):
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
    same_sign = all(v > 0 for v in values) or all(v < 0 for v in values)
    clear_of_noise = abs(mean) > SIGMAS * spread
    big_enough = abs(mean) > min_effect
    if same_sign and clear_of_noise and big_enough:
        if mean > 0:
            return Decision("holds", rule, f"every seed agrees and the mean is clear of the noise ({stats})")
        return Decision("does-not-hold", rule, f"every seed points the other way, clear of the noise ({stats})")
    direction = "for" if mean > 0 else "against"
    if not same_sign:
        why = f"the seeds disagree in sign ({contrary})" if contrary else "the seeds disagree in sign"
    elif not clear_of_noise:
        why = f"every seed points {direction} the claim, but the mean is within {SIGMAS:g} x the paired std (noise)"
    else:
        why = (f"every seed points {direction} the claim, clear of the noise, but |mean| is under the claim's "
               f"threshold {min_effect:g}")
    return Decision("inconclusive", rule, f"{why} ({stats})")


def decide_all(passed: Sequence[bool], test: str, floors: dict[str, bool] | None = None) -> Decision:
    """Per-seed pass/fail of `test` (text): holds if every seed passes, does-not-hold if none does,
    inconclusive if they disagree or a floor is hit."""
    flags = [bool(p) for p in passed]
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
    """A claim made of several parts: holds if all hold, does-not-hold if any does not, else inconclusive."""
    verdicts = [d.verdict for d in parts.values()]
    verdict = "holds" if all(v == "holds" for v in verdicts) else \
        "does-not-hold" if "does-not-hold" in verdicts else "inconclusive"
    rule = " AND ".join(f"[{name}] {d.rule}" for name, d in parts.items())
    reason = "; ".join(f"[{name}] {d.verdict}: {d.reason}" for name, d in parts.items())
    return Decision(verdict, rule, reason)


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
    full_seeds: int = len(FULL_SEEDS)  # seeds in full mode
    deterministic: bool = False  # one run decides whatever the seed (the mode's label says so)

    @functools.cached_property  # the source is read once per claim (the Papers page asks on every rerun)
    def fingerprint(self) -> str:
        """A hash of the check's source: a recorded result whose fingerprint differs was made by other code."""
        return hashlib.sha256(inspect.getsource(self.check).encode()).hexdigest()[:16]

    def run(self, fast: bool = False, scale: str = "cpu", device: str = "cpu", **controls) -> dict[str, Any]:
        """The claim's row (see ROW_KEYS); `controls` go to the check (the tests' negative controls)."""
        if scale not in SCALES:
            raise SpecError("--scale", f"unknown scale {scale!r}; use one of {', '.join(SCALES)}")
        mode = Mode(fast=fast, scale=scale, device=device, full_seeds=self.full_seeds, deterministic=self.deterministic)
        start = time.perf_counter()
        row = {"paper": self.paper, "id": self.id, "section": self.section, "statement": self.statement,
               "source": self.source, "paper_scale": self.paper_scale, "mode": mode.label,
               "fingerprint": self.fingerprint}
        if scale == "paper" and not self.paper_spec:
            row.update({"verdict": "inconclusive", "reason": f"no paper-scale spec for this claim: {self.paper_scale}",
                        "rule": "", "threshold": "", "setup": "", "per_seed": {}, "measured": {}, "note": "",
                        "summary": "", "seconds": 0.0})
            return row
        try:
            result = self.check(mode, **controls)
            row.update({"verdict": result.decision.verdict, "reason": result.decision.reason,
                        "rule": result.decision.rule, "threshold": result.threshold, "setup": result.setup,
                        "per_seed": _jsonable(result.per_seed), "measured": _jsonable(result.measured),
                        "note": result.note})
            row["summary"] = result.summary or summary_of(row["per_seed"])
        except Exception as error:  # noqa: BLE001  (a claim that errors is reported, the table goes on)
            row.update({"verdict": "error", "reason": f"{type(error).__name__}: {error}", "rule": "", "threshold": "",
                        "setup": "", "per_seed": {}, "measured": {}, "summary": "",
                        "note": f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}"})
        row["seconds"] = round(time.perf_counter() - start, 2)
        return row


ROW_KEYS = ("paper", "id", "section", "statement", "source", "paper_scale", "mode", "fingerprint", "verdict", "reason",
            "rule", "threshold", "setup", "per_seed", "measured", "summary", "note", "seconds")
CLAIMS: dict[str, Claim] = {}


def claim(paper: str, id: str, section: str, statement: str, source: str, paper_scale: str, paper_spec: bool = False,
          full_seeds: int = len(FULL_SEEDS), deterministic: bool = False):
    """Register `check(mode, **controls) -> Verdict` as a claim of `paper` (in PAPERS: its module registers its
    `Paper` above its claims), under a unique `id`.

    `source`: the paper's words, quoted, with their location; `paper_scale`: what running the claim at the
    paper's size means here (`--scale paper`), with the hardware and time it needs, or why it is the same;
    `paper_spec`: True when `--scale paper` runs it (at the paper's size, or because the CPU check already is);
    otherwise `--scale paper` answers inconclusive with `paper_scale` as the reason; `full_seeds`: the seeds full
    mode runs (more where the noise needs them); `deterministic`: one run decides, whatever the seed."""
    if paper not in PAPERS:
        raise ValueError(f"paper {paper!r} is not registered: register its Paper (register_paper) above its claims; "
                         f"registered: {', '.join(PAPERS)}")

    def register(check: Callable[..., Verdict]) -> Callable[..., Verdict]:
        key = f"{paper}/{id}"
        if key in CLAIMS:
            raise ValueError(f"claim {key} is registered twice")
        CLAIMS[key] = Claim(paper, id, section, statement, source, paper_scale, check, paper_spec, full_seeds,
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
        fast = os.environ.get("EXPLORER_FAST") == "1"
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
        """One line: "claim 3 of 21 (tau/fig1-trainability): run 4 of 18, ~1 min 20 s left (all: ~14 min left)"."""
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
    claims and keeping the others; "about" says when, on which commit and machine, how (workers, backend) and how long
    the run took. Rows of fast mode or of the paper scale are refused: the file holds full-mode CPU-scale evidence."""
    import platform
    import subprocess

    import torch

    for row in rows:
        if not row["mode"].startswith("full mode") or not row["mode"].endswith("cpu scale"):
            raise SpecError("--record", f"{row['paper']}/{row['id']} ran in {row['mode']}: only full-mode CPU-scale "
                                        "rows are recorded")
    path = path or RECORDED
    stored = json.loads(path.read_text()) if path.exists() else {"about": {}, "rows": []}
    new = {f"{r['paper']}/{r['id']}": r for r in rows}
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
    """tau/fig1-trainability: validation accuracy against depth for each tau rule, a panel per learning rate, a
    marker per seed and a line through the seeds' mean; a run that exploded has no accuracy: the panel says at which
    depth and on how many seeds, in the rule's colour."""
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


#: claims with a figure of their own (the per-seed strip plot draws the others): (paper, id) -> draw(row)
FIGURES: dict[tuple[str, str], Callable[[dict], Any]] = {
    ("tau", "init-norm-sharp-threshold"): _tau_norm_figure,
    ("tau", "fig1-trainability"): _trainability_figure,
    ("dca", "table2-width-trend"): _width_figure,
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

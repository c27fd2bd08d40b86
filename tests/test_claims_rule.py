"""The verdict rule (docs/verdicts.md): a one-sided paired t-test at level ALPHA, its false-"holds" rate on simulated
zero-mean noise (one look and through a seed schedule), its power on a small consistent effect, the interval by
hand, fast mode and floors as before; seed schedules in Claim.run; the rule in the fingerprint."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from explorer.papers import base, clear_cache, preset
from explorer.papers import claims as registry
from explorer.papers.claims import ALPHA, Claim, Verdict, decide, seeded, spent_alpha

DRAWS = 4000
ALLOWANCE = 3 * math.sqrt(ALPHA * (1 - ALPHA) / DRAWS)  # three binomial standard deviations of the measured rate
SCHEDULE = (3, 5, 10)
SMALL = (0.0003, 0.0034, 0.0018)  # a consistent small effect: three seeds' gains in nats


def _claim(check, seeds=SCHEDULE) -> Claim:
    """A claim of our own (not registered) with `check` and the seed schedule `seeds`."""
    return Claim("tau", "simulated", "Sec. 0", "it holds", "\"quoted\"", "same as cpu", check, seeds=seeds)


def _simulated(mean: float, std: float, first=()):
    """A check whose seed s gives the paired difference s of a draw (the control `draw`): the `first` values, then
    normal N(mean, std) ones. A look at more seeds keeps the earlier seeds' values, as cached runs do."""
    def check(mode, draw: int):
        values = np.random.default_rng([draw, 35]).normal(mean, std, size=SCHEDULE[-1])
        values[:len(first)] = first
        diffs = [float(values[s]) for s in mode.seeds]
        return Verdict(decide(diffs, fast_margin=1.0), {"difference": diffs}, "ours", "simulated")

    return check


def _rate(verdicts, which="holds") -> float:
    return sum(v == which for v in verdicts) / len(verdicts)


# ---- the error rate -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [3, 5, 10])
def test_zero_mean_noise_holds_at_no_more_than_alpha(n):
    rng = np.random.default_rng(n)
    verdicts = [decide(rng.normal(0.0, 1.0, size=n), fast_margin=1.0).verdict for _ in range(DRAWS)]
    assert _rate(verdicts) <= ALPHA + ALLOWANCE
    assert _rate(verdicts, "does-not-hold") <= ALPHA + ALLOWANCE  # the other side is the same test


def test_noise_at_the_claims_threshold_holds_at_no_more_than_alpha():
    rng = np.random.default_rng(7)
    verdicts = [decide(rng.normal(0.3, 0.1, size=5), fast_margin=1.0, min_effect=0.3).verdict for _ in range(DRAWS)]
    assert _rate(verdicts) <= ALPHA + ALLOWANCE


def test_the_looks_of_a_seed_schedule_spend_alpha_in_all():
    levels = [spent_alpha(SCHEDULE, n) for n in SCHEDULE]
    assert levels == pytest.approx([ALPHA * 0.09, ALPHA * 0.16, ALPHA * 0.75]) and sum(levels) == pytest.approx(ALPHA)
    assert spent_alpha((3,), 3) == ALPHA and spent_alpha(SCHEDULE, 4) == ALPHA  # one look: all of it


def test_zero_mean_noise_run_through_the_seed_schedule_holds_at_no_more_than_alpha():
    simulated = _claim(_simulated(0.0, 1.0))
    rows = [simulated.run(draw=d) for d in range(DRAWS)]
    assert _rate([r["verdict"] for r in rows]) <= ALPHA + ALLOWANCE
    assert sum("cap of 10 seeds reached" in r["mode"] for r in rows) > DRAWS / 2  # most draws looked three times


def test_looking_three_times_without_spending_alpha_would_hold_too_often():
    """The same draws decided at the full ALPHA at every look: the rate the spending split keeps below ALPHA."""
    once = _claim(_simulated(0.0, 1.0), seeds=(10,))
    fixed = dataclasses.replace(once, seeds=SCHEDULE)
    real = registry.spent_alpha
    try:
        registry.spent_alpha = lambda schedule, seeds: ALPHA
        naive = [fixed.run(draw=d)["verdict"] for d in range(DRAWS)]
    finally:
        registry.spent_alpha = real
    assert _rate(naive) > ALPHA + ALLOWANCE


# ---- the power on a small consistent effect ------------------------------------------------------------------

def test_a_small_consistent_effect_is_inconclusive_at_three_seeds_and_holds_at_ten():
    assert decide(SMALL, fast_margin=0.05).verdict == "inconclusive"
    mean, std = float(np.mean(SMALL)), float(np.std(SMALL, ddof=1))
    rng = np.random.default_rng(10)
    ten = [decide([*SMALL, *rng.normal(mean, std, size=7)], fast_margin=0.05).verdict for _ in range(1000)]
    assert _rate(ten) >= 0.8  # measured: 0.98
    staged = [_claim(_simulated(mean, std, first=SMALL)).run(draw=d)["verdict"] for d in range(1000)]
    assert _rate(staged) >= 0.8  # measured through (3, 5, 10): 0.95
    assert _rate(staged, "does-not-hold") == 0


# ---- the interval, by hand -----------------------------------------------------------------------------------

def test_the_interval_is_the_one_sided_t_interval_computed_by_hand():
    values = [0.0003, 0.0034, 0.0018]
    mean = sum(values) / 3
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
    t_95_2 = 2.919986  # Student's t, 95th percentile, 2 degrees of freedom (tables)
    lower, upper = registry.t_interval(values)
    assert lower == pytest.approx(mean - t_95_2 * std / math.sqrt(3), rel=1e-5)
    assert upper == pytest.approx(mean + t_95_2 * std / math.sqrt(3), rel=1e-5)
    decision = decide([1, 2, 3, 4, 5], fast_margin=0.5, min_effect=1.0)  # 3 - 2.131847 x sqrt(2.5 / 5) = 1.4925
    assert decision.verdict == "holds" and "mean 3, 95% one-sided interval [1.493, inf)" in decision.reason
    assert "level 0.05" in decision.rule and "holds if the 95% one-sided lower bound of the mean > 1" in decision.rule


def test_identical_differences_decide_on_their_value_alone():
    assert decide([0.0, 0.0, 0.0], fast_margin=1.0).verdict == "inconclusive"  # the same arm twice: no difference
    assert decide([0.2, 0.2, 0.2], fast_margin=1.0).verdict == "holds"  # no noise (a deterministic difference)


# ---- fast mode and floors, as before -------------------------------------------------------------------------

def test_fast_mode_decides_one_seed_on_its_margin_and_runs_once():
    assert [decide([v], fast_margin=0.5).verdict for v in (0.3, 0.7, -0.7)] == ["inconclusive", "holds",
                                                                              "does-not-hold"]
    assert decide([0.3], fast_margin=0.1, min_effect=0.5).verdict == "inconclusive"  # the larger of the two
    looks = []

    def check(mode):
        looks.append(mode.seeds)
        return Verdict(decide([0.01] * len(mode.seeds), fast_margin=1.0), {}, "", "")

    row = _claim(check).run(fast=True)
    assert looks == [(0,)] and row["mode"] == "fast mode, 1 seed, cpu scale" and row["verdict"] == "inconclusive"


def test_a_floor_is_inconclusive_whatever_the_effect_and_stops_the_schedule():
    floored = decide([0.5, 0.55, 0.45], fast_margin=1.0, floors={"accuracy at chance": True, "other": False})
    assert floored.verdict == "inconclusive" and not floored.noisy and "accuracy at chance" in floored.reason
    against = decide([-0.2, -0.25, -0.3], fast_margin=0.1, floors={"arm at chance": True})
    assert against.reason.startswith("every seed points against the claim")
    looks = []

    def check(mode):
        looks.append(len(mode.seeds))
        return Verdict(decide([0.1, -0.1, 0.05][:len(mode.seeds)], fast_margin=1.0, floors={"too short": True}), {},
                       "", "")

    row = _claim(check).run()
    assert looks == [3] and "stopped at 3 seeds: undecided for a reason more seeds do not change" in row["mode"]


# ---- seed schedules in Claim.run -------------------------------------------------------------------------------

def test_a_schedule_adds_seeds_until_it_decides_and_the_row_says_why_it_stopped():
    looks, rules = [], []

    def check(mode):
        looks.append(len(mode.seeds))
        diffs = [0.1, 0.02, 0.12, 0.11, 0.1, 0.13, 0.1, 0.12, 0.1, 0.11][:len(mode.seeds)]
        decision = decide(diffs, fast_margin=1.0)
        rules.append(decision.rule)
        return Verdict(decision, {"difference": diffs}, "", "")

    row = _claim(check).run()
    # looks at 3 and 5 seeds, then seed 0 once more for the float-level spread of the decided verdict
    assert looks == [3, 5, 1] and row["verdict"] == "holds" and len(row["per_seed"]["difference"]) == 5
    assert row["float_spread"]["survives"] is True
    assert row["mode"] == "full mode, 5 seeds (decided at 5 seeds; schedule 3, 5, 10), cpu scale"
    assert "level 0.0045 (look 1 of 3" in rules[0] and "level 0.008 (look 2 of 3" in rules[1]

    noisy = _claim(lambda mode: Verdict(decide([1.0, -1.0] * (len(mode.seeds) // 2) + [0.5] * (len(mode.seeds) % 2),
                                               fast_margin=1.0), {}, "", "")).run()
    assert noisy["mode"] == "full mode, 10 seeds (cap of 10 seeds reached; schedule 3, 5, 10), cpu scale"


def test_a_one_stage_schedule_runs_once_as_before():
    looks = []

    def check(mode):
        looks.append(len(mode.seeds))
        return Verdict(decide([1.0, -1.0, 0.5], fast_margin=1.0), {}, "", "")

    row = _claim(check, seeds=(3,)).run()
    assert looks == [3] and row["mode"] == "full mode, 3 seeds, cpu scale" and "look" not in row["rule"]


def test_the_next_stage_trains_only_the_seeds_not_yet_run():
    spec = preset("tau-fig1-1/L").with_values({"train.steps": 5, "train.log_every": 5})
    trained = []

    def check(mode):
        runs = base.train_all([seeded(spec, s) for s in mode.seeds])
        return Verdict(decide([1.0, -1.0, 0.5, 0.1][:len(runs)], fast_margin=1.0), {}, "", "")

    clear_cache()
    try:
        with base.execution(progress=lambda done, total: trained.append(total)):
            _claim(check, seeds=(3, 4)).run()
    finally:
        clear_cache()
    assert set(trained) == {3, 1}  # three runs, then the one new seed


def test_claim_refuses_a_schedule_that_is_not_increasing_or_too_small():
    for bad in [dict(seeds=(5, 3)), dict(seeds=(1, 3)), dict(seeds=()), dict(seeds=(3, 5), full_seeds=5)]:
        with pytest.raises(ValueError, match="seeds"):
            registry.claim("tau", "bad", "", "", "", "", **bad)
    assert all(c.full_seeds == c.seeds[-1] for c in registry.claims())  # the cap


def test_the_fingerprint_covers_the_rule(monkeypatch):
    claim = _claim(_simulated(0.0, 1.0))
    before = claim.fingerprint
    monkeypatch.setattr(registry, "RULE", registry.RULE + " changed")
    assert dataclasses.replace(claim).fingerprint != before

"""The float-level spread of a verdict: models built one ulp off (explorer.training.float_perturbation), in this
process and in workers, kept apart from the unperturbed runs in the papers' cache, and a decided claim whose
evidence moves more than its margin under that perturbation turned inconclusive."""

from __future__ import annotations

import math

import pytest
import torch

from explorer import build
from explorer.papers import base, clear_cache, preset
from explorer.papers import claims as registry
from explorer.papers.claims import Verdict, decide, decide_all, seeded
from explorer.training import float_perturbation, perturbing


def _spec(seed: int = 0):
    return seeded(preset("tau-fig1-1/L").with_values({"train.steps": 20, "train.log_every": 10}), seed)


def test_a_model_built_under_the_perturbation_is_one_ulp_up_where_nonzero():
    plain, _ = build(_spec())
    assert not perturbing()
    with float_perturbation():
        assert perturbing()
        nudged, _ = build(_spec())
    assert not perturbing()
    again, _ = build(_spec())
    for (name, a), b, c in zip(plain.named_parameters(), nudged.parameters(), again.parameters()):
        assert torch.equal(a, c), name  # outside the block: the same init
        expected = torch.where(a == 0, a, torch.nextafter(a, torch.full_like(a, math.inf)))
        assert torch.equal(b, expected), name  # one ulp up, zeros kept
        assert bool((b != a).any()) or bool((a == 0).all()), name


@pytest.fixture
def fresh_cache():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers train: the same float sums in this process
    clear_cache()
    yield
    torch.set_num_threads(threads)
    clear_cache()


def _final_weights(run):
    return torch.cat([p.detach().flatten() for p in run.model.parameters()])


def test_the_perturbation_reaches_the_workers_and_its_runs_are_cached_apart(fresh_cache):
    plain = base.train_all([_spec()])[0]
    with float_perturbation():
        nudged_here = base.train_all([_spec()])[0]
        assert base.train_all([_spec()])[0] is nudged_here  # cached, under a key of its own
    assert base.train_all([_spec()])[0] is plain  # the unperturbed run is still the cached one
    clear_cache()
    with base.execution(workers=2), float_perturbation():
        nudged_there = base.train_all([_spec()])[0]
    assert torch.equal(_final_weights(nudged_there), _final_weights(nudged_here))
    assert not torch.equal(_final_weights(nudged_there), _final_weights(plain))


@pytest.fixture
def sensitive_claim(monkeypatch):
    """A claim of our own whose paired differences (about 1e-3 apart from 0, nearly equal across seeds) move by
    `amplify` x the change one ulp makes to its seed's weight norm: the stand-in for a chaotic training run."""
    monkeypatch.setattr(registry, "CLAIMS", {})
    first_norm: dict[int, float] = {}

    @registry.claim("tau", "sensitive", "Sec. 1", "a small effect", "\"quoted\" (Sec. 1)", "same as cpu",
                    seeds=(3, 5))
    def sensitive(mode, amplify: float = 0.0, alternate: bool = False):
        diffs = []
        for seed in mode.seeds:
            model, _ = build(_spec(seed))
            norm = float(torch.cat([p.detach().double().flatten() for p in model.parameters()]).norm())
            diffs.append((-1) ** (seed * alternate) * (1e-3 + 1e-5 * seed)
                         + amplify * (norm - first_norm.setdefault(seed, norm)))
        flags = decide_all([d > 0 for d in diffs], "the difference is positive")
        return Verdict(registry.combine({"mean": decide(diffs, fast_margin=1.0), "signs": flags}),
                       {"difference": diffs}, "ours: 0", "a weight norm")

    return registry.CLAIMS["tau/sensitive"]


def test_a_verdict_that_a_one_ulp_change_cannot_move_survives_and_states_its_spread(sensitive_claim):
    row = sensitive_claim.run()
    spread = row["float_spread"]
    assert row["verdict"] == "holds" and spread["survives"] is True
    assert row["mode"].startswith("full mode, 3 seeds (decided at 3 seeds;")
    assert spread["moved"] == [0.0, 0.0]
    assert "seed 0 kept its pass/fail (decision 1); moved its paired difference by 0 (decision 2)" in spread["text"]


def test_a_verdict_that_the_float_spread_overturns_is_inconclusive_and_says_why(sensitive_claim):
    row = sensitive_claim.run(amplify=1e5)
    spread = row["float_spread"]
    assert spread["survives"] is False and spread["moved"][0] > 1e-3  # more than the effect itself
    assert row["verdict"] == "inconclusive"
    assert row["reason"].startswith("holds on the seeds, but not once every paired difference moves by the "
                                    "float-level spread")
    assert row["mode"].startswith("full mode, 3 seeds (decided at 3 seeds, then undone by the float-level spread;")


def test_fast_mode_and_undecided_rows_run_no_perturbation(sensitive_claim, monkeypatch):
    assert sensitive_claim.run(fast=True)["float_spread"] == {}
    monkeypatch.setattr(registry.Claim, "_float_spread", lambda *a: pytest.fail("perturbed an undecided row"))
    row = sensitive_claim.run(alternate=True)  # +, -, +: undecided
    assert row["verdict"] == "inconclusive" and row["float_spread"] == {}

"""The papers' further headline claims: the share of steps saved to reach another run's final loss (hand-made
histories), and each claim's negative control on real small runs (fast mode) where the effect is absent by
construction."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from explorer.papers import claims as registry
from explorer.papers.claims import steps_saved


def _run(losses, every=10):
    history = [{"step": i * every, "val_loss": v} for i, v in enumerate(losses)]
    return SimpleNamespace(history=history, steps_done=(len(losses) - 1) * every)


def test_steps_saved_is_the_share_of_steps_the_better_run_needs_less():
    slow = _run([4.0, 3.0, 2.5, 2.2, 2.0])  # 40 steps, ends at 2.0
    fast = _run([4.0, 2.6, 2.0, 1.9, 1.8])  # reaches 2.0 at step 20
    assert steps_saved(fast, slow) == pytest.approx(1 - 20 / 40)
    # the other way round: the slow run ends above, and the fast one reaches its final 2.0 at step 20
    assert steps_saved(slow, fast) == pytest.approx(-(1 - 20 / 40))
    assert steps_saved(slow, slow) == 0.0  # a run matches itself only at its own last step


def test_steps_saved_is_nan_without_a_final_value():
    diverged = _run([4.0, 3.0, float("nan")])
    diverged.history[-1]["val_loss"] = float("inf")
    assert math.isnan(steps_saved(diverged, _run([4.0, 3.0, 2.0])))


def _fast(key, **controls):
    return registry.CLAIMS[key].run(fast=True, **controls)


def test_ancre_with_itself_as_the_reference_saves_no_steps():
    row = _fast("ancre/fewer-steps-to-match", arms=("ancre-table2-ancre", "ancre-table2-ancre"))
    assert row["verdict"] != "holds" and row["per_seed"]["share of steps saved"] == [0.0], row["reason"]


def test_dca_against_itself_is_not_faster():
    row = _fast("dca/same-quality-faster", base="dca", variant="dca")
    assert row["verdict"] != "holds" and row["per_seed"]["share of steps saved"] == [0.0], row["reason"]


def test_the_skip_condition_claim_holds_on_the_skip_and_not_with_the_jacobians_exchanged():
    row = _fast("skipless/skips-improve-conditioning")
    assert row["verdict"] == "holds", row["reason"]
    control = _fast("skipless/skips-improve-conditioning", swapped=True)
    assert control["verdict"] == "does-not-hold", control["reason"]
    assert control["per_seed"]["median kappa(K_l), width 32"] == row["per_seed"]["median kappa(I + K_l), width 32"]


def test_tau_backward_with_the_arms_swapped_does_not_hold():
    row = _fast("tau/backward-sharp-threshold")
    assert row["verdict"] == "holds", row["reason"]
    swapped = _fast("tau/backward-sharp-threshold", bounded="1/L^0.25", growing="1/sqrt(L)")
    assert swapped["verdict"] == "does-not-hold", swapped["reason"]


def test_idinit_momentum_claim_holds_and_without_momentum_has_nothing_to_amplify():
    row = _fast("idinit/momentum-amplifies-asymmetry")
    assert row["verdict"] == "holds", row["reason"]
    control = _fast("idinit/momentum-amplifies-asymmetry", momentum=0.0)  # both arms plain SGD: the same runs
    assert control["verdict"] != "holds", control["reason"]
    assert control["per_seed"]["spread SGD"] == control["per_seed"]["spread SGD + momentum 0"]
    assert _fast("idinit/momentum-amplifies-asymmetry", swapped=True)["verdict"] == "does-not-hold"

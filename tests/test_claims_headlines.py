"""The papers' further headline claims: the share of steps saved to reach another run's final loss (hand-made
histories), and each claim's negative control on real small runs (fast mode) where the effect is absent by
construction."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from explorer.papers import claims as registry
from explorer.papers import clear_cache
from explorer.papers.claims import steps_saved, steps_to, time_speedup


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


def test_time_speedup_divides_the_references_seconds_by_the_runs_seconds_to_its_level():
    slow = _run([4.0, 3.0, 2.5, 2.2, 2.0])  # ends at 2.0 after 40 s (one second per step)
    fast = _run([4.0, 2.6, 2.0, 1.9, 1.8])  # reaches 2.0 at step 20
    for run, seconds_per_step in ((slow, 1.0), (fast, 3.0)):  # the fast run's steps cost three times as much
        for row in run.history:
            row["time"] = seconds_per_step * row["step"]
    assert time_speedup(fast, slow) == pytest.approx(40 / 60)  # half the steps, each 3x dearer: slower in seconds
    assert math.isnan(time_speedup(slow, fast))  # the slow run never reaches the fast one's final 1.8


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


def test_the_overhead_rule_decides_on_the_quartiles_of_the_paired_ratios():
    from explorer.papers.ancre import overhead_decision

    assert overhead_decision([1.01, 1.02, 1.00, 1.03], 0.045, 0.01).verdict == "holds"
    assert overhead_decision([1.08, 1.09, 1.07, 1.10], 0.045, 0.01).verdict == "does-not-hold"
    # one repeat in four slowed by load on either arm cannot flip the verdict
    assert overhead_decision([1.01, 1.02, 1.00, 1.60], 0.045, 0.01).verdict == "holds"
    assert overhead_decision([1.08, 1.09, 0.70, 1.10], 0.045, 0.01).verdict == "does-not-hold"
    # repeats on both sides of the limit, or within the margin: undecided
    assert overhead_decision([1.00, 1.10, 1.01, 1.09], 0.045, 0.01).verdict == "inconclusive"
    assert overhead_decision([1.045, 1.046, 1.044], 0.045, 0.01).verdict == "inconclusive"
    assert overhead_decision([1.10, 1.10, 1.10], 0.045, 0.5).verdict == "inconclusive"  # fast mode's margin


def test_the_overhead_limit_scales_the_papers_one_percent_by_depth_over_width():
    from explorer.papers.ancre import overhead_limit

    assert overhead_limit(24, 1024) == pytest.approx(0.01)  # LLaMA-350M, Table 6's legible pair
    assert overhead_limit(6, 64) == pytest.approx(0.01 * (7 / 64) / (25 / 1024))


def _gpt_pair(first: str, second: str):
    """The two presets' GPTs with the same weights (the first's), and a batch of validation text."""
    from explorer import preset
    from explorer.training import build

    a, data = build(preset(first))
    b, _ = build(preset(second))
    b.load_state_dict({k: v for k, v in a.state_dict().items() if "topology" not in k}, strict=False)
    return a, b, data.x_val[:4]


def test_table5_fixed_arm_is_block_level_ancre_frozen_at_its_uniform_start():
    """h_j = layer_j(h_{j-1}) + sum_{i<j} h_i / j: ANCRe's block form with every p_ij = 1/j, as ANCRe starts (zero logits)."""
    import torch

    ancre_gpt, fixed, x = _gpt_pair("ancre-table2-ancre", "ancre-table5-fixed-uniform")
    with torch.no_grad():
        assert torch.allclose(fixed(x), ancre_gpt(x), atol=1e-5)
    assert not any("topology" in name for name, _ in fixed.named_parameters())  # nothing of the mix learns


def test_table5_learnable_cascaded_arm_matches_a_hand_written_forward():
    """h_1 = h_0 + f_1(h_0), h_j = layer_j(h_{j-1}) + w_j h_{j-1} = (1 + w_j) h_{j-1} + f_j(h_{j-1}) with w_j = 1 at start;
    f_j: what whole block j adds to its input."""
    import torch

    _, net, x = _gpt_pair("ancre-table2-cascaded", "ancre-table5-learnable-cascaded")
    with torch.no_grad():
        h = net.embed(x)
        for j, block in enumerate(net.stack.blocks, start=1):
            h = (1.0 if j == 1 else 2.0) * h + block(h)
        assert torch.allclose(net(x), net.head(h), atol=1e-5)
    learned = [name for name, p in net.named_parameters() if "topology" in name]
    assert learned and sum(p.numel() for name, p in net.named_parameters() if name in learned) == 6


def test_table6_control_fails_on_its_parameters_whatever_the_load():
    """The control's ANCRe arm has twice the blocks: its extra parameters pass one feature dimension (the claim's
    parameter part), so the control fails on a count, not on a timing a loaded machine could move. (The control
    itself runs in tests/test_claims.py's negative-control test.)"""
    import explorer

    def parameters(spec):
        return sum(p.numel() for p in explorer.build(spec)[0].parameters())

    base = explorer.preset("ancre-table2-cascaded")
    control = explorer.preset("ancre-table2-ancre").with_values({"model.depth": 12})
    assert parameters(control) - parameters(base) > base.model.params["width"]
    assert parameters(explorer.preset("ancre-table2-ancre")) - parameters(base) < base.model.params["width"]


def test_dca_rank_gain_holds_and_without_dilution_there_is_no_gain_to_shrink():
    row = _fast("dca/thm43-gain-shrinks-with-rank")
    assert row["verdict"] == "holds", row["reason"]
    # y = x: A - I = 0, the identity is in both classes, so neither arm has an excess risk for GRN-v1 to remove
    control = _fast("dca/thm43-gain-shrinks-with-rank", sign=1)
    assert control["verdict"] != "holds", control["reason"]
    assert all(abs(g) < 1.0 for key, values in control["per_seed"].items() if key.endswith("gain G_1")
               for g in values), control["per_seed"]


def test_tau_one_is_a_fixed_tau_on_the_figure_1_network():
    from explorer.papers import tau
    from explorer.probes.probes import stacks
    from explorer.training import build

    spec = tau.fig1_spec(1, depth=30, steps=10)
    assert spec.topology.name == "tau" and spec.topology.params["value"] == 1.0
    assert tau.fig1_spec("1", depth=30, steps=10) == spec
    model, _ = build(spec)
    assert float(stacks(model)[0].topology.tau_value) == 1.0
    named, _ = build(tau.fig1_spec("1/sqrt(L)", depth=30, steps=10))
    assert float(stacks(named)[0].topology.tau_value) == pytest.approx(30 ** -0.5)


def test_steps_to_is_the_first_logged_step_at_or_below_the_level():
    run = _run([2.3, 2.0, float("nan"), 1.1, 1.2, 0.9], every=20)
    for row in run.history:
        row["loss"] = row.pop("val_loss")
    assert steps_to(run, 1.15) == 60 and steps_to(run, 2.0) == 20 and steps_to(run, 0.9) == 100
    assert steps_to(run, 0.5) is None  # never reached (the claims count the budget, a lower bound)
    assert steps_to(run, 1.9, key="val_loss") is None  # no such key logged


def test_idinit_a_grid_cell_trains_only_when_it_finishes_above_the_bar():
    from explorer.papers.idinit import TRAINS_ACCURACY, cell_trains

    assert cell_trains({"status": "finished", "final_val_accuracy": TRAINS_ACCURACY})
    assert not cell_trains({"status": "finished", "final_val_accuracy": TRAINS_ACCURACY - 0.01})
    assert not cell_trains({"status": "finished", "final_val_accuracy": None})
    assert not cell_trains({"status": "diverged", "final_val_accuracy": 0.9})


def test_idinit_grid_figure_colours_each_cell_by_the_share_of_seeds_that_train():
    trains = {"kaiming": [[[True, False], [False, False]]], "idinit": [[[True, True], [True, False]]]}
    accuracy = {"kaiming": [[[0.9, 0.3], [None, None]]], "idinit": [[[0.9, 0.96], [0.8, 0.2]]]}
    row = {"paper": "idinit", "id": "fig6-hyperparameter-robustness", "per_seed": {"cells that train, kaiming": [1, 0]},
           "measured": {"lrs": [0.01], "wds": [1e-5, 0.1], "arms": ["kaiming", "idinit"],
                        "trains [lr][wd][seed]": trains, "val accuracy [lr][wd][seed]": accuracy}}
    heatmaps = [t for t in registry.figure(row).data if t.type == "heatmap"]
    assert [list(map(list, h.z)) for h in heatmaps] == [[[0.5, 0.0]], [[1.0, 0.5]]]
    assert heatmaps[0].text[0][1] == "0/2<br>diverged" and heatmaps[1].text[0][0] == "2/2<br>0.93"


@pytest.mark.parametrize("removed", ["IDIZC", "IDIC", "Loose"])
def test_idinit_each_ablation_switches_off_its_component_and_nothing_else(removed):
    from explorer.nn import roles
    from explorer.papers.idinit import ablation_spec
    from explorer.training import build

    def weights(component):
        model, _ = build(ablation_spec(component, 0, fast=True))
        role = roles(model)
        return {name: (role[name], p.detach()) for name, p in model.named_parameters()}

    full, ablated = weights(None), weights(removed)
    changed = {role for name, (role, w) in ablated.items() if not bool((w == full[name][1]).all())}
    first = next(w for role, w in ablated.values() if role == "stem.in")
    full_first = next(w for role, w in full.values() if role == "stem.in")
    if removed == "IDIZC":  # branch ends and head: exact zeros instead of IDIZC_1e-6 / IDIZ_1e-6
        assert changed == {"stem.out", "head"}
        assert all(not bool(w.any()) for role, w in ablated.values() if role == "stem.out")
    elif removed == "IDIC":  # convolutions: the centre tap (Dirac) instead of the patch-maintain corner tap
        assert full_first[:, :, 0, 0].abs().sum() > 0 and not bool(full_first[:, :, 1, 1].any())
        assert first[:, :, 1, 1].abs().sum() > 0 and not bool(first[:, :, 0, 0].any())
        assert "stem.in" in changed
    else:  # Loose: identity entries exactly 1, where full IDInit draws them around 1
        assert set(first[first != 0].tolist()) == {1.0} and len(set(full_first[full_first != 0].tolist())) > 1
        assert "stem.out" not in changed


def test_dca_retrofit_that_keeps_the_transformer_changes_nothing():
    """Table 4's check with the switch to the Transformer's own topology: both arms are one run, the gain exactly 0.
    Both arms train here, on this process's threads (a run cached from a one-thread worker may differ in its last
    float bits)."""
    clear_cache()
    row = _fast("dca/table4-retrofit", topology={"name": "cascaded"})
    assert row["verdict"] != "holds", row["reason"]
    assert row["per_seed"]["gain with cascaded (Transformer - it, nats)"] == [0.0]
    entropy = row["measured"]["unigram entropy of the training text (nats)"]
    assert row["per_seed"]["val loss at the switch (step 40)"][0] < entropy - 0.1  # learned: the floor lets it decide

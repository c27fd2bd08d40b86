"""The Cutting-the-Skip and IDInit claims on real small runs (fast mode): a negative control per changed set-up, where
the effect is absent by construction (the same arm on both sides), must not hold; the checks ask for their runs
through train_all / run_jobs (a second run of a check trains nothing); fig4-dense-miou is not tested and trains
nothing; gd-vs-sgd-symmetry's row says it is one deterministic run."""

import pytest

from explorer.papers import base, idinit, skipless
from explorer.papers import claims as registry


def _no_training(*args, **kwargs):
    raise AssertionError("trained a run that the papers' cache should have held")


def _rerun_without_training(monkeypatch, key, **controls):
    """The row of `key` (fast mode), then the same row again with training switched off: the runs came from train_all."""
    first = registry.CLAIMS[key].run(fast=True, **controls)
    assert first["verdict"] != "error", first["note"]
    with monkeypatch.context() as patched:
        patched.setattr(base, "_train_group", _no_training)
        second = registry.CLAIMS[key].run(fast=True, **controls)
    assert second["verdict"] == first["verdict"], second["note"]
    assert second["per_seed"] == first["per_seed"]
    return first


def test_table1_with_the_proposed_init_on_both_sides_does_not_hold(monkeypatch):
    skip, _default, init = skipless.TABLE1
    row = _rerun_without_training(monkeypatch, "skipless/table1-accuracy", arms=(skip, init, init))
    assert row["verdict"] != "holds", row["reason"]
    assert "[init beats default] holds" not in row["reason"]  # a zero difference can never beat the default
    assert "chance 0.1" in row["threshold"] and "smoke test" in row["summary"]


def test_table1_gathers_every_arm_into_one_train_all_call(monkeypatch):
    calls = []

    def counting(specs, callbacks=()):
        calls.append([s.to_dict() for s in specs])
        raise RuntimeError("stop before training")

    monkeypatch.setattr(skipless, "train_all", counting)
    row = registry.CLAIMS["skipless/table1-accuracy"].run(fast=True)
    assert row["verdict"] == "error" and "stop before training" in row["reason"]
    assert len(calls) == 1 and len(calls[0]) == 3  # three arms, one seed, one call
    assert {d["data"]["name"] for d in calls[0]} == {"digits-images"}
    assert {d["model"]["patch"] for d in calls[0]} == {2}


def test_steps_to_accuracy_with_kaiming_on_both_sides_does_not_hold(monkeypatch):
    row = _rerun_without_training(monkeypatch, "idinit/steps-to-accuracy", arms=("kaiming", "kaiming"))
    assert row["verdict"] != "holds", row["reason"]
    assert "[area under the accuracy curve] holds" not in row["reason"]
    assert "[steps to the paper's target] holds" not in row["reason"]
    assert "[accuracy within the budget] holds" not in row["reason"]
    assert registry.CLAIMS["idinit/steps-to-accuracy"].full_seeds == 5


def test_fig4_dense_miou_is_not_tested_and_trains_nothing(monkeypatch):
    monkeypatch.setattr(base, "_train_group", _no_training)
    row = registry.CLAIMS["skipless/fig4-dense-miou"].run(fast=False)
    assert row["verdict"] == "not-tested", row["note"]
    assert "needs self-supervised training" in row["reason"] and row["measured"] == {} and row["per_seed"] == {}


def test_deep_block_miou_still_measures_a_shapes_run():
    from types import SimpleNamespace

    from explorer.training import build

    spec = skipless.table1_spec("skip-table1-skip", fast=True).with_values({"model.depth": 2, "data.n_train": 64,
                                                                          "data.n_val": 64})
    model, data = build(spec)
    miou, floor = skipless.deep_block_miou(SimpleNamespace(model=model, data=data, spec=spec))
    assert 0.0 <= floor <= 1.0 and 0.0 <= miou <= 1.0


def test_gd_vs_sgd_is_labelled_one_deterministic_run():
    row = registry.CLAIMS["idinit/gd-vs-sgd-symmetry"].run(fast=True)
    assert "one deterministic run" in row["mode"] and "seed" not in row["mode"]


@pytest.mark.parametrize("key", ["idinit/rank-constraint", "idinit/gd-vs-sgd-symmetry"])
def test_idinit_runs_come_from_train_all(key, monkeypatch):
    _rerun_without_training(monkeypatch, key)


def test_dead_weights_run_as_jobs(monkeypatch):
    seen = []

    def recording(fn, items):
        seen.append((fn, list(items)))
        return [fn(*item) for item in items]

    monkeypatch.setattr(idinit, "run_jobs", recording)
    row = registry.CLAIMS["idinit/idiz-dead-weights"].run(fast=True, eps_dead=0.0, eps_alive=0.0)
    assert len(seen) == 1 and seen[0][0] is idinit.dead_run and len(seen[0][1]) == 2
    assert row["verdict"] != "holds", row["reason"]  # the same eps on both sides: no difference to find


def test_the_accuracy_area_needs_no_target_and_the_papers_target_share_is_table_1s():
    from types import SimpleNamespace

    slow_start = SimpleNamespace(history=[{"step": t, "val_accuracy": a} for t, a in ((0, 0.2), (10, 0.2), (20, 0.8))])
    fast_start = SimpleNamespace(history=[{"step": t, "val_accuracy": a} for t, a in ((0, 0.2), (10, 0.6), (20, 0.6))])
    assert idinit.accuracy_curve_area(fast_start) > idinit.accuracy_curve_area(slow_start)  # ends lower, faster overall
    assert idinit.accuracy_curve_area(SimpleNamespace(history=[{"step": 0}])) is None
    assert idinit.PAPER_TARGET_SHARE == pytest.approx(0.70 / 0.834)

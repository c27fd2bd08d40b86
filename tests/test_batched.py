"""train_batched must reproduce separate explorer.train runs member by member, and refuse what it cannot stack."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import explorer
from explorer.batched import train_batched
from explorer.registries import SpecError

BASE = explorer.preset("tau-fig1-1/sqrt(L)").with_values(
    {"model.depth": 6, "model.width": 32, "train.steps": 30, "train.log_every": 10, "train.device": "cpu"})
# float32 results of a batched (vmap) matmul and a single one differ between CPUs (Intel vs AMD) and
# thread counts at the 1e-6..1e-5 relative level, and training amplifies the difference step by step.
# So the trajectories are compared tightly where they are well-conditioned (at initialisation, and up
# to the first log) and with a looser tolerance later; a member that diverges is compared on what
# matters (its status and the step it diverged at), not on weights that have blown up.
TIGHT, LOOSE = 1e-5, 1e-3


def assert_matches_separate(specs, **probes):
    """Every member's status, divergence step and logged metrics equal a separate run's (final weights too, unless it
    diverged); `probes` (train's probes, probe_every, probe_inputs) run in both, with the same results."""
    runs = train_batched(specs, **probes)
    assert len(runs) == len(specs)
    for spec, run in zip(specs, runs):
        alone = explorer.train(spec, **probes)
        assert_same_probes(run, alone)
        assert run.spec == spec
        assert (run.status, run.diverged_at, run.steps_done) == (alone.status, alone.diverged_at, alone.steps_done)
        assert (run.diverged_loss is None) == (alone.diverged_loss is None)  # the plots mark a divergence from it
        if alone.diverged_loss is not None and math.isfinite(alone.diverged_loss):
            assert run.diverged_loss == pytest.approx(alone.diverged_loss, rel=LOOSE)
        assert [row.keys() for row in run.history] == [row.keys() for row in alone.history]
        assert [row["step"] for row in run.history] == [row["step"] for row in alone.history]
        first_loss = alone.history[0]["loss"]
        for index, (row, ref) in enumerate(zip(run.history, alone.history)):
            rtol = TIGHT if index <= 1 else LOOSE
            for key in ("loss", "val_loss", "val_accuracy"):
                if key not in ref or not torch.isfinite(torch.tensor(ref[key])):
                    continue
                if alone.status == "diverged" and abs(ref[key]) > 10 * abs(first_loss):
                    continue  # the explosion itself: only its step is compared
                assert row[key] == pytest.approx(ref[key], rel=rtol, abs=1e-6), (spec.train.seed, row, ref)
        if alone.status == "diverged":
            continue
        mine, theirs = dict(run.model.named_parameters()), dict(alone.model.named_parameters())
        assert mine.keys() == theirs.keys()
        for name in theirs:  # each tensor as a whole: its small entries carry the drift at a larger relative size
            # (a tensor that stays near zero, such as a gate that starts at zero, is compared absolutely)
            error = float((mine[name] - theirs[name]).detach().norm()) / max(float(theirs[name].detach().norm()), 1e-3)
            assert error < LOOSE, (spec.train.seed, name, error)
    return runs


def assert_same_probes(run, alone):
    """The two runs' live probe results: at the same steps, the same names and keys, numbers to the float32 drift
    of the trajectories (tight at the first log), everything else equal."""
    assert [(row["step"], row["name"]) for row in run.probe_history] == \
        [(row["step"], row["name"]) for row in alone.probe_history]
    first = alone.probe_history[0]["step"] if alone.probe_history else None
    for row, ref in zip(run.probe_history, alone.probe_history):
        assert row["result"].keys() == ref["result"].keys(), row["name"]
        rtol = TIGHT if row["step"] == first else LOOSE
        for key, expected in ref["result"].items():
            got, expected = np.asarray(row["result"][key]), np.asarray(expected)
            assert got.shape == expected.shape, (row["name"], key)
            if expected.dtype.kind == "f":
                if key.endswith("kappa"):
                    # kappa = sigma_max / sigma_min moves by kappa times sigma_min's relative drift (1e5 times at the
                    # probes' cut-off): compare 1 / kappa, which moves with the drift relative to sigma_max, as the
                    # singular values are compared (absolutely, atol)
                    got, expected = 1 / got, 1 / expected
                np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-5, err_msg=f"{row['name']}.{key}")
            else:
                assert np.array_equal(got, expected), (row["name"], key, got, expected)


def assert_members_differ(runs):
    """The members really differ, by far more than the comparison's tolerance (so a mix-up would show)."""
    a, b = runs[0].history[-1]["loss"], runs[1].history[-1]["loss"]
    assert abs(a - b) > 10 * LOOSE * max(abs(a), abs(b)), (a, b)


def test_seeds_match_separate_runs_with_sgd():
    runs = assert_matches_separate([BASE.with_values({"train.seed": seed}) for seed in range(3)])
    assert all(run.status == "finished" for run in runs)
    assert_members_differ(runs)


def test_learning_rates_match_separate_runs_with_adam():
    specs = [BASE.with_values({"optim.name": "adam", "optim.lr": lr}) for lr in (1e-3, 3e-3)]
    runs = assert_matches_separate(specs)
    assert_members_differ(runs)


def test_tau_values_match_separate_runs():
    specs = [BASE.with_values({"topology.value": value, "train.seed": 1}) for value in ("1/sqrt(L)", "0.9")]
    runs = assert_matches_separate(specs)
    assert_members_differ(runs)


@pytest.mark.parametrize("optim", [
    {"optim.name": "sgd", "optim.lr": 0.05, "optim.momentum": 0.9, "optim.weight_decay": 1e-3},
    {"optim.name": "adamw", "optim.lr": 3e-3, "optim.weight_decay": 0.1},
])
def test_learnable_tau_with_its_gradient_hook_and_schedule(optim):
    """Learnable tau (lr / 10, gradient averaged over blocks by a tensor hook) under a warm-up + cosine schedule."""
    specs = [BASE.with_values({"topology.learnable": True, "topology.value": value, "optim.schedule": "cosine",
                               "optim.warmup_steps": 5, **optim}) for value in ("1/sqrt(L)", "0.5")]
    assert_matches_separate(specs)


def test_diverging_member_marked_at_same_step_while_other_finishes():
    specs = [BASE.with_values({"optim.lr": 0.01}), BASE.with_values({"optim.lr": 50.0})]
    runs = assert_matches_separate(specs)
    assert runs[0].status == "finished" and runs[0].steps_done == 30
    assert runs[1].status == "diverged" and runs[1].diverged_at is not None and runs[1].diverged_loss is not None
    assert "val_loss" not in runs[1].history[-1]


def test_callbacks_get_each_members_events():
    events = []
    runs = train_batched([BASE.with_values({"train.seed": s}) for s in range(2)], callbacks=[events.append])
    for run in runs:
        mine = [(e.kind, e.step) for e in events if e.run is run]
        assert mine == [("start", 0), ("log", 0), ("log", 10), ("log", 20), ("log", 30), ("end", 30)]


@pytest.mark.parametrize("change, field", [
    ({"model.depth": 4}, "model.depth"),
    ({"model.width": 16}, "model.width"),
    ({"train.steps": 20}, "train.steps"),
    ({"train.batch_size": 64}, "train.batch_size"),
    ({"train.log_every": 5}, "train.log_every"),
    ({"topology.name": "cascaded"}, "topology.name"),
    ({"topology.learnable": True}, "topology.learnable"),
    ({"data.seed": 3}, "data.seed"),
    ({"optim.name": "gd"}, "optim.name"),
])
def test_refuses_mismatched_shapes(change, field):
    with pytest.raises(SpecError) as err:
        train_batched([BASE, BASE.with_values(change)])
    assert err.value.path == field
    assert "identical shapes" in str(err.value)


def test_refuses_batchnorm():
    spec = explorer.ExperimentSpec.from_dict({"model": {"name": "mlp", "depth": 2, "width": 8, "norm": "batchnorm"},
                                              "train": {"steps": 2, "log_every": 1, "device": "cpu"}})
    with pytest.raises(SpecError, match="BatchNorm"):
        train_batched([spec, spec.with_values({"train.seed": 1})])


def test_a_member_whose_optimizer_statistics_break_is_diverged_like_its_separate_run():
    """SOAP's eigh meets non-finite statistics in one member: that member is diverged at the next step (as
    explorer.train marks it), the other trains on."""
    broken = explorer.ExperimentSpec.from_dict({
        "data": {"name": "spirals", "n_train": 48, "n_val": 16}, "model": {"name": "mlp", "depth": 9, "width": 16},
        "init": {"name": "normal", "std": 8.56}, "optim": {"name": "soap", "lr": 21.63, "precondition_frequency": 4},
        "train": {"steps": 6, "batch_size": 16, "seed": 230, "log_every": 1, "device": "cpu"}})
    sane = broken.with_values({"init.std": 0.1, "optim.lr": 0.01})
    runs = assert_matches_separate([broken, sane])
    assert runs[0].status == "diverged" and runs[0].history[-1]["step"] == runs[0].diverged_at
    assert runs[1].status == "finished" and runs[1].steps_done == 6


def test_a_members_checkpoint_resumes_as_its_separate_run():
    specs = [BASE.with_values({"train.seed": seed, "optim.name": "adam", "optim.lr": 3e-3}) for seed in (0, 1)]
    saved = {}

    def keep(event):
        if event.kind == "log" and event.step == 10 and event.run.spec == specs[1]:
            saved["state"] = copy.deepcopy(event.run.checkpoint())
            raise explorer.StopTraining

    stopped = train_batched(specs, callbacks=[keep])
    assert [(run.status, run.steps_done) for run in stopped] == [("stopped", 10)] * 2
    resumed = explorer.train(specs[1], resume_from=saved["state"])
    alone = explorer.train(specs[1])
    assert [row["step"] for row in resumed.history] == [row["step"] for row in alone.history]
    assert resumed.history[1]["loss"] == pytest.approx(alone.history[1]["loss"], rel=TIGHT)
    assert resumed.history[-1]["loss"] == pytest.approx(alone.history[-1]["loss"], rel=LOOSE)
    for p, q in zip(resumed.model.parameters(), alone.model.parameters()):
        assert float((p - q).detach().norm()) < LOOSE * max(float(q.detach().norm()), 1e-3)


def test_a_member_cannot_be_rewired():
    refused = []

    def rewire(event):
        if event.kind == "log" and event.step == 10:
            with pytest.raises(SpecError) as caught:
                event.run.rewire({"name": "cascaded"})
            refused.append(caught.value.path)

    runs = train_batched([BASE.with_values({"train.seed": s}) for s in range(2)], callbacks=[rewire])
    assert refused == ["rewire", "rewire"]
    assert all(run.rewires == [] and run.spec.topology.name == "tau" for run in runs)

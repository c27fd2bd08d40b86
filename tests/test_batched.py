"""train_batched must reproduce separate explorer.train runs member by member, and refuse what it cannot stack."""

from __future__ import annotations

import math

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


def assert_matches_separate(specs):
    """Every member's status, divergence step and logged metrics equal a separate run's (final weights too, unless it diverged)."""
    runs = train_batched(specs)
    assert len(runs) == len(specs)
    for spec, run in zip(specs, runs):
        alone = explorer.train(spec)
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
            error = float((mine[name] - theirs[name]).detach().norm() / theirs[name].detach().norm())
            assert error < LOOSE, (spec.train.seed, name, error)
    return runs


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

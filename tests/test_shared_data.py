"""The dataset cache is private and bounded; a run that changes its data changes nothing else."""

import pytest
import torch

import explorer
from explorer.data import build_dataset, cached_bytes, clear_cache

SPEC = explorer.ExperimentSpec.from_dict({
    "data": {"name": "identity", "dim": 6, "n_train": 64, "n_val": 16},
    "model": {"name": "linear", "depth": 3, "width": 6}, "init": {"name": "idinit"},
    "optim": {"name": "sgd", "lr": 0.05}, "train": {"steps": 30, "log_every": 10, "batch_size": 16}})


def test_changing_a_dataset_in_place_does_not_reach_the_next_build():
    _, first = explorer.build(SPEC)
    original = first.y_train.clone()
    first.y_train.neg_()
    first.x_val.zero_()
    _, second = explorer.build(SPEC)
    assert torch.equal(second.y_train, original) and second.x_val.abs().sum() > 0


def test_a_run_whose_callback_corrupts_its_data_and_raises_leaves_other_runs_alone():
    reference = explorer.train(SPEC)

    def negate_and_crash(event):  # what the old IDInit claim callback did, then a failure mid-way
        if event.kind == "start":
            event.run.data.y_train.neg_()
            event.run.data.y_val.neg_()
        if event.kind == "log" and event.step >= 10:
            raise RuntimeError("a claim run that fails mid-way")

    with pytest.raises(RuntimeError):
        explorer.train(SPEC, callbacks=[negate_and_crash])
    again = explorer.train(SPEC)
    assert [row["loss"] for row in again.history] == [row["loss"] for row in reference.history]


def test_identity_sign_gives_the_negated_targets():
    plus = build_dataset(SPEC.data)
    minus = build_dataset(SPEC.with_values({"data.sign": -1}).data)
    assert torch.equal(minus.x_train, plus.x_train) and torch.equal(minus.y_train, -plus.x_train)
    with pytest.raises(explorer.SpecError, match="data.sign"):
        SPEC.with_values({"data.sign": 0})


def test_the_cache_is_bounded_by_bytes(monkeypatch):
    clear_cache()
    monkeypatch.setenv("EXPLORER_DATA_CACHE_MB", "1")
    for seed in range(6):  # 6 x (2 x 200 x 100 x 4 bytes + val) ~ 0.2 MB each
        build_dataset(SPEC.with_values({"data.dim": 100, "data.n_train": 200, "data.seed": seed, "model.width": 100}).data)
    assert 0 < cached_bytes() <= 1_000_000
    build_dataset(SPEC.with_values({"data.dim": 1000, "data.n_train": 1000, "model.width": 1000}).data)  # 8 MB: not kept
    assert cached_bytes() <= 1_000_000
    clear_cache()

"""The papers' cache kept in a folder (EXPLORER_PAPERS_CACHE_DIR): another process reads a run instead of training
it again, the same run to the bit; a changed library misses; a damaged entry trains again; unset, nothing is
written."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from explorer.papers import base, clear_cache, preset
from explorer.papers.claims import seeded


def _specs(seeds=(0, 1)):
    return [seeded(preset("tau-fig1-1/L").with_values({"train.steps": 20, "train.log_every": 10}), s) for s in seeds]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_PAPERS_CACHE_DIR", str(tmp_path / "papers-cache"))
    clear_cache()
    yield tmp_path / "papers-cache"
    clear_cache()


def _no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("trained a run the folder holds")

    monkeypatch.setattr(base, "_train_group", refuse)


def test_a_run_read_from_the_folder_is_the_run_that_was_trained(folder, monkeypatch):
    trained = base.train_all(_specs())
    assert len(list(folder.glob("runs-*/*.pt"))) == 2
    clear_cache()  # as a fresh process: nothing in memory
    _no_training(monkeypatch)
    read = base.train_all(_specs())
    for a, b in zip(trained, read):
        assert a.spec == b.spec and a.status == b.status and a.history == b.history
        assert a.probe_history == b.probe_history and a.steps_done == b.steps_done
        for name, tensor in a.model.state_dict().items():
            assert torch.equal(tensor, b.model.state_dict()[name]), name
        assert torch.equal(a.data.x_val, b.data.x_val)  # the data generated again, the same


def test_another_process_reads_what_this_one_wrote(folder):
    trained = base.train_all(_specs((0,)))[0]
    code = ("from explorer.papers import base, preset\n"
            "from explorer.papers.claims import seeded\n"
            "def refuse(*a, **k): raise AssertionError('trained again')\n"
            "base._train_group = refuse\n"
            "spec = seeded(preset('tau-fig1-1/L').with_values({'train.steps': 20, 'train.log_every': 10}), 0)\n"
            "print(base.train_all([spec])[0].history[-1]['loss'])\n")
    env_out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert env_out.returncode == 0, env_out.stderr[-2000:]
    assert float(env_out.stdout.split()[-1]) == trained.history[-1]["loss"]


def test_other_code_misses_and_its_folder_is_removed(folder, monkeypatch):
    base.train_all(_specs((0,)))
    (old,) = folder.glob("runs-*")
    monkeypatch.setattr(base, "code_fingerprint", lambda: "another-library")
    clear_cache()
    trained = []
    real = base._train_group
    monkeypatch.setattr(base, "_train_group", lambda *a: trained.append(1) or real(*a))
    base.train_all(_specs((0,)))
    assert trained == [1] and not old.exists() and (folder / "runs-another-library").is_dir()


def test_a_damaged_entry_trains_again(folder, monkeypatch):
    first = base.train_all(_specs((0,)))[0]
    (entry,) = folder.glob("runs-*/*.pt")
    entry.write_bytes(entry.read_bytes()[:100])  # cut short, as by a killed writer
    clear_cache()
    again = base.train_all(_specs((0,)))[0]
    losses = [row["loss"] for row in again.history]
    assert losses == [row["loss"] for row in first.history] and entry.stat().st_size > 100  # trained, written again


def test_unset_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv("EXPLORER_PAPERS_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    clear_cache()
    base.train_all(_specs((0,)))
    clear_cache()
    assert base.DiskRuns.folder() is None and not list(tmp_path.rglob("*.pt"))


def test_a_cached_value_that_is_not_a_run_is_kept_too(folder):
    made = []
    value = base.cached(("tau", "a-test-value", 3), lambda: made.append(1) or {"norms": [1.0, 2.0]})
    clear_cache()
    again = base.cached(("tau", "a-test-value", 3), lambda: made.append(1) or {"norms": []})
    assert made == [1] and again == value == {"norms": [1.0, 2.0]}


def test_numpy_arrays_of_numbers_are_kept_and_arrays_of_objects_are_made_again(folder):
    """A probe's results hold numpy arrays: those of numbers are read back equal, dtype and all; an array of Python
    objects would need its objects' code to be read, so it is made again."""
    import numpy as np

    numbers = {"spectrum": np.linspace(0.0, 1.0, 5), "counts": np.arange(4, dtype=np.int32),
               "mask": np.array([True, False]), "half": np.ones(3, dtype=np.float16)}
    base.cached(("tau", "numbers", 1), lambda: numbers)
    base.cached(("tau", "objects", 1), lambda: {"cells": np.array([{"a": 1}, None], dtype=object)})
    clear_cache()
    again = base.cached(("tau", "numbers", 1), lambda: pytest.fail("made again"))
    assert again.keys() == numbers.keys()
    assert all(again[k].dtype == v.dtype and np.array_equal(again[k], v) for k, v in numbers.items())
    made = []
    base.cached(("tau", "objects", 1), lambda: made.append(1) or {})
    assert made == [1]


def test_past_its_limit_the_folder_drops_the_entries_read_least_recently(folder, monkeypatch):
    import os
    import time

    runs = base.train_all(_specs((0, 1)))
    entries = sorted(folder.glob("runs-*/*.pt"), key=lambda p: p.stat().st_mtime)
    size = entries[0].stat().st_size
    past = time.time() - 60
    for age, path in enumerate(entries):
        os.utime(path, (past + age, past + age))
    clear_cache()
    base.train_all(_specs((0,)))  # read now: seed 0 is the most recent
    limit = 2**20 * (2 * size // 2**20 + 1)  # the two runs fit
    monkeypatch.setenv("EXPLORER_PAPERS_CACHE_DIR_MB", str(limit // 2**20))
    filler = {"weights": torch.zeros((limit - size - size // 2) // 4)}  # fits beside one run, not beside both
    base.cached(("tau", "a-test-filler"), lambda: filler)
    left = {path.name for path in folder.glob("runs-*/*.pt")}
    seed0 = base.DiskRuns._path(base.DiskRuns.folder(), base.run_key(_specs((0,))[0]))
    assert seed0.name in left and len(left) < 3, (left, size)
    assert runs[0].history  # (the runs themselves stay in this process)


def test_an_entry_that_would_run_code_is_not_run(folder, tmp_path):
    """A file in the folder is read as tensors and plain data: a pickle that calls a function is refused (a miss)."""
    import pickle

    base.train_all(_specs((0,)))
    (entry,) = folder.glob("runs-*/*.pt")
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (marker.touch, ())

    entry.write_bytes(pickle.dumps(Payload()))
    clear_cache()
    assert base.train_all(_specs((0,)))[0].history and not marker.exists()

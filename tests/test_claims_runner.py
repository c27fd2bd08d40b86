"""How claims run: their runs as independent jobs (in this process, in worker processes, on Ray, batched), the
progress they report with time estimates, the recorded results they write, and the words of a verdict."""

from __future__ import annotations

import json
import operator
import os
import threading

import pytest
import torch

from explorer.papers import base, clear_cache, preset
from explorer.papers.claims import (Progress, decide, duration, record, run_claims, seeded, summary_of)
from explorer.parallel import Workers
from explorer.registries import SpecError


# ---- the engine ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("jobs", [1, 2])
def test_workers_return_results_in_order_and_report_each(jobs):
    ended = []
    with Workers(jobs) as workers:
        results = workers.map(operator.mul, [(i, 10) for i in range(5)], on_done=lambda i, v: ended.append((i, v)))
    assert results == [0, 10, 20, 30, 40]
    assert sorted(ended) == [(i, 10 * i) for i in range(5)]


def test_a_failing_job_stops_the_map_with_its_error():
    with Workers(2) as workers, pytest.raises(ZeroDivisionError):
        workers.map(operator.truediv, [(1, 1), (1, 0), (2, 1)])


def test_a_pools_processes_read_the_environment_of_when_it_starts(monkeypatch):
    """The processes fork from a fork server, which keeps the environment it started with: each pool's processes
    take the caller's when the pool starts (the EXPLORER_* settings are read from it)."""
    monkeypatch.setenv("EXPLORER_TEST_MARK", "before")
    with Workers(2) as workers:
        assert workers.map(os.getenv, [("EXPLORER_TEST_MARK",)] * 2) == ["before", "before"]
    monkeypatch.setenv("EXPLORER_TEST_MARK", "after")
    with Workers(2) as workers:
        assert workers.map(os.getenv, [("EXPLORER_TEST_MARK",)] * 2) == ["after", "after"]


@pytest.mark.parametrize("jobs, backend, field", [(0, "local", "jobs"), (1, "slurm", "backend"), (1.5, "local", "jobs")])
def test_bad_pool_settings_name_the_field(jobs, backend, field):
    with pytest.raises(SpecError) as error:
        Workers(jobs, backend)
    assert error.value.path == field


def _specs(seeds=(0, 1, 2)):
    return [seeded(preset("tau-fig1-1/L").with_values({"train.steps": 30, "train.log_every": 10}), s) for s in seeds]


def _weights(run):
    return {k: v.clone() for k, v in run.model.state_dict().items()}


@pytest.fixture
def one_thread():
    """Runs in this process with one thread, as the workers train: the same float sums, the same weights."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    clear_cache()
    yield
    torch.set_num_threads(threads)
    clear_cache()


def test_runs_trained_in_worker_processes_equal_those_trained_here(one_thread):
    here = base.train_all(_specs())
    clear_cache()
    with base.execution(workers=2):
        there = base.train_all(_specs())
    for a, b in zip(here, there):
        assert a.status == b.status and a.steps_done == b.steps_done
        assert [row["loss"] for row in a.history] == [row["loss"] for row in b.history]
        for name, tensor in _weights(a).items():
            assert torch.equal(tensor, b.model.state_dict()[name]), name
        assert b.data is not None and b.data.x_val.shape == a.data.x_val.shape  # the data came back with it


def test_train_all_trains_each_spec_once_and_reports_progress(one_thread, monkeypatch):
    reports = []
    with base.execution(progress=lambda done, total: reports.append((done, total))):
        first = base.train_all(_specs((0, 1)))
        again = base.train_all(_specs((1, 0, 2)))  # two cached, one new
    assert reports == [(1, 2), (2, 2), (1, 1)]
    assert again[0] is first[1] and again[1] is first[0]


def test_batched_members_match_their_separate_runs(one_thread):
    separate = base.train_all(_specs())
    clear_cache()
    with base.execution(batched=True):
        stacked = base.train_all(_specs())
    for a, b in zip(separate, stacked):
        assert a.history[-1]["loss"] == pytest.approx(b.history[-1]["loss"], rel=1e-4)


def test_a_claim_gives_the_same_row_in_parallel_as_one_after_the_other(one_thread):
    kwargs = dict(paper="ancre", fast=True, ids=["depth-slows-plain-lnn", "shortcut-02-exponential"])
    here = run_claims(**kwargs)
    clear_cache()
    states = []
    there = run_claims(**kwargs, workers=2, progress=states.append)
    for a, b in zip(here, there):
        assert (a["verdict"], a["per_seed"], a["reason"]) == (b["verdict"], b["per_seed"], b["reason"])
    assert [s.index for s in states if s.runs_done == 0] == [0, 1]  # each claim announced as it starts
    assert any(s.runs_total and s.runs_done == s.runs_total for s in states)
    assert all(s.total == 2 and s.key.startswith("ancre/") for s in states)


def test_a_stop_skips_the_claims_not_started():
    stop = threading.Event()
    stop.set()
    assert run_claims("idinit", fast=True, stop=stop) == []


# ---- progress and estimates ---------------------------------------------------------------------------------

def test_progress_reads_as_one_line():
    assert Progress("tau/fig1", 2, 21, 4, 18, 30.0, 80.0, 840.0).text() == \
        "claim 3 of 21 (tau/fig1): run 4 of 18, ~1 min 20 s left (all: ~14 min 00 s left)"
    assert Progress("tau/fig1", 0, 1, 0, 0, 0.0, None, None).text() == "claim 1 of 1 (tau/fig1)"
    assert [duration(s) for s in (0.4, 59, 61, 3725)] == ["0 s", "59 s", "1 min 01 s", "1 h 02 min"]


# ---- recorded results ---------------------------------------------------------------------------------------

def _row(paper, id, mode="full mode, 3 seeds, cpu scale", verdict="holds"):
    return {"paper": paper, "id": id, "mode": mode, "verdict": verdict, "per_seed": {}, "seconds": 1.0}


def test_record_replaces_the_rows_it_ran_and_keeps_the_others(tmp_path):
    path = tmp_path / "claims.json"
    tau_claim = "init-norm-sharp-threshold"
    path.write_text(json.dumps({"about": {"date": "then"}, "rows": [_row("tau", tau_claim, verdict="old"),
                                                                     _row("ancre", "depth-slows-plain-lnn")]}))
    record([_row("tau", tau_claim, verdict="new")], started=0.0, workers=2, backend="local", batched=False, path=path)
    stored = json.loads(path.read_text())
    assert [(r["id"], r["verdict"]) for r in stored["rows"]] == [("depth-slows-plain-lnn", "holds"),
                                                                  (tau_claim, "new")]  # the claims' order
    assert stored["about"]["earlier"] == [{"date": "then"}] and "--workers 2" in stored["about"]["command"]
    ran_on = stored["rows"][1]["environment"]  # what the new row ran on; the kept row has none
    assert set(ran_on) == {"cpu", "cpu_flags", "torch", "torch_build", "torch_threads", "run_threads",
                           "OMP_NUM_THREADS"} and "environment" not in stored["rows"][0]
    assert ran_on["torch"] == torch.__version__ and ran_on["run_threads"] == 1 and ran_on["cpu"]
    record([_row("ancre", "depth-slows-plain-lnn", verdict="newer")], started=0.0, workers=1, backend="local",
           batched=False, path=path)  # a second partial recording keeps both earlier ones, newest first
    earlier = json.loads(path.read_text())["about"]["earlier"]
    assert [e["date"] for e in earlier][1:] == ["then"] and "--workers 2" in earlier[0]["command"]


def test_record_refuses_fast_mode_rows(tmp_path):
    with pytest.raises(SpecError) as error:
        record([_row("tau", "init-norm-sharp-threshold", mode="fast mode, 1 seed, cpu scale")], started=0.0, workers=1,
               backend="local", batched=False, path=tmp_path / "claims.json")
    assert error.value.path == "--record" and not (tmp_path / "claims.json").exists()


# ---- the words of a verdict ---------------------------------------------------------------------------------

def test_decide_says_which_test_decided_it_with_the_interval():
    below = decide([0.21, 0.205, 0.223], fast_margin=0.3, min_effect=0.3)
    assert below.verdict == "does-not-hold" and "smaller than the claim's threshold" in below.reason
    assert "95% one-sided interval (-inf, 0.228" in below.reason and not below.noisy
    reverse = decide([-0.21, -0.205, -0.223], fast_margin=0.3, min_effect=0.3)
    assert reverse.verdict == "does-not-hold" and "points the other way" in reverse.reason
    noisy = decide([0.1, 0.5, 0.01], fast_margin=0.3)
    assert noisy.verdict == "inconclusive" and noisy.noisy and "within the noise at 3 seeds" in noisy.reason
    split = decide([0.1, -0.1, 0.2], fast_margin=0.3)
    assert split.verdict == "inconclusive" and "1 of 3 seeds point against the claim" in split.reason
    assert "level 0.05" in split.rule and "95%" in split.rule


def test_a_floor_never_hides_differences_that_point_against_the_claim():
    against = decide([-0.2, -0.25, -0.3], fast_margin=0.1, floors={"arm at chance": True})
    assert against.verdict == "inconclusive" and against.reason.startswith("every seed points against the claim")
    assert "arm at chance" in against.reason
    mixed = decide([-0.2, 0.25, -0.3], fast_margin=0.1, floors={"arm at chance": True})
    assert mixed.reason.startswith("at a floor: arm at chance")


def test_the_summary_line_gives_each_quantity_over_the_seeds():
    line = summary_of({"val accuracy skip": [0.93, 0.93, 0.89], "diverged": [True, False, True], "steps": [20, 20, 20]})
    assert line == "val accuracy skip: 0.917 (0.89 to 0.93); diverged: 2 of 3; steps: 20"


# ---- a local Ray ------------------------------------------------------------------------------------------------

RAY_PAPER, RAY_CLAIMS = "ancre", ["shortcut-02-exponential", "ancre-finds-fast-rate"]  # cheap to run twice


def test_one_papers_claims_on_a_local_ray_give_the_rows_they_give_here(one_thread, local_ray):
    ids = RAY_CLAIMS
    here = run_claims(RAY_PAPER, fast=True, ids=ids)
    clear_cache()
    there = run_claims(RAY_PAPER, fast=True, ids=ids, workers=2, backend="ray")
    assert [r["id"] for r in there] == ids
    for a, b in zip(here, there):
        assert (a["verdict"], a["per_seed"]) == (b["verdict"], b["per_seed"]), a["id"]

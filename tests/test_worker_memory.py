"""Worker processes are held to a memory limit (explorer.budget.process_limit_mb): a job that needs more ends as
one line naming the probe or run and the limit, and a fresh worker takes the next job; a cancelled probe job
stops between probes instead of costing a worker."""

import sys

import pytest

import explorer
from explorer_app import jobs, workers

SMALL = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 4, "train.steps": 2, "train.log_every": 1})
# A 2048-wide stream: eight inputs' Jacobians add about 1 GB to a process at one or two threads (within
# EXPLORER_MAX_MODEL_MB's default), well past LIMIT_MB with the worker's own size; four add 520-560 MB, which lands
# at the limit or under it by the thread count. 24 such layers with their gradients and Adam states take about 1.6 GB.
WIDE = explorer.ExperimentSpec.default().with_values(
    {"data.name": "identity", "data.dim": 2048, "data.n_train": 64, "data.n_val": 16, "model.name": "linear",
     "model.width": 2048, "model.depth": 1})
BIG_RUN = WIDE.with_values({"model.depth": 24, "train.steps": 2, "train.log_every": 1})
LIMIT_MB = 800  # a warm worker's data segment is about 330 MB


@pytest.fixture()
def limited_pool(monkeypatch):
    """One worker started under EXPLORER_MEMORY_LIMIT_MB=LIMIT_MB (it reads its limit from its environment)."""
    monkeypatch.setenv("EXPLORER_MEMORY_LIMIT_MB", str(LIMIT_MB))
    pool = workers.WorkerPool(1)
    pool.warm()
    assert pool.wait_started(1)
    yield pool
    pool.close()


def test_a_job_past_the_limit_is_one_line_and_a_fresh_worker_takes_the_next(limited_pool):
    queue = jobs.JobQueue(1, pool=limited_pool, cores=2)
    [first] = limited_pool.pids()
    state = explorer.build(WIDE)[0].state_dict()
    big = jobs.wait(queue.submit_probes(WIDE, {"norms": {}, "jacobian": {}}, 8, "big", state=state, step=0,
                                        seconds=600), timeout=600)
    assert big.status == "error" and "\n" not in big.error
    assert big.error.startswith(f"the probe jacobian needed more than the {LIMIT_MB} MB memory limit")
    assert "EXPLORER_MEMORY_LIMIT_MB" in big.error and "fewer inputs" in big.error
    assert "norms" in big.results  # the probe before it kept its result

    small_state = explorer.build(SMALL)[0].state_dict()
    after = queue.submit_probes(SMALL, {"norms": {}}, 4, "after", state=small_state, step=0)
    view = jobs.wait(after, timeout=600)
    assert view.status == "finished" and set(view.results) == {"norms"}
    assert after.worker_pid != first and first not in limited_pool.pids()  # replaced, not reused

    run = jobs.wait(queue.submit(BIG_RUN, "wide mlp", record=False), timeout=600)
    assert run.status == "error" and "\n" not in run.error
    assert run.error.startswith(f"the run wide mlp needed more than the {LIMIT_MB} MB memory limit")
    assert len(limited_pool.pids()) <= 1


def data_limit_mb(pid: int) -> int:
    """The soft RLIMIT_DATA of process `pid` in MB, as /proc shows it."""
    line = next(line for line in open(f"/proc/{pid}/limits") if line.startswith("Max data size"))
    return int(line.split()[3]) // explorer.budget.MB


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_holds_the_limit_of_the_servers_environment_when_it_starts(monkeypatch):
    """Workers fork from a fork server, which keeps the environment it started with: a worker started after the
    server's environment changed takes the new one, and its limit (set before any job) is the new one's."""
    before = workers.WorkerPool(1)
    before.warm()
    assert before.wait_started(1)  # the fork server runs by now, started with the environment of before
    before.close()
    monkeypatch.setenv("EXPLORER_MEMORY_LIMIT_MB", "4321")
    pool = workers.WorkerPool(1)
    pool.warm()
    try:
        assert pool.wait_started(1)
        [pid] = pool.pids()
        assert data_limit_mb(pid) == 4321
    finally:
        pool.close()


def test_the_limit_follows_the_caps_unless_set(monkeypatch):
    monkeypatch.delenv("EXPLORER_MEMORY_LIMIT_MB", raising=False)
    monkeypatch.setenv("EXPLORER_MAX_MODEL_MB", "1000")
    monkeypatch.setenv("EXPLORER_MAX_DATA_MB", "100")
    derived = explorer.budget.process_limit_mb()
    assert derived == 1100 + explorer.budget.PROCESS_ALLOWANCE_MB
    line = explorer.budget.over_limit("the probe pca", "try fewer inputs")
    assert f"{derived:,} MB" in line and "EXPLORER_MAX_MODEL_MB=1000" in line and "EXPLORER_MAX_DATA_MB=100" in line
    monkeypatch.setenv("EXPLORER_MEMORY_LIMIT_MB", "5000")
    assert explorer.budget.process_limit_mb() == 5000
    monkeypatch.setenv("EXPLORER_MEMORY_LIMIT_MB", "lots")
    with pytest.raises(explorer.SpecError, match="EXPLORER_MEMORY_LIMIT_MB"):
        explorer.budget.process_limit_mb()


def test_cancelled_probe_jobs_keep_their_worker(worker_pool):
    """Probe -> Cancel while a probe runs, again and again: the worker finishes that probe (well within the grace),
    skips the rest and takes the next job, so the cycles start no new workers."""
    from test_app_jobs import wait_for

    queue = jobs.JobQueue(1, pool=worker_pool, cores=2)
    spec = WIDE.with_values({"data.dim": 512, "model.width": 512})
    state = explorer.build(spec)[0].state_dict()
    probes = {"jacobian": {}, "weights": {}, "norms": {}}  # 8 Jacobians of 512 x 512: about 0.4 s on one core
    ran_in = set()  # the workers the jobs ran in
    cycles = 8
    for i in range(cycles):
        job = queue.submit_probes(spec, probes, 8, f"cycle {i}", state=state, step=0)
        wait_for(lambda: job.view().current == "jacobian" or not job.active)
        job.stop("Cancelled from the test.")
        view = jobs.wait(job, timeout=300)
        assert view.status == "stopped" and "norms" not in view.results, view.error
        ran_in.add(job.worker_pid)
    assert len(ran_in) <= worker_pool.size + 1, f"{len(ran_in)} workers for {cycles} cancelled jobs"

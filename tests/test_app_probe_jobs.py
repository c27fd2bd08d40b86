"""The Inside page's probes run as jobs of the queue, in worker processes: capped by a memory estimate made
before anything is allocated, limited in time, cancelled with their session; idle workers give memory back."""

import os

import numpy as np
import psutil
import pytest

import explorer
from explorer_app import jobs, workers

SPEC = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 4, "train.steps": 6, "train.log_every": 3})
# A stream of 2048 numbers: each input's Jacobian is 2048 x 2048 (seconds of SVD per input on any CPU).
WIDE = explorer.ExperimentSpec.default().with_values(
    {"data.name": "identity", "data.dim": 2048, "data.n_train": 64, "data.n_val": 16, "model.name": "linear",
     "model.width": 2048, "model.depth": 1})
REPRO = WIDE.with_values({"data.n_train": 30000, "data.n_val": 1000})  # a 500 MB dataset, 64 inputs asked for


def stored_run(spec):
    run = explorer.train(spec, callbacks=[explorer.StoreRecorder(label="stored")])
    return run, explorer.RunStore().list()[0]["id"]


def test_probe_results_equal_explorer_probe_on_the_same_weights(worker_pool, monkeypatch):
    """From the stored checkpoint and from a state sent by the server (a run still training): the worker's
    results are explorer.probe's, and the server's process never builds the model or the data."""
    run, run_id = stored_run(SPEC)

    def refuse(*args, **kwargs):
        raise AssertionError("the server built a model for probing")

    monkeypatch.setattr(explorer, "build", refuse)
    queue = jobs.JobQueue(1, store=explorer.RunStore(), pool=worker_pool)
    probes = {"jacobian": {}, "norms": {}, "attention": {}}
    stored = jobs.wait(queue.submit_probes(SPEC, probes, 4, "stored", run_id=run_id))
    sent = jobs.wait(queue.submit_probes(SPEC, {"jacobian": {}}, 4, "sent", state=run.model.state_dict(), step=6))
    model, x = run.model.eval(), run.data.x_val[:4]
    for view in (stored, sent):
        assert view.status == "finished" and view.kind == "probe" and view.probe_step == 6
        expected = explorer.probe(model, x, "jacobian", max_inputs=4)
        assert np.allclose(view.results["jacobian"]["singular_values"], expected["singular_values"], rtol=1e-5)
    assert np.allclose(stored.results["norms"]["output_norm"], explorer.probe(model, x, "norms")["output_norm"],
                       rtol=1e-5)
    assert (stored.steps_done, stored.total_steps) == (3, 3)
    field, reason = stored.skipped["attention"]  # an MLP has no attention: said, not a failure
    assert field == "probe" and "Transformer" in reason and "attention" not in stored.results


def test_a_refused_estimate_is_one_line_and_allocates_nothing(monkeypatch):
    """The issue's 64 validation inputs on a 2048-wide stream: refused before a job exists, naming the probe and
    how many inputs fit; nothing is built and no worker is taken."""
    import explorer.data.base

    built = []
    monkeypatch.setattr(explorer.data.base, "_remember", lambda key, dataset: built.append(key))
    monkeypatch.setattr(explorer, "build", lambda *a, **k: built.append("model"))

    class NoPool:
        backend = "local"

        def take(self):
            built.append("worker")
            raise jobs.WorkerDied("no worker for this test")

    queue = jobs.JobQueue(1, pool=NoPool(), cores=2)
    rss = psutil.Process().memory_info().rss
    with pytest.raises(explorer.SpecError) as refused:
        queue.submit_probes(REPRO, {"jacobian": {}, "weights": {}, "norms": {}}, 64, "big", run_id="x")
    message = refused.value.message
    assert refused.value.path == "probe.jacobian" and "\n" not in message
    assert "64 validation inputs" in message and "EXPLORER_MAX_MODEL_MB" in message
    fits = int(message.split("use at most ")[1].split()[0])
    assert 1 <= fits < 64
    explorer.budget.check_probes(REPRO, {"jacobian": {}}, fits)  # as many as it says do fit
    assert built == [] and queue.jobs() == [] and queue.counts() == (0, 0)
    assert psutil.Process().memory_info().rss - rss < 100e6


def test_the_estimate_is_not_below_what_the_jacobian_probe_allocates():
    """Measured in a fresh process: the resident memory the Jacobian probe adds (its peak) stays within the
    estimate plus a fixed allowance for what the first probe loads (LAPACK, torch.func). The peak is the process's
    own high-water mark (VmHWM): Linux carries the starting process's peak into ru_maxrss across exec, so there a
    test process that once held a gigabyte would read as a probe that took one."""
    import subprocess
    import sys

    code = """
import explorer, psutil
spec = explorer.ExperimentSpec.from_dict(__import__("json").loads(__import__("sys").argv[1]))
model, data = explorer.build(spec)
explorer.probe(model, data.x_val[:1], "norms")
now = psutil.Process().memory_info().rss
explorer.probe(model, data.x_val[:8], "jacobian", max_inputs=8, max_dim=4096)
print(next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM")) - now)
"""
    spec = WIDE.with_values({"data.dim": 1024, "model.width": 1024})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    added = int(subprocess.run([sys.executable, "-c", code, spec.to_json()], capture_output=True, text=True,
                               check=True, env=env).stdout.split()[-1])
    estimate = explorer.budget.probe_bytes(spec, {"jacobian": {}}, 8)["jacobian"]
    assert 0.3 * estimate < added < estimate + 150e6


def test_the_time_limit_stops_a_probe_and_the_next_job_runs(worker_pool):
    queue = jobs.JobQueue(1, pool=worker_pool)
    state = explorer.build(WIDE)[0].state_dict()
    slow = queue.submit_probes(WIDE, {"norms": {}, "jacobian": {}}, 8, "slow", state=state, step=0, seconds=1)
    view = jobs.wait(slow)
    assert view.status == "error" and "\n" not in view.error
    assert "jacobian probe" in view.error and "EXPLORER_PROBE_SECONDS" in view.error
    assert "fewer validation inputs" in view.error
    assert "norms" in view.results  # the probes before it keep their results
    assert slow.worker_pid not in worker_pool.pids()  # killed; a fresh worker takes its place
    run, run_id = stored_run(SPEC)
    after = jobs.wait(jobs.JobQueue(1, store=explorer.RunStore(), pool=worker_pool).submit_probes(
        SPEC, {"norms": {}}, 4, "after", run_id=run_id), timeout=300)
    assert after.status == "finished" and set(after.results) == {"norms"}


def test_a_probe_job_of_a_gone_session_is_cancelled_and_frees_its_slot(worker_pool):
    """Its session gone (the tab closed), the reaper stops it: the worker, stuck in a probe, is killed, and the
    job waiting for the slot runs."""
    sessions = {"a": True, "b": True}
    queue = jobs.JobQueue(1, pool=worker_pool, alive=lambda s: sessions[s], grace_s=0, reap_every=None)
    state = explorer.build(WIDE)[0].state_dict()
    stuck = queue.submit_probes(WIDE, {"jacobian": {}}, 8, "stuck", state=state, step=0, seconds=3600, session="a")
    waiting = queue.submit_probes(WIDE, {"norms": {}}, 4, "next", state=state, step=0, session="b")
    from test_app_jobs import wait_for

    wait_for(lambda: stuck.view().current == "jacobian")
    assert waiting.view().status == "queued"
    sessions["a"] = False
    queue.reap()
    assert jobs.wait(stuck).status == "stopped" and "session" in stuck.view().note
    assert jobs.wait(waiting, timeout=300).status == "finished"


def test_an_idle_worker_gives_its_memory_back(monkeypatch):
    """After a run on a 200 MB dataset, the worker lets the model and data go: past EXPLORER_WORKER_IDLE_MB
    it drops its dataset cache too and falls back under it; one that cannot is replaced."""
    pool = workers.WorkerPool(1)
    try:
        queue = jobs.JobQueue(1, pool=pool, cores=2)
        jobs.wait(queue.submit(SPEC.with_values({"train.steps": 1, "train.log_every": 1}), "warm", record=False))
        [pid] = pool.pids()
        idle = psutil.Process(pid).memory_info().rss / 1e6
        limit = int(idle + 100)
        monkeypatch.setenv("EXPLORER_WORKER_IDLE_MB", str(limit))  # sent with the next job
        big = WIDE.with_values({"data.dim": 512, "model.width": 512, "data.n_train": 50_000, "data.n_val": 16,
                                "train.steps": 2, "train.log_every": 1})
        assert explorer.budget.data_bytes(big) > 200e6
        job = queue.submit(big, "big", record=False)
        assert jobs.wait(job).status == "finished"
        assert pool.pids() == [pid]
        assert psutil.Process(pid).memory_info().rss / 1e6 < limit
        assert job.worker_rss_mb < limit
        # a queue whose limit the worker cannot reach replaces it after the job
        strict = jobs.JobQueue(1, pool=pool, cores=2, worker_idle_mb=1)
        assert jobs.wait(strict.submit(SPEC, "strict", record=False)).status == "finished"
        assert pid not in pool.pids()
    finally:
        pool.close()


def test_the_inside_page_probes_in_a_worker_and_refuses_what_would_not_fit(open_page, monkeypatch):
    """The page's process never builds a model or data to probe: the job's results are drawn; a probe whose
    estimate passes the cap is one line naming it, the validation inputs and how many fit, with no job."""
    from conftest import plain
    from test_app_inside import probe

    spec = SPEC.with_values({"train.steps": 2, "train.log_every": 1})
    stored_run(spec)
    store = explorer.RunStore()
    big = store.create(REPRO, label="too big", status="finished")
    store.save_checkpoint(big, {"model": {}, "step": 2})

    def refuse(*args, **kwargs):
        raise AssertionError("the server built a model for probing")

    monkeypatch.setattr(explorer, "build", refuse)
    at = open_page("inside")
    at.toggle(key="inside-all").set_value(True).run()
    small = next(option for option in at.selectbox(key="inside-run").options if "stored" in option)
    at.selectbox(key="inside-run").set_value(next(r["id"] for r in store.list() if r["id"][:8] in small)).run()
    at.slider(key="inside-inputs").set_value(4).run()
    probe(at)
    assert not at.exception and not at.warning
    assert any("input-output Jacobian spectrum" in chart.proto.spec for chart in at.get("plotly_chart"))

    at.selectbox(key="inside-run").set_value(big).run()
    at.slider(key="inside-inputs").set_value(64).run()
    at.button(key="inside-run-probes").click().run()
    assert not at.exception and "inside-job" not in at.session_state
    [warning] = [plain(w.value) for w in at.warning]
    assert warning.startswith("Not probed: the jacobian probe on 64 validation inputs") and "\n" not in warning
    assert "use at most" in warning and "EXPLORER_MAX_MODEL_MB" in warning

"""The app's background jobs (in worker processes), server limits and upload rules (no Streamlit needed)."""

import os
import pickle
import signal
import threading
import time

import pytest

import explorer
from explorer.settings import SettingError
from explorer.nn.models import parameter_count
from explorer_app import jobs, limits, workers

SPEC = explorer.preset("tau-fig1-1/sqrt(L)").with_values({"model.depth": 4, "train.steps": 40, "train.log_every": 5})
LONG = SPEC.with_values({"train.steps": 20000})


def wait_for(predicate, timeout=300.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def held_at(job, quiet_s: float = 1.0) -> int:
    """The logged step a job asked to pause holds at. The page shows "paused" at once, but a worker that had
    already started trains on to its next logged step before it reads the message: wait until the job says
    paused and its step count has not moved for `quiet_s` seconds."""
    wait_for(lambda: job.view().status == "paused" and job.view().history)
    held, since = job.view().steps_done, time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.05)
        now = job.view().steps_done
        if now != held:
            held, since = now, time.monotonic()
    return held


def test_a_job_trains_in_a_worker_records_and_matches_a_plain_run(worker_pool):
    queue = jobs.JobQueue(1, store=explorer.RunStore(), pool=worker_pool)
    job = queue.submit(SPEC, "a", probes={"coefficients": {}}, probe_every=10)
    view = jobs.wait(job)
    plain = explorer.train(SPEC)
    assert view.status == "finished" and view.steps_done == 40
    assert job.worker_pid != os.getpid() and job.worker_pid in worker_pool.pids()  # trained elsewhere, worker kept
    # the same run in another process: equal up to float32 summation order (its thread count may differ)
    assert [row["loss"] for row in view.history] == pytest.approx([row["loss"] for row in plain.history], rel=1e-5)
    assert view.probe_step == 40 and set(view.probes) == {"coefficients"}
    assert explorer.RunStore().get(view.run_id)["status"] == "finished"
    tail = job.view(since=3)  # a reader that has the first 3 rows gets only the others
    assert tail.history == view.history[3:] and (tail.history_from, tail.history_length) == (3, len(view.history))
    step, state = job.model_state()  # an ended run's weights come from the store
    assert step == 40 and set(state) == set(explorer.build(SPEC)[0].state_dict())


def test_the_queue_runs_at_most_max_jobs_in_submission_order(worker_pool):
    queue = jobs.JobQueue(1, pool=worker_pool)
    first = queue.submit(SPEC, "first", record=False)
    first.pause()
    wait_for(lambda: first.view().status == "paused")
    second = queue.submit(SPEC, "second", record=False)
    third = queue.submit(SPEC, "third", record=False)
    time.sleep(0.3)
    assert (second.view().status, second.view().queue_position) == ("queued", 1)
    assert (third.view().status, third.view().queue_position) == ("queued", 2)
    assert queue.counts() == (1, 2)
    third.stop()  # leaves the queue without running
    first.resume()
    assert jobs.wait(third).status == "cancelled"
    assert jobs.wait(first).status == "finished" and jobs.wait(second).status == "finished"


class PoolWithNoWorkerYet:
    """A worker pool whose worker is still starting: take() holds until `ready` is set, then fails."""

    backend = "local"

    def __init__(self):
        self.ready = threading.Event()

    def take(self):
        self.ready.wait(60)
        raise jobs.WorkerDied("no worker for this test")

    def give_back(self, worker):
        pass


def test_a_job_out_of_line_waiting_for_its_worker_reads_starting():
    """A job with a slot whose worker is not there yet has no place in line: its view says "starting" (still
    active), never "queued" with no place (the pages wrote "queued (#None in line)")."""
    pool = PoolWithNoWorkerYet()
    job = jobs.JobQueue(1, pool=pool, cores=2).submit(SPEC, "s", record=False)
    wait_for(lambda: job.view().queue_position is None, timeout=30)
    view = job.view()
    assert (view.status, view.active) == ("starting", True)
    pool.ready.set()
    assert jobs.wait(job, 30).status == "error"


class FakeWorker:
    """A worker that says `script`'s messages to its job, then Free once its pool's `gate` is set."""

    pid = None

    def __init__(self, pool):
        self.pool, self.alive, self.said = pool, True, list(pool.script)

    def send(self, message) -> bool:
        return True

    def receive(self, timeout):
        if self.said:
            return self.said.pop(0)
        return workers.Free() if self.pool.gate.wait(timeout) else None

    def kill(self):
        self.alive = False


class FakePool:
    """A worker pool of FakeWorkers, counting the jobs they run at once."""

    backend = "local"

    def __init__(self, *script):
        self.script, self.gate = script, threading.Event()
        self.busy, self.most, self.taken = 0, 0, []
        self._lock = threading.Lock()

    def take(self):
        with self._lock:
            self.busy += 1
            self.most = max(self.most, self.busy)
            self.taken.append(FakeWorker(self))
            return self.taken[-1]

    def give_back(self, worker):
        with self._lock:
            self.busy -= 1


def test_queued_jobs_hold_no_thread_the_slots_run_them():
    """However many jobs wait, the queue runs them on `max_jobs` threads (its slots), in submission order."""
    before = set(threading.enumerate())
    pool = FakePool()
    queue = jobs.JobQueue(2, pool=pool, cores=2)
    queued = [queue.submit(SPEC, f"job {i}", record=False) for i in range(8)]
    wait_for(lambda: queue.counts() == (2, 6), timeout=30)
    started = [thread for thread in set(threading.enumerate()) - before if thread.name.startswith(jobs.SLOT_THREAD)]
    assert len(started) == 2
    assert [job.view().status for job in queued[:2]] == ["running", "running"]
    assert [job.view().queue_position for job in queued[2:]] == [1, 2, 3, 4, 5, 6]
    queued[3].stop()  # leaves the line at once, without a slot
    assert jobs.wait(queued[3], 30).status == "cancelled" and queue.counts() == (2, 5)
    pool.gate.set()
    assert [jobs.wait(job, 30).status for job in queued] == ["finished"] * 3 + ["cancelled"] + ["finished"] * 4
    assert pool.most == 2 and len(pool.taken) == 7
    after = [thread for thread in set(threading.enumerate()) - before if thread.name.startswith(jobs.SLOT_THREAD)]
    assert len(after) <= 2


def test_messages_travel_as_plain_data_and_unknown_ones_are_refused():
    """A message goes over the pipe (and through Ray) as its class's name and plain fields, never as a class of
    the app (a Ray node has no app). A message a side does not take is refused, naming it."""
    logged = workers.Logged(row={"step": 5, "loss": 0.5}, probes={}, step=5, steps_done=5, steps_per_second=2.0,
                            diverged_at=None, diverged_loss=None)
    wire = workers.dump(logged)
    assert workers.load(wire) == logged and b"explorer_app" not in wire
    assert pickle.loads(pickle.dumps(logged)) == logged
    with pytest.raises(workers.UnknownMessage, match="unknown message 'log'"):
        workers.load(pickle.dumps(("log", {"row": {}})))
    with pytest.raises(workers.UnknownMessage, match="tuple is not a message"):
        workers.dump(("pause",))
    with pytest.raises(workers.UnknownMessage, match="takes no Logged"):
        workers._Controls().apply(logged)
    train = jobs.TrainJob(SPEC, "t", {}, 50, None)
    with pytest.raises(workers.UnknownMessage, match="train job takes no Progress"):
        train.apply(workers.Progress(1, 2, "c", ""))
    with pytest.raises(workers.UnknownMessage, match="claims job takes no Logged"):
        jobs.ClaimsJob((("tau", "c"),), True, "c").apply(logged)
    with pytest.raises(workers.UnknownMessage, match="takes no object"):
        train.apply(object())


def test_a_worker_that_says_what_its_job_does_not_take_is_an_error_and_is_let_go():
    pool = FakePool(workers.Threads(1), workers.Progress(1, 2, "c", ""))
    view = jobs.wait(jobs.JobQueue(1, pool=pool, cores=2).submit(SPEC, "t", record=False), 30)
    assert view.status == "error" and "train job takes no Progress" in view.error
    assert not pool.taken[0].alive  # killed: the pool starts a fresh worker in its place


def test_pause_step_and_stop_act_at_logged_steps(worker_pool):
    job = jobs.JobQueue(1, pool=worker_pool).submit(SPEC, "p", record=False)
    job.pause()
    held = held_at(job)
    time.sleep(0.3)
    assert job.view().steps_done == held  # paused means no training
    job.step()
    wait_for(lambda: job.view().status == "paused" and job.view().steps_done == held + 5)
    step, state = job.model_state()
    assert step == held + 5 and set(state) == set(explorer.build(SPEC)[0].state_dict())
    job.stop()
    view = jobs.wait(job)
    assert view.status == "stopped" and view.steps_done == held + 5


def test_a_failing_run_is_an_error_message_not_a_crash(worker_pool, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world, " * 1000)
    spec = explorer.ExperimentSpec.default().with_values(
        {"data.name": "text", "data.path": str(corpus), "model.name": "gpt", "train.steps": 5, "train.log_every": 5})
    queue = jobs.JobQueue(1, pool=worker_pool)
    blocker = queue.submit(LONG, "blocker", record=False)
    job = queue.submit(spec, "x")
    corpus.unlink()  # gone before the job's turn: the worker fails to read it
    blocker.stop()
    view = jobs.wait(job)
    assert view.status == "error" and "corpus.txt" in view.error
    assert jobs.wait(queue.submit(SPEC, "next", record=False)).status == "finished"  # the worker goes on


def test_a_killed_worker_marks_its_job_error_and_is_replaced(worker_pool):
    queue = jobs.JobQueue(1, store=explorer.RunStore(), pool=worker_pool)
    job = queue.submit(LONG, "doomed")
    wait_for(lambda: job.view().history and job.run_id)
    os.kill(job.worker_pid, signal.SIGKILL)
    view = jobs.wait(job)
    assert view.status == "error" and view.error == "the worker process died: exit code -9"
    assert explorer.RunStore().get(view.run_id, arrays=False)["status"] == "error"
    wait_for(lambda: len(worker_pool.pids()) >= 2, timeout=300)  # a fresh worker took its place
    assert job.worker_pid not in worker_pool.pids()
    assert jobs.wait(queue.submit(SPEC, "after", record=False), timeout=300).status == "finished"


def test_a_worker_does_not_run_the_parents_main_script(tmp_path, monkeypatch):
    """Streamlit sets __main__ to the page's script while it runs: a worker started then must not run it."""
    import sys
    import types

    from explorer_app.workers import WorkerPool

    script = tmp_path / "page.py"
    marker = tmp_path / "ran"
    script.write_text(f"open({str(marker)!r}, 'w').write('the worker ran the page')\n")
    page = types.ModuleType("__main__")
    page.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", page)
    pool = WorkerPool(1)
    try:
        pool.give_back(pool.take())
    finally:
        pool.close()
    assert not marker.exists()


def test_a_claims_job_reports_progress_and_each_result(worker_pool):
    queue = jobs.JobQueue(1, pool=worker_pool)
    claims = [("idinit", "chi-at-init"), ("idinit", "no-such-claim")]
    job = queue.submit_claims(claims, fast=True, label="claims")
    seen = set()
    while job.active:
        view = job.view()
        seen.add((view.steps_done, view.current))
        time.sleep(0.02)
    view = job.view()
    assert view.kind == "claims" and view.total_steps == 2
    assert ("idinit", "chi-at-init") in view.results and view.results["idinit", "chi-at-init"]["verdict"] != "error"
    assert view.status == "error" and "no-such-claim" in view.error  # the unknown one: a message, not a crash
    assert view.steps_done == 1 and (0, "chi-at-init") in seen


def test_a_claims_job_leaves_its_worker_with_results_only():
    """The claims of a job share their runs through the papers' cache while it runs; its end drops them, so a
    worker keeps no run from one job to the next (the server keeps the claims' result rows)."""
    from explorer.papers import base
    explorer.papers.clear_cache()
    held_while_running = []

    def send(message):
        if isinstance(message, workers.ClaimResult):
            held_while_running.append(len(base.RUNS))

    job = workers.RunClaims(threads=1, env={}, data_roots=None, claims=[("tau", "init-norm-sharp-threshold")], fast=True)
    workers._claims(job, workers._Controls(), send)
    assert held_while_running and held_while_running[0] > 0  # the claim trained and cached runs...
    assert len(base.RUNS) == 0 and base.RUNS.nbytes == 0  # ...which the job's end dropped


def test_limits_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("EXPLORER_MAX_JOBS", "3")
    monkeypatch.setenv("EXPLORER_MAX_PARAMS", "1000")
    caps = limits.limits()
    assert caps.max_jobs == 3 and caps.max_params == 1000 and caps.max_steps == 20_000
    with pytest.raises(explorer.SpecError) as refused:
        limits.check_spec(SPEC, caps)
    assert refused.value.path == "model.width"
    assert f"this model has {parameter_count(SPEC):,} parameters" in refused.value.message
    assert "EXPLORER_MAX_PARAMS" in refused.value.message
    monkeypatch.setenv("EXPLORER_MAX_JOBS", "zero")
    with pytest.raises(SettingError, match="EXPLORER_MAX_JOBS: 'zero' is not valid.*positive whole number"):
        limits.limits()


def test_parameter_caps_count_the_real_model():
    for name in ("tau-fig1-1/sqrt(L)", "skip-table1-skip", "dca-table7-dca"):
        spec = explorer.preset(name)
        assert parameter_count(spec) == sum(p.numel() for p in explorer.build(spec, device="cpu")[0].parameters())


def test_data_files_are_read_only_from_the_data_folders(tmp_path, monkeypatch):
    """With the server's restriction on, a path outside EXPLORER_DATA_DIR is refused before
    it is read or looked up: one message whether the file exists or not (no size, no existence)."""
    data_dir, outside = tmp_path / "data", tmp_path / "private"
    data_dir.mkdir(), outside.mkdir()
    (outside / "secret.txt").write_text("hello world, " * 1000)
    (data_dir / "corpus.txt").write_text("hello world, " * 1000)
    (data_dir / "link.txt").symlink_to(outside / "secret.txt")  # a link inside must not lead outside
    monkeypatch.setenv("EXPLORER_DATA_DIR", str(data_dir))
    limits.restrict_data_reads()
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda file, *a, **k: (opened.append(str(file)), real_open(file, *a, **k))[1])

    def refusal(path) -> str:
        with pytest.raises(explorer.SpecError) as refused:
            explorer.ExperimentSpec.default().with_values({"data.name": "text", "data.path": str(path), "model.name": "gpt"})
        assert refused.value.path == "data.path"
        return refused.value.message

    messages = {refusal(outside / "secret.txt"), refusal(outside / "missing.txt"), refusal(data_dir / "link.txt"),
                refusal("/etc/passwd"), refusal("~/../../etc/shadow"), refusal(data_dir / ".." / "private" / "secret.txt")}
    assert len(messages) == 1, messages
    [message] = messages
    assert "EXPLORER_DATA_DIR" in message and "characters" not in message and "exist" not in message
    assert not [path for path in opened if "private" in path or path.startswith("/etc")]
    spec = explorer.ExperimentSpec.default().with_values(
        {"data.name": "text", "data.path": str(data_dir / "corpus.txt"), "model.name": "gpt"})
    assert explorer.build(spec, device="cpu")[1].n_train > 0


def test_the_running_jobs_share_the_cores_and_rebalance(worker_pool):
    """A lone run trains with every core but one (left to the server and a browser); when a second starts
    they share them, and the first gets them back when the second ends. A claims job keeps the share of a
    full queue whatever else runs."""
    assert [jobs.threads_per_job(running, cores=9) for running in (1, 2, 3, 8, 9)] == [8, 4, 2, 1, 1]
    assert jobs.threads_per_job(1, cores=2) == 1 and jobs.threads_per_job(1, cores=1) == 1
    queue = jobs.JobQueue(2, pool=worker_pool, cores=5)
    assert queue.claim_threads == 2
    every_step = LONG.with_values({"train.log_every": 1})
    first = queue.submit(every_step, "first", record=False)
    wait_for(lambda: first.worker_threads == 4 and first.view().history)
    second = queue.submit(every_step, "second", record=False)
    wait_for(lambda: first.worker_threads == 2 and second.worker_threads == 2)
    second.stop()
    assert jobs.wait(second).status == "stopped"
    wait_for(lambda: first.worker_threads == 4)
    first.pause()
    held_at(first)
    claims = queue.submit_claims([("idinit", "chi-at-init")], fast=True, label="claims")
    assert jobs.wait(claims).status == "finished" and claims.threads == 2
    wait_for(lambda: first.threads == 4 and first.worker_threads == 4)  # alone again (and paused)
    first.stop()
    assert jobs.wait(first).status == "stopped"


def test_jobs_run_on_a_local_ray_with_the_same_protocol(monkeypatch, local_ray):
    """RAY_ADDRESS set: the server's jobs go to Ray actors (here the tests' private local Ray): they train,
    record, pause, step and stop like local workers, and an actor killed mid-run is an error, then replaced."""
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert workers.default_backend() == "ray"  # what the app's pool uses when RAY_ADDRESS is set
    pool = workers.WorkerPool(1, backend="ray")
    try:
        queue = jobs.JobQueue(1, store=explorer.RunStore(), pool=pool)
        view = jobs.wait(queue.submit(SPEC, "on ray", probes={"coefficients": {}}, probe_every=10), timeout=600)
        assert view.status == "finished" and view.steps_done == 40 and view.probe_step == 40
        assert [row["loss"] for row in view.history] == pytest.approx(
            [row["loss"] for row in explorer.train(SPEC).history], rel=1e-5)
        assert explorer.RunStore().get(view.run_id)["status"] == "finished"

        job = queue.submit(LONG, "controlled")
        job.pause()
        held = held_at(job)
        job.step()
        wait_for(lambda: job.view().status == "paused" and job.view().steps_done == held + 5)
        job.stop()
        assert jobs.wait(job).status == "stopped"

        doomed = queue.submit(LONG, "doomed")
        wait_for(lambda: doomed.view().history and doomed.run_id)
        os.kill(doomed.worker_pid, signal.SIGKILL)  # the actor's process (a local Ray runs it on this machine)
        view = jobs.wait(doomed)
        assert view.status == "error" and "Ray worker died" in view.error
        assert explorer.RunStore().get(view.run_id, arrays=False)["status"] == "error"
        assert jobs.wait(queue.submit(SPEC, "after", record=False), timeout=600).status == "finished"
    finally:
        pool.close()

"""Training jobs and paper claims, run in worker processes and shared by every browser session.

One `JobQueue` per server (the app keeps it in `st.cache_resource`) runs at most `max_jobs` jobs at once;
later ones wait in submission order. Each running job is handed to a pre-started worker process
(explorer_app.workers), so training never holds the server's interpreter: the Streamlit server only
relays events. Jobs belong to the browser session that submitted them: a session may have at most
`max_per_session` active jobs, and the queue's reaper stops a session's jobs `grace_s` seconds after the
session ends (its tab closed), so an orphan does not hold a slot others wait for. `jobs()` lists every job
for an operator, who may stop any. A `Job` is the server's copy of one run: the worker streams its logged
rows, live probe results, status and run id (the worker records the run in the run store itself), and the
job keeps them under a lock. The page's live feed (explorer_app.live_feed), or without one a fragment that
reruns a few times a second, reads `Job.view(since=n)` (only the rows after the n it has). The running
jobs share the cores, rebalanced as jobs start and end. Pause, Step and Stop act at logged steps
(`train.log_every`).
A claims job runs paper claims one after another and reports each result as it comes.
"""

from __future__ import annotations

import io
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from explorer.runs import RunStore
from explorer_app.messages import escape
from explorer_app.workers import WorkerDied, WorkerPool

ACTIVE = ("queued", "starting", "running", "paused")  # a job in one of these may still change
SETTINGS = ("EXPLORER_MAX_DATA_MB", "EXPLORER_MAX_MODEL_MB", "EXPLORER_DATA_CACHE_MB", "EXPLORER_DATA_DIR",
            "EXPLORER_HOME", "EXPLORER_FAST")  # the server's settings a worker takes with each job


@dataclass(frozen=True)
class JobView:
    """A consistent copy of a job's state, safe to read while the job goes on."""

    id: str
    label: str
    status: str  # queued, starting (a slot, a worker being taken), running, paused, finished, diverged, stopped, cancelled, error
    steps_done: int  # a claims job: claims done
    total_steps: int  # a claims job: claims to run
    history: list[dict[str, float]]  # logged rows from index `history_from` on (all of them unless view(since=))
    probes: dict[str, dict]  # latest result of each live probe
    probe_step: int | None
    steps_per_second: float | None
    diverged_at: int | None
    run_id: str | None
    error: str | None
    queue_position: int | None  # 1 = next to start, while queued
    note: str | None = None  # e.g. a live probe left out because it does not apply to this model (markdown)
    diverged_loss: float | None = None  # the loss it exploded to (plots draw the divergence marker there)
    history_from: int = 0  # index in the job's history of `history[0]`
    history_length: int = 0  # rows logged so far
    kind: str = "train"  # "train" or "claims"
    results: dict = field(default_factory=dict)  # a claims job: (paper, claim id) -> the claim's row
    current: str | None = None  # a claims job: the claim running now
    detail: str = ""  # a claims job: where that claim stands ("run 2 of 6, ~40 s left (all: ~3 min left)")

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def as_run(self) -> dict[str, Any]:
        """The shape `explorer.plots.loss_curves` draws."""
        return {"label": self.label, "history": self.history, "status": self.status, "diverged_at": self.diverged_at,
                "diverged_loss": self.diverged_loss}


class Job:
    """One run (or list of claims) for a worker process, with Pause / Step / Stop between logged steps."""

    def __init__(self, spec, label: str, probes: Mapping[str, dict], probe_every: int, store: RunStore | None,
                 optional_probes: tuple[str, ...] = (), session: str | None = None,
                 claims: tuple[tuple[str, str], ...] = (), fast: bool = True):
        self.id = uuid.uuid4().hex[:8]
        self.session = session  # the browser session that submitted it (None: not tied to one)
        self.spec, self.label = spec, label
        self.kind = "claims" if claims else "train"
        self.claims, self.fast = tuple(claims), fast
        self.probes, self.probe_every, self.store = dict(probes), probe_every, store
        self.optional_probes = optional_probes  # tried on the untrained model first; left out if they do not apply
        self._note: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._paused = False  # asked to hold (a queued job starts paused)
        self._status = "queued"
        self._history: list[dict[str, float]] = []
        self._probes: dict[str, dict] = {}
        self._probe_step: int | None = None
        self._steps_done = 0
        self._sps: float | None = None
        self._diverged_at: int | None = None
        self._diverged_loss: float | None = None
        self._error: str | None = None
        self._run_id: str | None = None
        self._results: dict = {}
        self._current: str | None = None
        self._detail = ""  # a claims job: where the current claim stands, with time estimates
        self._queue: JobQueue | None = None
        self._worker = None  # the worker process running it, while it runs
        self.worker_pid: int | None = None
        self.worker_threads: int | None = None  # intra-op threads the worker trains with now (it reports them)
        self.threads = 1  # intra-op threads to train with (set by the queue, changed as other jobs start and end)
        self.done = threading.Event()
        self._snapshot: tuple[int, dict] | None = None
        self._snapshot_ready = threading.Event()
        self.ended_at = float("inf")  # time.monotonic() when it ended

    @property
    def total(self) -> int:
        return len(self.claims) if self.kind == "claims" else self.spec.train.steps

    # ---- controls (any thread) ------------------------------------------------------------------
    def _tell(self, message: tuple) -> None:
        worker = self._worker
        if worker is not None:
            worker.send(message)

    def pause(self) -> None:
        """Hold the run at its next logged step (a queued run pauses at its first)."""
        with self._lock:
            if self._status in ("queued", "running") and self.kind == "train":
                self._paused = True
                self._status = "paused" if self._status == "running" else "queued"
                self._tell(("pause",))

    def resume(self) -> None:
        with self._lock:
            if self._status == "paused":
                self._status, self._paused = "running", False
                self._tell(("resume",))

    def step(self) -> None:
        """While paused: train up to the next logged step, then pause again."""
        with self._lock:
            if self._status == "paused":
                self._status = "running"
                self._tell(("step",))

    def stop(self, reason: str | None = None) -> None:
        """Stop the run at its next step (or take it out of the queue); it keeps what it has done. `reason`
        (markdown) is shown with it, e.g. why an operator or the reaper stopped it."""
        with self._lock:
            if reason is not None:
                self._note = reason
            self._stop.set()
            self._tell(("stop",))

    def model_state(self, timeout: float = 10.0) -> tuple[int, dict] | None:
        """(step, a copy of the model's state_dict) for probing: the final weights from the run store once the
        run ended, else a copy the worker takes at its next logged step (so it is never half-updated). None
        when the run has not started or no logged step came within `timeout` seconds."""
        with self._lock:
            if self._status not in ("running", "paused"):
                if self.done.is_set() and self._run_id and self.store is not None:
                    state = self.store.load_checkpoint(self._run_id)
                    return (self._steps_done, state["model"]) if state else None
                return None
            self._snapshot_ready.clear()
            self._tell(("snapshot",))
        if not self._snapshot_ready.wait(timeout):
            return None
        return self._snapshot

    # ---- reading --------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        with self._lock:
            return self._status

    @property
    def active(self) -> bool:
        """Queued, running or paused (cheaper than view().active: copies nothing)."""
        return self.status in ACTIVE

    @property
    def run_id(self) -> str | None:
        """The run's id in the run store, once the worker created it."""
        with self._lock:
            return self._run_id

    def view(self, since: int = 0) -> JobView:
        """The job's state; `since`: leave out the first `since` logged rows (a reader that has them)."""
        position = self._queue.position(self) if self._queue else None
        with self._lock:
            since = min(max(since, 0), len(self._history))
            # out of the line but not yet on a worker (one may be starting): "starting", not "queued" with no place
            status = "starting" if self._status == "queued" and self._queue is not None and position is None else self._status
            return JobView(
                id=self.id, label=self.label, status=status, steps_done=self._steps_done,
                total_steps=self.total, history=self._history[since:],
                probes=dict(self._probes), probe_step=self._probe_step, steps_per_second=self._sps,
                diverged_at=self._diverged_at, run_id=self._run_id,
                error=self._error, queue_position=position, note=self._note, diverged_loss=self._diverged_loss,
                history_from=since, history_length=len(self._history), kind=self.kind,
                results=dict(self._results), current=self._current, detail=self._detail)

    # ---- the worker's events (the queue's thread for this job) ---------------------------------
    def _payload(self) -> dict:
        from explorer.data.files import allowed_roots

        roots = allowed_roots()
        common = {"threads": self.threads, "env": {k: os.environ.get(k) for k in SETTINGS},
                  "data_roots": None if roots is None else [str(root) for root in roots]}
        if self.kind == "claims":
            return {"kind": "claims", "claims": list(self.claims), "fast": self.fast, **common}
        return {"kind": "train", "spec": self.spec.to_dict(), "label": self.label, "probes": self.probes,
                "probe_every": self.probe_every, "optional_probes": list(self.optional_probes),
                "store": str(self.store.root) if self.store is not None else None, "paused": self._paused, **common}

    def _apply(self, message: tuple) -> None:
        kind = message[0]
        with self._lock:
            if kind == "log":
                event = message[1]
                self._history.append(event["row"])
                if event["probes"]:
                    self._probes.update(event["probes"])
                    self._probe_step = event["step"]
                self._steps_done, self._sps = event["steps_done"], event["sps"]
                self._diverged_at, self._diverged_loss = event["diverged_at"], event["diverged_loss"]
            elif kind == "paused":  # a Step reached its logged step
                if self._status == "running":
                    self._status = "paused"
            elif kind == "end":
                event = message[1]
                self._steps_done = event["steps_done"]
                self._diverged_at, self._diverged_loss = event["diverged_at"], event["diverged_loss"]
                known = {row["step"] for row in self._history}
                self._history.extend(row for row in event["history"] if row["step"] not in known)
                self._status = event["status"]
            elif kind == "run_id":
                self._run_id = message[1]
            elif kind == "threads":
                self.worker_threads = message[1]
            elif kind == "note":
                self._note = (f"Training without the live probe **{escape(message[1])}**: {escape(message[2])}. "
                              "Choose another probe (e.g. norms or weights) for this model.")
            elif kind == "snapshot":
                import torch

                self._snapshot = (message[1], torch.load(io.BytesIO(message[2]), weights_only=True))
                self._snapshot_ready.set()
            elif kind == "progress":
                self._steps_done, self._current, self._detail = message[1], message[3], message[4]
            elif kind == "claim":
                self._results[(message[1], message[2])] = message[3]
            elif kind == "error":
                self._fail(message[1])

    def _fail(self, reason: str) -> None:
        """(Under the lock.) The job ended on an error; its stored run says so."""
        self._status, self._error = "error", reason
        if self._run_id is not None and self.store is not None:
            try:
                self.store.set_status(self._run_id, "error", final={"error": reason})
            except Exception:  # noqa: BLE001  (the message on the page matters more)
                pass

    def _run_in(self, worker) -> None:
        """Hand the job to `worker` and relay its events until it is done (or the worker dies)."""
        with self._lock:
            self._worker, self.worker_pid = worker, worker.pid
            self._status = "paused" if self._paused else "running"
            if self.kind == "claims":
                self._status = "running"
            worker.send(("job", self._payload()))
            if self._stop.is_set():
                worker.send(("stop",))
        try:
            while True:
                message = worker.receive(0.5)
                if message is None:
                    continue
                if message[0] == "done":
                    break
                self._apply(message)
        except WorkerDied as died:
            with self._lock:
                self._fail(str(died))
        finally:
            with self._lock:
                self._worker = None
                if self._status in ACTIVE:  # ended without saying how (a claims job, or stopped early)
                    self._status = "stopped" if self._stop.is_set() else "finished"
                self._snapshot_ready.set()


class SessionLimit(Exception):
    """A session asked for more active jobs than `max_per_session` allows."""


class JobQueue:
    """Runs jobs in worker processes, at most `max_jobs` at once, the rest in first-come order.

    `pool`: the WorkerPool to run them in (default: one of `max_jobs` workers, started at the first job or
    at `warm()`); several queues may share one pool (the tests do).

    `cores`: the intra-op threads the running jobs share (default: torch's default here, as `explorer train`).

    `alive(session_id)` says whether a browser session is still there; with it, a reaper thread (every
    `reap_every` seconds; None: only when `reap` is called) stops the jobs of a session gone for `grace_s`
    seconds. Without `alive` (scripts, most tests) jobs are not tied to sessions' lives.
    """

    def __init__(self, max_jobs: int, store: RunStore | None = None, max_per_session: int | None = None,
                 alive: Callable[[str], bool] | None = None, grace_s: float = 60.0, reap_every: float | None = 5.0,
                 pool: WorkerPool | None = None, cores: int | None = None):
        if max_jobs < 1:
            raise ValueError(f"max_jobs must be at least 1, got {max_jobs}")
        self.max_jobs, self.store = max_jobs, store
        self.max_per_session, self.grace_s = max_per_session, grace_s
        self._cond = threading.Condition()
        self._waiting: deque = deque()  # Jobs and slot() tickets, first come first served
        self._jobs: list[Job] = []  # every job submitted and not yet forgotten (for the operator and the reaper)
        self._alive = alive
        self._gone_since: dict[str, float] = {}
        self.reap_every = reap_every
        self.pool = pool if pool is not None else WorkerPool(max_jobs)
        # A Ray actor holds one CPU of its node; local workers share this machine's cores: the jobs running
        # share them out (a lone run gets them all but one), and a claims job always gets the share of a full
        # queue, so a claim's numbers do not depend on what else ran (float sums change with threads).
        self.cores = 1 if self.pool.backend == "ray" else (cores or default_threads())
        self.claim_threads = threads_per_job(max_jobs, self.cores)
        self._running_jobs: set[Job] = set()  # those holding a slot
        if alive is not None and reap_every is not None:
            threading.Thread(target=self._reap_forever, name="explorer-job-reaper", daemon=True).start()

    def active_jobs(self, session: str | None = None) -> list[Job]:
        """Jobs still queued, running or paused (of one session, or all)."""
        with self._cond:
            jobs = list(self._jobs)
        return [job for job in jobs if job.active and (session is None or job.session == session)]

    def jobs(self) -> list[Job]:
        """Every job the queue knows: the active ones and those ended in the last hour, oldest first."""
        with self._cond:
            return list(self._jobs)

    def submit(self, spec, label: str, probes: Mapping[str, dict] | None = None, probe_every: int = 50,
               record: bool = True, optional_probes: tuple[str, ...] = (), session: str | None = None) -> Job:
        """Start (or queue) a run of `spec`; with `record` it is saved in the queue's run store. SessionLimit
        when `session` already has `max_per_session` active jobs."""
        self._check_share(session)
        store = (self.store or RunStore()) if record else None
        return self._enqueue(Job(spec, label, probes or {}, probe_every, store, optional_probes, session))

    def submit_claims(self, claims: list[tuple[str, str]], fast: bool, label: str, session: str | None = None) -> Job:
        """Queue paper claims [(paper, claim id), ...] to run one after another in a worker; the view reports
        "claim i of n" and each result row as it comes."""
        if not claims:
            raise ValueError("no claims to run")
        self._check_share(session)
        return self._enqueue(Job(None, label, {}, 0, None, session=session, claims=tuple(claims), fast=fast))

    def warm(self, delay: float = 0.0) -> None:
        """Start the worker processes in the background, after `delay` seconds (the app calls it after a page
        that trains has been drawn)."""
        self.pool.warm(delay)

    def _check_share(self, session: str | None) -> None:
        if session is not None and self.max_per_session is not None \
                and len(self.active_jobs(session)) >= self.max_per_session:
            raise SessionLimit(f"this session already has {self.max_per_session} run(s) training or waiting, the "
                               "most one session may have on this server (EXPLORER_MAX_JOBS_PER_SESSION); wait for "
                               "one to end or stop it")

    def _enqueue(self, job: Job) -> Job:
        job._queue = self
        with self._cond:
            self._waiting.append(job)
            self._jobs.append(job)
        threading.Thread(target=self._run, args=(job,), name=f"explorer-job-{job.id}", daemon=True).start()
        return job

    def reap(self, now: float | None = None) -> list[Job]:
        """Stop the active jobs of sessions gone for `grace_s` seconds; returns the jobs it stopped."""
        now = time.monotonic() if now is None else now
        stopped = []
        for session in {job.session for job in self.active_jobs() if job.session is not None}:
            if self._alive(session):
                self._gone_since.pop(session, None)
                continue
            gone = self._gone_since.setdefault(session, now)
            if now - gone >= self.grace_s:
                for job in self.active_jobs(session):
                    job.stop(f"Stopped: the browser session that started it ended {now - gone:.0f} s earlier.")
                    stopped.append(job)
                self._gone_since.pop(session, None)
        with self._cond:  # forget ended jobs after an hour
            self._jobs = [job for job in self._jobs if job.active or now - job.ended_at < 3600]
        return stopped

    def _reap_forever(self) -> None:
        while True:
            time.sleep(min(max(self.grace_s / 4, 0.5), self.reap_every))
            try:
                self.reap()
            except Exception:  # the reaper must outlive any one bad job
                pass

    def position(self, job: Job) -> int | None:
        with self._cond:
            return self._waiting.index(job) + 1 if job in self._waiting else None

    def counts(self) -> tuple[int, int]:
        """(running, waiting) across the server."""
        with self._cond:
            return len(self._running_jobs), len(self._waiting)

    def _run(self, job: Job) -> None:
        with self._cond:
            while not (self._waiting[0] is job and len(self._running_jobs) < self.max_jobs) and not job._stop.is_set():
                self._cond.wait(0.2)
            self._waiting.remove(job)
            self._cond.notify_all()
            if not job._stop.is_set():
                self._running_jobs.add(job)
                self._share_cores()
        if job._stop.is_set():
            self._cancel(job)
            return
        try:
            try:
                worker = self.pool.take()
            except WorkerDied as died:
                with job._lock:
                    job._fail(str(died))
                return
            try:
                job._run_in(worker)
            finally:
                self.pool.give_back(worker)
        finally:
            with self._cond:
                self._running_jobs.discard(job)
                self._share_cores()
                self._cond.notify_all()
            job.ended_at = time.monotonic()
            job.done.set()

    def _share_cores(self) -> None:
        """(Under the queue's lock.) Give each running training job its share of the cores, telling the
        workers whose share changed (they switch at their next logged step). More threads than cores is far
        worse than fewer: on 2 cores beside a process busy half the time, a ViT trained at 20.8 steps/s with 2
        threads and 23.5 with 1 (an OpenMP barrier waits for a descheduled thread)."""
        share = threads_per_job(len(self._running_jobs), self.cores)
        for job in self._running_jobs:
            threads = self.claim_threads if job.kind == "claims" else share
            if job.threads != threads:
                job.threads = threads
                job._tell(("threads", threads))

    @staticmethod
    def _cancel(job: Job) -> None:
        with job._lock:
            job._status = "cancelled"
        job.ended_at = time.monotonic()
        job.done.set()


def threads_per_job(jobs: int, cores: int) -> int:
    """Intra-op threads for each of `jobs` jobs running at once on `cores`: the cores less one for the server
    and a browser on the same machine, shared out (at least 1). On a 2-core VM with Chromium showing the
    run, a lone run trained faster with 1 thread than with both cores: the ANCRe preset at 0.69-0.80x of
    `explorer train` against 0.46-0.51x, the tau MLP-ResNet at 0.54-0.55x against 0.38-0.57x (the ViT
    preset: 0.54-0.57x against 0.59-0.62x)."""
    return max(1, (cores - 1) // max(jobs, 1))


def default_threads() -> int:
    """The intra-op threads torch would train with in a fresh process here (`explorer train`'s): the physical
    cores, or OMP_NUM_THREADS."""
    import torch

    return torch.get_num_threads()


class HistoryReader:
    """A reader of one job's views with their whole history, asking the job only for the rows logged since
    its last read (a page's redraws and its live feed each keep one)."""

    def __init__(self, job: Job):
        self.job = job
        self._rows: list[dict[str, float]] = []

    def view(self) -> JobView:
        view = self.job.view(since=len(self._rows))
        self._rows.extend(view.history)
        return replace(view, history=list(self._rows), history_from=0)


def wait(job: Job, timeout: float = 300.0) -> JobView:
    """Block until the job ends (for tests and scripts); returns its final view."""
    if not job.done.wait(timeout):
        raise TimeoutError(f"job {job.id} still {job.view().status} after {timeout} s")
    return job.view()


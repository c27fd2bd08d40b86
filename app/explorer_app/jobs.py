"""Training jobs that run off the Streamlit script thread, shared by every browser session.

One `JobQueue` per server (the app keeps it in `st.cache_resource`) runs at most `max_jobs`
trainings at once; later ones wait in submission order. Jobs belong to the browser session that
submitted them: a session may have at most `max_per_session` active jobs, and the queue's reaper
stops a session's jobs `grace_s` seconds after the session ends (its tab closed), so an orphan does not
hold a slot others wait for. `jobs()` lists every job for an operator, who may stop any. A `Job` is one run: a thread calls
`explorer.train` with two listeners, a `StoreRecorder` that saves the run in the run store and
the job's own, which copies each logged row and live probe result into the job under a lock.
The page reads `Job.view()` from a fragment that reruns a few times a second, so the page stays
usable while the run trains. Pause, Step and Stop act at logged steps (every `train.log_every`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

import explorer
from explorer.runs import RunStore, StoreRecorder
from explorer_app.messages import escape

ACTIVE = ("queued", "running", "paused")  # a job in one of these may still change


@dataclass(frozen=True)
class JobView:
    """A consistent copy of a job's state, safe to read while the job goes on."""

    id: str
    label: str
    status: str  # queued, running, paused, finished, diverged, stopped, cancelled, error
    steps_done: int
    total_steps: int
    history: list[dict[str, float]]
    probes: dict[str, dict]  # latest result of each live probe
    probe_step: int | None
    steps_per_second: float | None
    diverged_at: int | None
    run_id: str | None
    error: str | None
    queue_position: int | None  # 1 = next to start, while queued
    note: str | None = None  # e.g. a live probe left out because it does not apply to this model (markdown)
    diverged_loss: float | None = None  # the loss it exploded to (plots draw the divergence marker there)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def as_run(self) -> dict[str, Any]:
        """The shape `explorer.plots.loss_curves` draws."""
        return {"label": self.label, "history": self.history, "status": self.status, "diverged_at": self.diverged_at,
                "diverged_loss": self.diverged_loss}


class Job:
    """One training run in a background thread, with Pause / Step / Stop between logged steps."""

    def __init__(self, spec, label: str, probes: Mapping[str, dict], probe_every: int, store: RunStore | None,
                 optional_probes: tuple[str, ...] = (), session: str | None = None):
        self.id = uuid.uuid4().hex[:8]
        self.session = session  # the browser session that submitted it (None: not tied to one)
        self.spec, self.label = spec, label
        self.probes, self.probe_every, self.store = dict(probes), probe_every, store
        self.optional_probes = optional_probes  # tried on the untrained model first; left out if they do not apply
        self._note: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._go = threading.Event()  # cleared while paused
        self._go.set()
        self._step_once = False
        self._status = "queued"
        self._history: list[dict[str, float]] = []
        self._probes: dict[str, dict] = {}
        self._probe_step: int | None = None
        self._steps_done = 0
        self._sps: float | None = None
        self._diverged_at: int | None = None
        self._diverged_loss: float | None = None
        self._error: str | None = None
        self._queue: JobQueue | None = None
        self.threads = 1  # intra-op threads of this job's training thread (set by the queue)
        self.recorder = StoreRecorder(store, label=label) if store is not None else None
        self.done = threading.Event()
        self._snapshot_wanted = threading.Event()
        self._snapshot: tuple[int, dict] | None = None  # (step, state_dict copy) taken at a logged step
        self._snapshot_ready = threading.Event()
        self._model = None  # the trained model, once the run has ended
        self.ended_at = float("inf")  # time.monotonic() when it ended

    # ---- controls (any thread) ------------------------------------------------------------------
    def pause(self) -> None:
        """Hold the run at its next logged step (a queued run pauses at its first)."""
        with self._lock:
            if self._status in ("queued", "running"):
                self._go.clear()
                self._status = "paused" if self._status == "running" else "queued"

    def resume(self) -> None:
        with self._lock:
            if self._status == "paused":
                self._status = "running"
                self._step_once = False
                self._go.set()

    def step(self) -> None:
        """While paused: train up to the next logged step, then pause again."""
        with self._lock:
            if self._status == "paused":
                self._step_once = True
                self._status = "running"
                self._go.set()

    def stop(self, reason: str | None = None) -> None:
        """Stop the run at its next step (or take it out of the queue); it keeps what it has done. `reason`
        (markdown) is shown with it, e.g. why an operator or the reaper stopped it."""
        if reason is not None:
            with self._lock:
                self._note = reason
        self._stop.set()
        self._go.set()

    def model_state(self, timeout: float = 10.0) -> tuple[int, dict] | None:
        """(step, a copy of the model's state_dict) for probing: the final weights once the run ended, else a
        copy taken by the training thread at its next logged step (so it is never half-updated). None when
        the run has not started or no logged step came within `timeout` seconds."""
        with self._lock:
            if self._model is not None:
                return self._steps_done, _copy_state(self._model)
            if self._status not in ("running", "paused"):
                return None
            self._snapshot_ready.clear()
            self._snapshot_wanted.set()
        if not self._snapshot_ready.wait(timeout):
            return None
        return self._snapshot

    # ---- reading --------------------------------------------------------------------------------
    def view(self) -> JobView:
        with self._lock:
            return JobView(
                id=self.id, label=self.label, status=self._status, steps_done=self._steps_done,
                total_steps=self.spec.train.steps, history=list(self._history),
                probes=dict(self._probes), probe_step=self._probe_step, steps_per_second=self._sps,
                diverged_at=self._diverged_at, run_id=self.recorder.run_id if self.recorder else None,
                error=self._error, queue_position=self._queue.position(self) if self._queue else None,
                note=self._note,
                diverged_loss=self._diverged_loss)

    # ---- the training thread --------------------------------------------------------------------
    def _listen(self, event) -> None:
        run = event.run
        with self._lock:
            if event.kind == "log":
                self._history.append(dict(event.metrics))
                if event.probes:
                    self._probes.update(event.probes)
                    self._probe_step = event.step
                self._steps_done = run.steps_done
                self._sps = run.steps_done / run.wall_time if run.wall_time > 0 and run.steps_done else None
                self._diverged_at, self._diverged_loss = run.diverged_at, run.diverged_loss
                if self._snapshot_wanted.is_set():
                    self._take_snapshot(run)
                if self._step_once:
                    self._step_once = False
                    self._status = "paused"
                    self._go.clear()
            elif event.kind == "end":
                self._steps_done = run.steps_done
                self._diverged_at, self._diverged_loss = run.diverged_at, run.diverged_loss
                known = {row["step"] for row in self._history}
                self._history.extend(dict(row) for row in run.history if row["step"] not in known)
                self._status = run.status
                self._model = run.model
        if event.kind == "log":
            while not self._go.wait(0.1):  # paused: hold the trainer here until Resume, Step or Stop
                if self._snapshot_wanted.is_set():
                    self._take_snapshot(run)

    def _leave_out_inapplicable_probes(self) -> None:
        """In the job's own turn (nothing is built before): drop an optional probe that does not apply."""
        for name in self.optional_probes:
            error = _probe_problem(self.spec, name)
            if error is not None:
                self.probes.pop(name, None)
                with self._lock:
                    self._note = (f"Training without the live probe **{escape(name)}**: {escape(error.message)}. "
                                  "Choose another probe (e.g. norms or weights) for this model.")

    def _take_snapshot(self, run) -> None:
        self._snapshot = (run.steps_done, _copy_state(run.model))
        self._snapshot_wanted.clear()
        self._snapshot_ready.set()

    def _train(self) -> None:
        torch.set_num_threads(self.threads)
        with self._lock:
            self._status = "running" if self._go.is_set() else "paused"
        try:
            self._leave_out_inapplicable_probes()
            listeners = [self.recorder, self._listen] if self.recorder else [self._listen]
            explorer.train(self.spec, callbacks=listeners, stop=self._stop,
                           probes=self.probes or None, probe_every=self.probe_every)
        except Exception as error:  # shown on the page as a message; the server goes on
            with self._lock:
                self._status = "error"
                self._error = f"{type(error).__name__}: {error}"
            if self.recorder is not None and self.recorder.run_id is not None:
                self.store.set_status(self.recorder.run_id, "error")
        finally:
            if self.recorder is not None:
                self.recorder.release()


def _probe_problem(spec, name: str):
    """The SpecError a probe raises on the untrained model (two inputs), or None when it applies."""
    from explorer.probes import validation_tensors

    model, data = explorer.build(spec, device="cpu")
    try:
        explorer.probe(model, data.x_val[:2], name, **validation_tensors(name, data, 2))
    except explorer.SpecError as error:
        return error
    return None


class SessionLimit(Exception):
    """A session asked for more active jobs than `max_per_session` allows."""


class JobQueue:
    """Runs jobs in threads, at most `max_jobs` at once, the rest in first-come order.

    `alive(session_id)` says whether a browser session is still there; with it, a reaper thread (every
    `reap_every` seconds; None: only when `reap` is called) stops the jobs of a session gone for `grace_s`
    seconds. Without `alive` (scripts, most tests) jobs are not tied to sessions' lives.
    """

    def __init__(self, max_jobs: int, store: RunStore | None = None, max_per_session: int | None = None,
                 alive: Callable[[str], bool] | None = None, grace_s: float = 60.0, reap_every: float | None = 5.0):
        if max_jobs < 1:
            raise ValueError(f"max_jobs must be at least 1, got {max_jobs}")
        self.max_jobs, self.store = max_jobs, store
        self.max_per_session, self.grace_s = max_per_session, grace_s
        self.threads = threads_per_job(max_jobs)
        self._cond = threading.Condition()
        self._waiting: deque = deque()  # Jobs and slot() tickets, first come first served
        self._running = 0
        self._jobs: list[Job] = []  # every job submitted and not yet forgotten (for the operator and the reaper)
        self._alive = alive
        self._gone_since: dict[str, float] = {}
        self.reap_every = reap_every
        if alive is not None and reap_every is not None:
            threading.Thread(target=self._reap_forever, name="explorer-job-reaper", daemon=True).start()

    def active_jobs(self, session: str | None = None) -> list[Job]:
        """Jobs still queued, running or paused (of one session, or all)."""
        with self._cond:
            jobs = list(self._jobs)
        return [job for job in jobs if job.view().active and (session is None or job.session == session)]

    def jobs(self) -> list[Job]:
        """Every job the queue knows: the active ones and those ended in the last hour, oldest first."""
        with self._cond:
            return list(self._jobs)

    def submit(self, spec, label: str, probes: Mapping[str, dict] | None = None, probe_every: int = 50,
               record: bool = True, optional_probes: tuple[str, ...] = (), session: str | None = None) -> Job:
        """Start (or queue) a run of `spec`; with `record` it is saved in the queue's run store. SessionLimit
        when `session` already has `max_per_session` active jobs."""
        if session is not None and self.max_per_session is not None \
                and len(self.active_jobs(session)) >= self.max_per_session:
            raise SessionLimit(f"this session already has {self.max_per_session} run(s) training or waiting, the "
                               "most one session may have on this server (EXPLORER_MAX_JOBS_PER_SESSION); wait for "
                               "one to end or stop it")
        store = (self.store or explorer.RunStore()) if record else None
        job = Job(spec, label, probes or {}, probe_every, store, optional_probes, session)
        job._queue, job.threads = self, self.threads
        with self._cond:
            self._waiting.append(job)
            self._jobs.append(job)
        threading.Thread(target=self._run, args=(job,), name=f"explorer-job-{job.id}", daemon=True).start()
        return job

    @contextlib.contextmanager
    def slot(self):
        """Hold one of the server's training slots for work done in the calling thread (e.g. a paper's
        claim): waits in the same first-come queue as training jobs."""
        ticket = object()
        with self._cond:
            self._waiting.append(ticket)
            while not (self._waiting[0] is ticket and self._running < self.max_jobs):
                self._cond.wait(0.2)
            self._waiting.popleft()
            self._running += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

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
            self._jobs = [job for job in self._jobs if job.view().active or now - job.ended_at < 3600]
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
            return self._running, len(self._waiting)

    def _run(self, job: Job) -> None:
        with self._cond:
            while not (self._waiting[0] is job and self._running < self.max_jobs) and not job._stop.is_set():
                self._cond.wait(0.2)
            self._waiting.remove(job)
            self._cond.notify_all()
            if job._stop.is_set():
                with job._lock:
                    job._status = "cancelled"
                job.ended_at = time.monotonic()
                job.done.set()
                return
            self._running += 1
        try:
            job._train()
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()
            job.ended_at = time.monotonic()
            job.done.set()


def threads_per_job(max_jobs: int, cores: int | None = None) -> int:
    """Intra-op threads for each training job: the cores, less one for the server and the browser, shared
    by the jobs that may run at once (at least 1). More threads than free cores is far worse than fewer:
    on a 2-core laptop with one other busy process, 2 threads trained the tau MLP-ResNet at 3.5 steps/s
    and 1 thread at 270 (an OpenMP barrier waits for the descheduled thread)."""
    cores = cores or os.cpu_count() or 1
    return max(1, (cores - 1) // max_jobs)


def _copy_state(model) -> dict:
    return {key: value.detach().to("cpu", copy=True) for key, value in model.state_dict().items()}


def wait(job: Job, timeout: float = 60.0) -> JobView:
    """Block until the job ends (for tests and scripts); returns its final view."""
    if not job.done.wait(timeout):
        raise TimeoutError(f"job {job.id} still {job.view().status} after {timeout} s")
    return job.view()


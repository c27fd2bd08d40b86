"""Training jobs, paper claims and probes, run in worker processes and shared by every browser session.

One `JobQueue` per server (the app keeps it in `st.cache_resource`) has `max_jobs` slots, the threads of a
ThreadPoolExecutor: a job in a slot runs in a pre-started worker process (explorer_app.workers), so training
never holds the server's interpreter, and the slot's thread relays the worker's messages to the job; later
jobs wait in line in submission order, at most `max_queued` of them. Jobs belong to the browser session that
submitted them: a browser (all its tabs) may have at most `max_per_session` active jobs and a network address (all
its browsers: a new cookie is a new browser, not a new address) at most `max_per_address`; a submit past a cap is
refused (SessionLimit, naming the cap) before anything is queued, all of a batch or none (`submit_many`). The
queue's reaper stops a session's jobs `grace_s` seconds after the session ends (its tab closed), so an orphan does
not hold a slot others wait for. `jobs()` lists every job for an operator, who may stop any.

A `Job` is the server's copy of one job, one subclass per kind: a `TrainJob` (a run the worker records in
the run store itself; Pause, Step and Stop act at its logged steps, `train.log_every`), a `ClaimsJob`
(paper claims one after another, each result reported as it comes) and a `ProbeJob` (the Inside page's probes
of a trained model, one after another, each with a time limit; refused before it is queued when its memory
estimate passes EXPLORER_MAX_MODEL_MB). The queue and the pages treat them
alike: each says what its worker is to run and applies the worker's messages under its lock, and the page's
live feed (explorer_app.live_feed), or without one a fragment that reruns a few times a second, reads
`Job.view(since=n)` (only the rows after the n it has). The running jobs share the cores, rebalanced as
jobs start and end. After each job the worker lets its model and data go and gives the freed memory back to
the system; one that still holds more than `worker_idle_mb` is replaced by a fresh one.

The queue, its jobs' views and their control messages are one protocol, kept in one module;
the worker processes' side is explorer_app.workers.
"""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from explorer.runs import RunStore
from explorer.settings import worker_settings
from explorer_app.messages import escape
from explorer_app.workers import (ClaimResult, Failed, Finished, Free, Held, Logged, Note, Pause, ProbeResult, Probing,
                                  Progress, Recorded, Resume, Rewire, Rewired, RewireRefused, RunClaims, RunProbes,
                                  RunTraining, SendSnapshot, Snapshot, Step, Stop, Threads, UnknownMessage, UseThreads,
                                  WorkerDied, WorkerPool)

ACTIVE = ("queued", "starting", "running", "paused")  # a job in one of these may still change
SLOT_THREAD = "explorer-job-slot"  # the name of the slots' threads (and a number)
CANCEL_GRACE_S = 3.0  # seconds a stopped probe job's worker has to finish its probe before it is killed

# When the interpreter exits, concurrent.futures joins the executors' threads (a hook it registers with
# threading when imported, above). This hook, registered after it, runs before it: a slot relaying a job stops
# waiting for its worker, which is killed next as a daemonic child.
_EXITING = threading.Event()
threading._register_atexit(_EXITING.set)


@dataclass(frozen=True)
class JobView:
    """A consistent copy of a job's state, safe to read while the job goes on."""

    id: str
    label: str
    kind: str  # "train", "claims" or "probe"
    status: str  # queued, starting (a slot, a worker being taken), running, paused, finished, diverged, stopped, cancelled, error
    steps_done: int  # a claims job: claims done; a probe job: probes done
    total_steps: int  # a claims job: claims to run; a probe job: probes to run
    error: str | None
    queue_position: int | None  # 1 = next to start, while queued
    note: str | None = None  # e.g. a live probe left out because it does not apply to this model (markdown)
    history: list[dict[str, float]] = field(default_factory=list)  # logged rows from index `history_from` on
    history_from: int = 0  # index in the job's history of `history[0]`
    history_length: int = 0  # rows logged so far
    probes: dict[str, dict] = field(default_factory=dict)  # latest result of each live probe
    probe_step: int | None = None
    steps_per_second: float | None = None
    diverged_at: int | None = None
    diverged_loss: float | None = None  # the loss it exploded to (plots draw the divergence marker there)
    run_id: str | None = None
    results: dict = field(default_factory=dict)  # a claims job: (paper, claim id) -> the claim's row; a probe job:
    # probe -> its result ({key: numpy array})
    skipped: dict = field(default_factory=dict)  # a probe job: probe -> (field, reason) of one that does not apply
    current: str | None = None  # a claims job: the claim running now; a probe job: the probe running now
    detail: str = ""  # a claims job: where that claim stands ("run 2 of 6, ~40 s left (all: ~3 min left)")
    rewires: list[dict] = field(default_factory=list)  # a training job: {"step", "topology", "change"} per rewire
    rewire_error: str | None = None  # a training job: why its last rewire was refused (one line naming the field)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def as_run(self) -> dict[str, Any]:
        """The shape `explorer.plots.loss_curves` draws (its rewires marked on the curve)."""
        return {"label": self.label, "history": self.history, "status": self.status, "diverged_at": self.diverged_at,
                "diverged_loss": self.diverged_loss, "rewires": list(self.rewires)}


class Job:
    """One job of the queue, as the server sees it: its status, the messages its worker sent, Stop.

    A subclass says what its worker is to run (`order`), how many steps it counts (`total`), which of the
    worker's messages it takes (`_apply`, under the job's lock; the others are refused) and what its view
    adds (`_details`)."""

    kind = ""

    def __init__(self, label: str, session: str | None = None):
        self.id = uuid.uuid4().hex[:8]
        self.label = label
        self.session = session  # the browser session that submitted it (None: not tied to one)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._paused = False  # asked to hold before it started: it starts paused
        self._status = "queued"
        self._steps_done = 0
        self._error: str | None = None
        self._note: str | None = None
        self._queue: JobQueue | None = None
        self._worker = None  # the worker process running it, while it runs
        self.worker_pid: int | None = None
        self.worker_threads: int | None = None  # intra-op threads the worker trains with now (it reports them)
        self.worker_rss_mb: float | None = None  # the worker's resident memory once the job had ended (it reports it)
        self.threads = 1  # intra-op threads to train with (set by the queue, changed as other jobs start and end)
        self.done = threading.Event()
        self.ended_at = float("inf")  # time.monotonic() when it ended

    @property
    def total(self) -> int:
        raise NotImplementedError

    def order(self):
        """The message that hands this job to a worker (a workers.Run)."""
        raise NotImplementedError

    def threads_given(self, share: int, full_share: int) -> int:
        """The intra-op threads to train with when each running job's share of the cores is `share`
        (`full_share`: each one's share with every slot taken)."""
        return share

    # ---- controls (any thread) ------------------------------------------------------------------
    def _tell(self, message) -> None:
        worker = self._worker
        if worker is not None:
            worker.send(message)

    def stop(self, reason: str | None = None) -> None:
        """Stop the job at its next step (or take it out of the line); it keeps what it has done. `reason`
        (markdown) is shown with it, e.g. why an operator or the reaper stopped it."""
        with self._lock:
            if reason is not None:
                self._note = reason
            self._stop.set()
            self._tell(Stop())
        if self._queue is not None:
            self._queue._withdraw(self)

    # ---- reading --------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        with self._lock:
            return self._status

    @property
    def active(self) -> bool:
        """Queued, running or paused (cheaper than view().active: copies nothing)."""
        return self.status in ACTIVE

    def view(self, since: int = 0) -> JobView:
        """The job's state; `since`: leave out the first `since` logged rows (a reader that has them)."""
        position = self._queue.position(self) if self._queue else None
        with self._lock:
            # out of the line but not yet on a worker (one may be starting): "starting", not "queued" with no place
            status = "starting" if self._status == "queued" and self._queue is not None and position is None else self._status
            return JobView(id=self.id, label=self.label, kind=self.kind, status=status, steps_done=self._steps_done,
                           total_steps=self.total, error=self._error, queue_position=position, note=self._note,
                           **self._details(since))

    def _details(self, since: int) -> dict:
        """(Under the lock.) The view's fields of this kind of job."""
        return {}

    # ---- the worker's messages (the slot's thread) ----------------------------------------------
    def apply(self, message) -> None:
        """Take in a message of the job's worker; UnknownMessage for one this kind of job does not take."""
        with self._lock:
            self._apply(message)

    def _apply(self, message) -> None:
        match message:
            case Threads(threads=threads):
                self.worker_threads = threads
            case Failed(reason=reason):
                self._fail(reason)
            case _:
                raise UnknownMessage(f"a {self.kind} job takes no {type(message).__name__} message")

    def _settings(self) -> dict:
        """The fields of `order()` every job has: its threads and the server's settings now."""
        from explorer.data.files import allowed_roots

        roots = allowed_roots()
        return {"threads": self.threads, "env": worker_settings(),
                "data_roots": None if roots is None else [str(root) for root in roots]}

    def fail(self, reason: str) -> None:
        """The job ended on an error."""
        with self._lock:
            self._fail(reason)

    def _fail(self, reason: str) -> None:
        self._status, self._error = "error", reason

    def _cancel(self) -> None:
        """Out of the line before it ran."""
        with self._lock:
            self._status = "cancelled"
        self._end()

    def _end(self) -> None:
        self.ended_at = time.monotonic()
        self.done.set()

    def _run_in(self, worker) -> None:
        """Hand the job to `worker` and apply its messages until it is free again (or dies, or the server exits)."""
        with self._lock:
            self._worker, self.worker_pid = worker, worker.pid
            self._status = "paused" if self._paused else "running"
            worker.send(self.order())
            if self._stop.is_set():
                worker.send(Stop())
        try:
            while not isinstance(message := worker.receive(0.5), Free):
                if _EXITING.is_set():
                    raise WorkerDied("the server stopped while the job ran")
                if message is not None:
                    self.apply(message)
                if self._cut_short():
                    worker.kill()  # the pool starts a fresh worker in its place
                    return
            self.worker_rss_mb = message.rss_mb
        except WorkerDied as died:
            self.fail(str(died))
        except UnknownMessage as refused:  # the worker speaks another protocol: the pool replaces it
            worker.kill()
            self.fail(str(refused))
        finally:
            with self._lock:
                self._worker = None
                if self._status in ACTIVE:  # ended without saying how (a claims job, or stopped early)
                    self._status = "stopped" if self._stop.is_set() else "finished"
                self._ended()

    def _ended(self) -> None:
        """(Under the lock.) The worker is done with the job."""

    def _cut_short(self) -> bool:
        """(The slot's thread, between the worker's messages.) Whether to end the job now by killing its worker,
        for what a worker cannot interrupt; the job's status says why first."""
        return False


class TrainJob(Job):
    """A training run of `spec` (recorded in `store`; None: not recorded), with live `probes` every
    `probe_every` steps; `optional_probes` are tried on the untrained model first and left out (with a note)
    if they do not apply. Pause, Step and Stop act at its logged steps; `rewire` changes its design while it is
    paused (its view's `rewires` and `rewire_error` say how that went)."""

    kind = "train"

    def __init__(self, spec, label: str, probes: Mapping[str, dict], probe_every: int, store: RunStore | None,
                 optional_probes: tuple[str, ...] = (), session: str | None = None):
        super().__init__(label, session)
        self.spec, self.store = spec, store
        self.probes, self.probe_every, self.optional_probes = dict(probes), probe_every, optional_probes
        self._history: list[dict[str, float]] = []
        self._probes: dict[str, dict] = {}
        self._probe_step: int | None = None
        self._sps: float | None = None
        self._diverged_at: int | None = None
        self._diverged_loss: float | None = None
        self._run_id: str | None = None
        self._snapshot: tuple[int, dict] | None = None
        self._snapshot_ready = threading.Event()
        self._rewires: list[dict] = []
        self._rewire_error: str | None = None

    @property
    def total(self) -> int:
        return self.spec.train.steps

    @property
    def rewires(self) -> list[dict]:
        """The rewires the worker made, in order: {"step": the logged step it held, "topology": the topology
        section from the next step on, "change": what changed ("+0:6", "-1:4", "0:3*0.5")}."""
        with self._lock:
            return [dict(r) for r in self._rewires]

    @property
    def rewire_error(self) -> str | None:
        """Why the last rewire was refused (one line naming the field and the fix), None after one that worked."""
        with self._lock:
            return self._rewire_error

    @property
    def run_id(self) -> str | None:
        """The run's id in the run store, once the worker created it."""
        with self._lock:
            return self._run_id

    def order(self) -> RunTraining:
        return RunTraining(**self._settings(), spec=self.spec.to_dict(), label=self.label, probes=self.probes,
                           probe_every=self.probe_every, optional_probes=list(self.optional_probes),
                           store=str(self.store.root) if self.store is not None else None, paused=self._paused)

    def pause(self) -> None:
        """Hold the run at its next logged step (a queued run pauses at its first)."""
        with self._lock:
            if self._status in ("queued", "running"):
                self._paused = True
                self._status = "paused" if self._status == "running" else "queued"
                self._tell(Pause())

    def resume(self) -> None:
        with self._lock:
            if self._status == "paused":
                self._status, self._paused = "running", False
                self._tell(Resume())

    def step(self) -> None:
        """While paused: train up to the next logged step, then pause again."""
        with self._lock:
            if self._status == "paused":
                self._status = "running"
                self._tell(Step())

    def rewire(self, topology: Mapping[str, Any]) -> None:
        """While paused: change the run's topology to `topology` (a topology section, e.g. {"name": "shortcuts",
        "shortcuts": "0:2,0:6"}) at the step it holds, keeping its block weights; it takes effect when the run
        goes on. The worker answers soon after: a new entry in `rewires`, or `rewire_error` set."""
        with self._lock:
            if self._status != "paused":
                self._rewire_error = ("topology: the run is not paused; pause it, then change its design (a running "
                                      "model is rewired at the step it holds)")
                return
            self._rewire_error = None
            self._tell(Rewire(dict(topology)))

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
            self._tell(SendSnapshot())
        if not self._snapshot_ready.wait(timeout):
            return None
        return self._snapshot

    def _details(self, since: int) -> dict:
        since = min(max(since, 0), len(self._history))
        return {"history": self._history[since:], "history_from": since, "history_length": len(self._history),
                "probes": dict(self._probes), "probe_step": self._probe_step, "steps_per_second": self._sps,
                "diverged_at": self._diverged_at, "diverged_loss": self._diverged_loss, "run_id": self._run_id,
                "rewires": [dict(r) for r in self._rewires], "rewire_error": self._rewire_error}

    def _apply(self, message) -> None:
        match message:
            case Logged():
                self._history.append(message.row)
                if message.probes:
                    self._probes.update(message.probes)
                    self._probe_step = message.step
                self._steps_done, self._sps = message.steps_done, message.steps_per_second
                self._diverged_at, self._diverged_loss = message.diverged_at, message.diverged_loss
            case Held():  # a Step reached its logged step
                if self._status == "running":
                    self._status = "paused"
            case Finished():
                self._steps_done = message.steps_done
                self._diverged_at, self._diverged_loss = message.diverged_at, message.diverged_loss
                known = {row["step"] for row in self._history}
                self._history.extend(row for row in message.history if row["step"] not in known)
                if self._status in ACTIVE:  # an error is final
                    self._status = message.status
            case Recorded(run_id=run_id):
                self._run_id = run_id
            case Rewired(step=step, topology=topology, change=change):
                if self._rewires and self._rewires[-1]["step"] == step:  # it replaced the rewire waiting at this step
                    from explorer.topology.shortcuts import describe_change

                    self._rewires.pop()
                    before = self._rewires[-1]["topology"] if self._rewires else self.spec.topology.to_dict()
                    change = describe_change(before, topology)
                self._rewires.append({"step": step, "topology": dict(topology), "change": change})
                self._rewire_error = None
            case RewireRefused(reason=reason):
                self._rewire_error = reason
            case Note(probe=probe, reason=reason):
                self._note = (f"Training without the live probe **{escape(probe)}**: {escape(reason)}. "
                              "Choose another probe (e.g. norms or weights) for this model.")
            case Snapshot(step=step, state=state):
                import torch

                self._snapshot = (step, torch.load(io.BytesIO(state), weights_only=True))
                self._snapshot_ready.set()
            case _:
                super()._apply(message)

    def _fail(self, reason: str) -> None:
        """The job ended on an error; its stored run says so."""
        super()._fail(reason)
        if self._run_id is not None and self.store is not None:
            try:
                self.store.set_status(self._run_id, "error", final={"error": reason})
            except Exception:  # noqa: BLE001  (the message on the page matters more)
                pass

    def _ended(self) -> None:
        self._snapshot_ready.set()  # a model_state() waiting for the worker gives up


class ClaimsJob(Job):
    """Paper claims [(paper, claim id), ...] run one after another in one worker, in fast or full mode: its
    steps are claims, and each claim's result row comes as the claim ends. A claim's numbers must not depend
    on what else ran (float sums change with threads), so it always trains with the share of a full queue."""

    kind = "claims"

    def __init__(self, claims: tuple[tuple[str, str], ...], fast: bool, label: str, session: str | None = None):
        super().__init__(label, session)
        self.claims, self.fast = tuple(claims), fast
        self._results: dict = {}
        self._current: str | None = None
        self._detail = ""  # where the current claim stands, with time estimates

    @property
    def total(self) -> int:
        return len(self.claims)

    def order(self) -> RunClaims:
        return RunClaims(**self._settings(), claims=list(self.claims), fast=self.fast)

    def threads_given(self, share: int, full_share: int) -> int:
        return full_share

    def _details(self, since: int) -> dict:
        return {"results": dict(self._results), "current": self._current, "detail": self._detail}

    def _apply(self, message) -> None:
        match message:
            case Progress(done=done, claim=claim, where=where):
                self._steps_done, self._current, self._detail = done, claim, where
            case ClaimResult(paper=paper, claim=claim, row=row):
                self._results[(paper, claim)] = row
            case _:
                super()._apply(message)


class ProbeJob(Job):
    """The Inside page's probes ({name: options}, one after another) of a trained model on its first `inputs`
    validation examples, in a worker: the weights of run `run_id` in `store` (its checkpoint), or `state` (a
    state_dict of a run still training, taken at `step`). Each probe may run `seconds`; past that the worker is
    killed (a probe is one long computation: it cannot stop half-way). Stopped, the worker skips the probes left
    and takes the next job; one still inside a probe CANCEL_GRACE_S later is killed."""

    kind = "probe"

    def __init__(self, spec, probes: Mapping[str, dict], inputs: int, label: str, store: RunStore | None = None,
                 run_id: str | None = None, state: dict | None = None, step: int | None = None,
                 seconds: float = 60.0, session: str | None = None):
        from explorer import budget

        budget.check_probes(spec, dict(probes), inputs)  # SpecError before anything is queued or allocated
        super().__init__(label, session)
        self.spec, self.inputs, self.seconds = spec, inputs, seconds
        self.probes = {name: dict(options) for name, options in probes.items()}
        self.store, self.run_id, self.step = store, run_id, step
        self._state = None
        if state is not None:
            import torch

            buffer = io.BytesIO()
            torch.save(state, buffer)
            self._state = buffer.getvalue()
        self._results: dict = {}
        self._skipped: dict = {}
        self._current: str | None = None
        self._probe_step: int | None = step
        self._since = float("inf")  # time.monotonic() when the current probe started
        self._stop_seen: float | None = None  # time.monotonic() when the slot's thread first saw it stopped

    @property
    def total(self) -> int:
        return len(self.probes)

    def order(self) -> RunProbes:
        return RunProbes(**self._settings(), spec=self.spec.to_dict(), probes=self.probes, inputs=self.inputs,
                         store=str(self.store.root) if self.store is not None else None, run_id=self.run_id,
                         state=self._state, step=self.step)

    def _details(self, since: int) -> dict:
        return {"results": dict(self._results), "skipped": dict(self._skipped), "current": self._current,
                "probe_step": self._probe_step, "run_id": self.run_id}

    def _apply(self, message) -> None:
        match message:
            case Probing(done=done, probe=probe, step=step):
                self._steps_done, self._current, self._probe_step = done, probe, step
                self._since = time.monotonic()
            case ProbeResult(probe=probe, result=None, field=field_, reason=reason):
                self._skipped[probe] = (field_, reason)
            case ProbeResult(probe=probe, result=result):
                self._results[probe] = result
            case _:
                super()._apply(message)

    def _cut_short(self) -> bool:
        with self._lock:
            if self._stop.is_set():  # the worker stops before its next probe; past the grace it is killed
                now = time.monotonic()
                self._stop_seen = self._stop_seen or now
                if now - self._stop_seen <= CANCEL_GRACE_S:
                    return False
                self._status = "stopped"
                return True
            if self._current is not None and time.monotonic() - self._since > self.seconds:
                self._fail(f"the {self._current} probe ran past this server's limit of {self.seconds:g} s per probe "
                           f"(EXPLORER_PROBE_SECONDS) and was stopped; probe fewer validation inputs, or leave "
                           f"{self._current} out")
                return True
        return False


class SessionLimit(Exception):
    """A submit refused by one of the queue's caps, nothing queued: its text (one line, no user text) says which
    cap, how many jobs are held or ahead, and what to do; `setting` names the cap's variable."""

    def __init__(self, message: str, setting: str):
        super().__init__(message)
        self.setting = setting


class JobQueue:
    """Runs jobs in worker processes, at most `max_jobs` at once (its slots), the rest in first-come order.

    `pool`: the WorkerPool to run them in (default: one of `max_jobs` workers, started at the first job or
    at `warm()`); several queues may share one pool (the tests do).

    `cores`: the intra-op threads the running jobs share (default: torch's default here, as `explorer train`).

    `alive(session_id)` says whether a browser session is still there; with it, a reaper thread (every
    `reap_every` seconds; None: only when `reap` is called) stops the jobs of a session gone for `grace_s`
    seconds. Without `alive` (scripts, most tests) jobs are not tied to sessions' lives.

    `worker_idle_mb`: a worker that still holds more resident memory after a job is replaced (None: kept).

    Caps (None: none), each refusing a submit with SessionLimit: `max_per_session` active jobs of one browser
    (its tabs: `same_browser`), `max_per_address` of one network address (`same_address`; sessions with no
    address, local ones, have no such cap) and `max_queued` jobs waiting for a slot across the server.
    """

    def __init__(self, max_jobs: int, store: RunStore | None = None, max_per_session: int | None = None,
                 alive: Callable[[str], bool] | None = None, grace_s: float = 60.0, reap_every: float | None = 5.0,
                 pool: WorkerPool | None = None, cores: int | None = None, worker_idle_mb: float | None = None,
                 max_per_address: int | None = None, max_queued: int | None = None):
        if max_jobs < 1:
            raise ValueError(f"max_jobs must be at least 1, got {max_jobs}")
        self.max_jobs, self.store = max_jobs, store
        self.max_per_session, self.grace_s, self.worker_idle_mb = max_per_session, grace_s, worker_idle_mb
        self.max_per_address, self.max_queued = max_per_address, max_queued
        self.server_caps = (max_per_session, max_per_address)  # the ceiling of `limit`
        self._browsers: dict[str, str] = {}  # session -> the browser it is a tab of (same_browser)
        self._addresses: dict[str, str] = {}  # session -> the network address it connects from (same_address)
        self._lock = threading.Lock()
        self._waiting: deque[Job] = deque()  # the line, first come first served
        self._running_jobs: set[Job] = set()  # those holding a slot
        self._jobs: list[Job] = []  # every job submitted and not yet forgotten (for the operator and the reaper)
        # One task per job submitted: a slot free to run it takes the job at the head of the line then.
        self._slots = ThreadPoolExecutor(max_workers=max_jobs, thread_name_prefix=SLOT_THREAD)
        self._alive = alive
        self._gone_since: dict[str, float] = {}
        self.reap_every = reap_every
        self.pool = pool if pool is not None else WorkerPool(max_jobs)
        # A Ray actor holds one CPU of its node; local workers share this machine's cores: the jobs running
        # share them out (a lone run gets them all but one), and a claims job always gets the share of a full
        # queue (ClaimsJob.threads_given).
        self.cores = 1 if self.pool.backend == "ray" else (cores or default_threads())
        self.claim_threads = threads_per_job(max_jobs, self.cores)
        if alive is not None and reap_every is not None:
            threading.Thread(target=self._reap_forever, name="explorer-job-reaper", daemon=True).start()

    def limit(self, per_session: int | None = None, per_address: int | None = None) -> None:
        """Set the per-browser and per-address caps at run time (a class's teacher does), each at most the one the
        queue was made with (None: that one). Jobs already queued stay; the next submit meets the new caps."""
        def capped(value, server):
            return server if value is None else value if server is None else min(value, server)

        with self._lock:
            self.max_per_session = capped(per_session, self.server_caps[0])
            self.max_per_address = capped(per_address, self.server_caps[1])

    def browser_of(self, session: str) -> str:
        """The browser a session is a tab of (`same_browser`), or the session itself where none was said."""
        with self._lock:
            return self._browsers.get(session, session)

    def active_jobs(self, session: str | None = None) -> list[Job]:
        """Jobs still queued, running or paused (of one session, or all)."""
        with self._lock:
            jobs = list(self._jobs)
        return [job for job in jobs if job.active and (session is None or job.session == session)]

    def jobs(self) -> list[Job]:
        """Every job the queue knows: the active ones and those ended in the last hour, oldest first."""
        with self._lock:
            return list(self._jobs)

    def rewire(self, job_id: str, topology: Mapping[str, Any]) -> None:
        """Rewire the paused training job `job_id` to `topology` (TrainJob.rewire; its view's `rewires` and
        `rewire_error` give the worker's answer). KeyError for an id the queue does not know."""
        with self._lock:
            job = next((j for j in self._jobs if j.id == job_id), None)
        if not isinstance(job, TrainJob):
            raise KeyError(f"no training job {job_id!r} in this queue")
        job.rewire(topology)

    def submit(self, spec, label: str, probes: Mapping[str, dict] | None = None, probe_every: int = 50,
               record: bool = True, optional_probes: tuple[str, ...] = (), session: str | None = None) -> TrainJob:
        """Start (or queue) a run of `spec`; with `record` it is saved in the queue's run store. SessionLimit
        when a cap is reached (`session`'s browser or address has its share of active jobs, or the line is full)."""
        return self._enqueue(self._train_job(spec, label, probes, probe_every, record, optional_probes, session))[0]

    def submit_many(self, runs: list[Mapping[str, Any]], session: str | None = None) -> list[TrainJob]:
        """Queue runs of `session` (a Compare grid), each a dict of `submit`'s arguments ("spec" and "label" at
        least), all or none: SessionLimit, with none queued, when the caps leave fewer places than runs."""
        return self._enqueue(*[self._train_job(**run, session=session) for run in runs])

    def _train_job(self, spec, label: str, probes: Mapping[str, dict] | None = None, probe_every: int = 50,
                   record: bool = True, optional_probes: tuple[str, ...] = (), session: str | None = None) -> TrainJob:
        store = (self.store or RunStore()) if record else None
        return TrainJob(spec, label, probes or {}, probe_every, store, optional_probes, session)

    def submit_claims(self, claims: list[tuple[str, str]], fast: bool, label: str,
                      session: str | None = None) -> ClaimsJob:
        """Queue paper claims [(paper, claim id), ...] to run one after another in a worker; the view reports
        "claim i of n" and each result row as it comes."""
        if not claims:
            raise ValueError("no claims to run")
        return self._enqueue(ClaimsJob(tuple(claims), fast, label, session))[0]

    def submit_probes(self, spec, probes: Mapping[str, dict], inputs: int, label: str, run_id: str | None = None,
                      state: dict | None = None, step: int | None = None, seconds: float = 60.0,
                      session: str | None = None) -> ProbeJob:
        """Queue probes ({name: options}) of a trained model of `spec`: the weights of `run_id` in the queue's
        run store, or `state` (a state_dict at `step`). SpecError, with nothing queued, when their memory estimate
        passes EXPLORER_MAX_MODEL_MB; each probe may run `seconds`."""
        if not probes:
            raise ValueError("no probes to run")
        store = self.store or RunStore()
        return self._enqueue(ProbeJob(spec, probes, inputs, label, store, run_id, state, step, seconds, session))[0]

    def warm(self, delay: float = 0.0) -> None:
        """Start the worker processes in the background, after `delay` seconds (the app calls it after a page
        that trains has been drawn)."""
        self.pool.warm(delay)

    def same_browser(self, session: str | None, browser: str | None) -> None:
        """Say that `session` is a tab of `browser`: the per-session cap then counts every tab of that browser
        together (six tabs of one browser share one share of the queue)."""
        if session is not None and browser is not None:
            with self._lock:
                self._browsers[session] = browser

    def same_address(self, session: str | None, address: str | None) -> None:
        """Say that `session` connects from network `address`: the per-address cap counts every session from it
        together, whatever its browser or cookie (None: a local connection, not capped by address)."""
        if session is not None and address is not None:
            with self._lock:
                self._addresses[session] = address

    def _enqueue(self, *jobs: Job) -> list[Job]:
        """Queue `jobs` (all of one session), all or none: SessionLimit when a cap leaves fewer places."""
        with self._lock:
            refusal = self._refusal(jobs[0].session, len(jobs))
            if refusal is not None:
                raise refusal
            for job in jobs:
                job._queue = self
                self._waiting.append(job)
                self._jobs.append(job)
        for _ in jobs:
            self._slots.submit(self._serve)
        return list(jobs)

    def _refusal(self, session: str | None, wanted: int) -> SessionLimit | None:
        """(Under the queue's lock.) Why `wanted` more jobs of `session` may not be queued now, or None."""
        these = f"these {wanted} runs" if wanted > 1 else "another one"
        fewer = ", or launch fewer runs" if wanted > 1 else ""
        if session is not None and self.max_per_session is not None:
            owner = self._browsers.get(session, session)
            held = self._held(lambda s: self._browsers.get(s, s) == owner)
            if held + wanted > self.max_per_session:
                return SessionLimit(
                    f"this browser already has {held} run(s) training or waiting, across its tabs, and may not add "
                    f"{these}: one browser may have at most {self.max_per_session} on this server "
                    f"({self._cap_source(self.max_per_session, 0, 'EXPLORER_MAX_JOBS_PER_SESSION')}); wait for one "
                    f"to end or stop one{fewer}",
                    "EXPLORER_MAX_JOBS_PER_SESSION")
        address = self._addresses.get(session) if session is not None else None
        if address is not None and self.max_per_address is not None:
            held = self._held(lambda s: self._addresses.get(s) == address)
            if held + wanted > self.max_per_address:
                return SessionLimit(
                    f"your network address already has {held} run(s) training or waiting, from all its browsers, "
                    f"and may not add {these}: one address may have at most {self.max_per_address} on this server "
                    f"({self._cap_source(self.max_per_address, 1, 'EXPLORER_MAX_JOBS_PER_ADDRESS')}); wait for one "
                    f"to end or stop one{fewer} "
                    "(a class sharing one address: ask the lecturer to raise it)", "EXPLORER_MAX_JOBS_PER_ADDRESS")
        if self.max_queued is not None:
            running, waiting = len(self._running_jobs), len(self._waiting)
            free = self.max_jobs - running  # slots about to take a job at the head of the line
            if waiting + wanted - free > self.max_queued:
                return SessionLimit(
                    f"the server is full: {running + waiting} job(s) ahead of yours ({running} running, {waiting} "
                    f"waiting), and at most {self.max_queued} may wait (EXPLORER_MAX_QUEUED={self.max_queued}); "
                    f"try again when one ends{fewer}", "EXPLORER_MAX_QUEUED")
        return None

    def _cap_source(self, cap: int, which: int, setting: str) -> str:
        """Who set a cap, for a refusal: the server's variable, or the class's teacher below it."""
        server = self.server_caps[which]
        if server is not None and cap < server:
            return f"the class's limit, set by the teacher; the server's {setting}={server}"
        return f"{setting}={cap}"

    def _held(self, mine: Callable[[str], bool]) -> int:
        """(Under the queue's lock.) Active jobs of the sessions for which `mine(session)` holds."""
        return sum(job.active for job in self._jobs if job.session is not None and mine(job.session))

    def _serve(self) -> None:
        """A slot's turn: run the job at the head of the line (none when a stopped job left it)."""
        with self._lock:
            if not self._waiting:
                return
            job = self._waiting.popleft()
            if job._stop.is_set():
                job._cancel()
                return
            self._running_jobs.add(job)
            self._share_cores()
        try:
            try:
                worker = self.pool.take()
            except WorkerDied as died:
                job.fail(str(died))
                return
            try:
                job._run_in(worker)
                if self.worker_idle_mb is not None and (job.worker_rss_mb or 0) > self.worker_idle_mb:
                    worker.kill()  # it kept too much memory: the pool starts a fresh one in its place
            finally:
                self.pool.give_back(worker)
        finally:
            with self._lock:
                self._running_jobs.discard(job)
                self._share_cores()
            job._end()

    def _withdraw(self, job: Job) -> None:
        """A stopped job still in line leaves it: cancelled, never run."""
        with self._lock:
            if job not in self._waiting:
                return
            self._waiting.remove(job)
        job._cancel()

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
        with self._lock:  # forget ended jobs after an hour
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
        with self._lock:
            return self._waiting.index(job) + 1 if job in self._waiting else None

    def counts(self) -> tuple[int, int]:
        """(running, waiting) across the server."""
        with self._lock:
            return len(self._running_jobs), len(self._waiting)

    def _share_cores(self) -> None:
        """(Under the queue's lock.) Give each running job its share of the cores, telling the workers whose
        share changed (they switch at their next logged step). More threads than cores is far worse than fewer:
        on 2 cores beside a process busy half the time, an OpenMP barrier waits for a descheduled thread."""
        share = threads_per_job(len(self._running_jobs), self.cores)
        for job in self._running_jobs:
            threads = job.threads_given(share, self.claim_threads)
            if job.threads != threads:
                job.threads = threads
                job._tell(UseThreads(threads))


def threads_per_job(jobs: int, cores: int) -> int:
    """Intra-op threads for each of `jobs` jobs running at once on `cores`: the cores less one for the server
    and a browser on the same machine, shared out (at least 1): on a small machine showing the run in a
    browser, a lone run trains faster with one thread fewer than the cores."""
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


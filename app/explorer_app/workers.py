"""Worker processes that run the server's jobs outside its interpreter: trainings, paper claims and probes.

A `WorkerPool` keeps pre-started processes, forked from a fork server that imported torch once
(explorer.parallel.process_context: never a fork of a server whose torch threads run), so a worker is ready a
fraction of a second after it is asked for. Each worker takes the server's environment, imports explorer and
warms up once, then loops over jobs, so a click does not pay torch's import and the server's interpreter lock
is never held by a training step. One job at a time per worker; `JobQueue` (explorer_app.jobs) hands a job to
an idle worker when it gets a slot.

The two sides speak in the messages below, small frozen dataclasses, over a duplex Pipe (`send_bytes`; a
tensor never travels as shared memory). The server sends a job (`RunTraining` or `RunClaims`), then, while
it runs, `Pause`, `Resume`, `Step`, `Stop`, `SendSnapshot`, `UseThreads` and `Rewire`. A worker says `Ready`
once; then, per job, `Threads` (and again when they change), `Note`, `Recorded`, `Logged`, `Held`, `Snapshot`,
`Rewired` or `RewireRefused`,
`Finished` (a training), `Progress` and `ClaimResult` (claims) or `Probing` and `ProbeResult` (probes),
`Failed`, and last `Free` with its resident memory once the job's model and data are let go. Each side
dispatches them with `match` and refuses any other with `UnknownMessage`.

A worker process is held to a memory limit (explorer.budget.process_limit_mb: EXPLORER_MEMORY_LIMIT_MB, or
EXPLORER_MAX_MODEL_MB + EXPLORER_MAX_DATA_MB + an allowance for Python and torch), so a job that needs more than
its estimate said fails at the limit instead of exhausting the machine: the worker reports it as `Failed` with one
line naming the probe or run and the limit, then `Free(retiring=True)`, and leaves (its heap may be fragmented);
the pool starts a fresh worker in its place. A worker that dies otherwise (killed) closes its end of the pipe: the
job reading it ends as "error" with the exit code, and the pool replaces it too. The server kills a worker itself
to end what cannot be interrupted (a probe past its time limit, or one still running a grace period after Cancel)
and to replace an idle worker that kept more memory than EXPLORER_WORKER_IDLE_MB.

The local pool and the Ray actors speak one protocol, so both live here.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import functools
import gc
import io
import multiprocessing
import os
import pickle
import queue
import sys
import threading
import time
import types
from dataclasses import dataclass, fields

READY_TIMEOUT_S = 300.0  # a worker imports torch and explorer before it says ready (seconds on a busy 2-core VM)


# ---- the messages -------------------------------------------------------------------------------
# On the wire a message is its class's name and its fields as plain data (text, numbers, lists, dicts,
# bytes, numpy scalars), never a pickled class: a worker on a Ray node has explorer and torch but not this
# app, and `load` makes the receiving side's own class from the name.

class UnknownMessage(TypeError):
    """A message that is not one of the protocol's, or one the receiving side does not take."""


@dataclass(frozen=True)
class Run:
    """A job for a worker, with the server's settings at submission: the intra-op threads, the EXPLORER_*
    settings (None: unset on the server) and the folders data may be read from (None: any)."""

    threads: int
    env: dict
    data_roots: list | None


@dataclass(frozen=True)
class RunTraining(Run):
    """Train `spec` (ExperimentSpec.to_dict()) with live `probes` every `probe_every` steps, recording it in
    the run store at `store` (None: not recorded); `optional_probes` are left out (with a `Note`) when they
    do not apply to the model; `paused`: hold at the first logged step."""

    spec: dict
    label: str
    probes: dict
    probe_every: int
    optional_probes: list
    store: str | None
    paused: bool


@dataclass(frozen=True)
class RunClaims(Run):
    """Run paper claims [(paper, claim id), ...] one after another, in fast or full mode."""

    claims: list
    fast: bool


@dataclass(frozen=True)
class RunProbes(Run):
    """Probe a trained model: `probes` ({name: options}, run in this order) on the first `inputs` validation
    examples of `spec`'s data, with the weights of run `run_id` in the run store at `store` (its checkpoint),
    or `state` (a torch.save'd state_dict, of a run still training) at `step`."""

    spec: dict
    probes: dict
    inputs: int
    store: str | None
    run_id: str | None
    state: bytes | None
    step: int | None


@dataclass(frozen=True)
class Pause:
    """Hold at the next logged step."""


@dataclass(frozen=True)
class Resume:
    """Go on training."""


@dataclass(frozen=True)
class Step:
    """While held: train up to the next logged step, then hold again (and say `Held`)."""


@dataclass(frozen=True)
class Stop:
    """End the job at its next step (claims: skip the rest)."""


@dataclass(frozen=True)
class SendSnapshot:
    """Send the model's weights at the next logged step (or now, while held)."""


@dataclass(frozen=True)
class UseThreads:
    """Train with this many intra-op threads from the next logged step."""

    threads: int


@dataclass(frozen=True)
class Rewire:
    """Change the running model's topology to `topology` (a topology section) at the logged step it holds (or
    at its next one), keeping its block weights (explorer.Run.rewire); answered by `Rewired` or `RewireRefused`."""

    topology: dict


@dataclass(frozen=True)
class Exit:
    """Leave: the pool is closing."""


@dataclass(frozen=True)
class Ready:
    """The worker has imported the library and takes jobs."""

    pid: int


@dataclass(frozen=True)
class Threads:
    """The intra-op threads the worker trains with now."""

    threads: int


@dataclass(frozen=True)
class Note:
    """The optional live probe `probe` was left out: `reason` says why."""

    probe: str
    reason: str


@dataclass(frozen=True)
class Recorded:
    """The run's id in the run store."""

    run_id: str


@dataclass(frozen=True)
class Logged:
    """A logged step: its metrics row, the live probes' results when they ran, and where the run stands."""

    row: dict
    probes: dict
    step: int
    steps_done: int
    steps_per_second: float | None
    diverged_at: int | None
    diverged_loss: float | None


@dataclass(frozen=True)
class Held:
    """A `Step` reached its logged step: the run holds again."""


@dataclass(frozen=True)
class Rewired:
    """The run was rewired at logged step `step`: `topology` is its topology section from step + 1 on, `change`
    what changed in a few characters ("+0:6", "-1:4", "0:3*0.5")."""

    step: int
    topology: dict
    change: str = ""


@dataclass(frozen=True)
class RewireRefused:
    """A `Rewire` was refused: `reason` is one line naming the field and the fix; the run goes on unchanged."""

    reason: str


@dataclass(frozen=True)
class Snapshot:
    """The model's weights at `step` (a torch.save'd state_dict)."""

    step: int
    state: bytes


@dataclass(frozen=True)
class Finished:
    """A training ended (finished, diverged or stopped), with its whole history."""

    status: str
    steps_done: int
    diverged_at: int | None
    diverged_loss: float | None
    history: list


@dataclass(frozen=True)
class Progress:
    """A claims job: `done` of `total` claims ended; `claim` (None: all done) stands at `where`."""

    done: int
    total: int
    claim: str | None
    where: str


@dataclass(frozen=True)
class ClaimResult:
    """A claim's result row."""

    paper: str
    claim: str
    row: dict


@dataclass(frozen=True)
class Probing:
    """A probes job: `done` of `total` probes ended; `probe` (None: all done) runs now, on the weights of `step`."""

    done: int
    total: int
    probe: str | None
    step: int | None


@dataclass(frozen=True)
class ProbeResult:
    """One probe's result ({key: numpy array}), or, for a probe that does not apply, the field and why."""

    probe: str
    result: dict | None
    field: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Failed:
    """The job ended on an error."""

    reason: str


@dataclass(frozen=True)
class Free:
    """The job is over; the worker takes the next. `rss_mb`: its resident memory now, after letting the job's
    model and data go (None where it cannot tell). `retiring`: the job ran into the worker's memory limit and
    the worker leaves instead (the pool replaces it)."""

    rss_mb: float | None = None
    retiring: bool = False


MESSAGES = {cls.__name__: cls for cls in (
    RunTraining, RunClaims, RunProbes, Pause, Resume, Step, Stop, SendSnapshot, UseThreads, Rewire, Exit,
    Ready, Threads, Note, Recorded, Logged, Held, Rewired, RewireRefused, Snapshot, Finished, Progress, ClaimResult,
    Probing, ProbeResult, Failed, Free)}


def dump(message) -> bytes:
    """`message` as it travels: its class's name and its fields."""
    name = type(message).__name__
    if MESSAGES.get(name) is not type(message):
        raise UnknownMessage(f"{name} is not a message of the job protocol (one of {', '.join(MESSAGES)})")
    values = {field.name: getattr(message, field.name) for field in fields(message)}
    return pickle.dumps((name, values), protocol=pickle.HIGHEST_PROTOCOL)


def load(data: bytes):
    """The message `dump` made; UnknownMessage for anything else (e.g. from a worker of another version)."""
    item = pickle.loads(data)
    try:
        name, values = item
        return MESSAGES[name](**values)
    except (TypeError, ValueError, KeyError):
        what = repr(item[0]) if isinstance(item, tuple) and item else type(item).__name__
        raise UnknownMessage(f"unknown message {what}: the server and its workers run different versions?") \
            from None


# ---- the worker process -------------------------------------------------------------------------

class _Controls:
    """What the server asked of the job a worker is running, set by the worker's reader thread."""

    def __init__(self, paused: bool = False):
        self.stop = threading.Event()
        self.go = threading.Event()  # cleared while paused
        if not paused:
            self.go.set()
        self.step_once = False
        self.snapshot = threading.Event()
        self.threads: int | None = None  # intra-op threads the server asks for now (another job started or ended)
        self.rewires: collections.deque = collections.deque()  # topology sections to apply at the logged step held
        self.doing = ("the job", "try a smaller model or less data")  # what runs now, the fix if it runs out

    def apply(self, message) -> None:
        match message:
            case Pause():
                self.step_once = False
                self.go.clear()
            case Resume():
                self.step_once = False
                self.go.set()
            case Step():
                self.step_once = True
                self.go.set()
            case Stop():
                self.stop.set()
                self.go.set()
            case SendSnapshot():
                self.snapshot.set()
            case UseThreads(threads=threads):
                self.threads = max(1, int(threads))
            case Rewire(topology=topology):
                self.rewires.append(topology)
            case _:
                raise UnknownMessage(f"a worker takes no {type(message).__name__} message while a job runs")


def worker_main(conn, own_process: bool = True, env: dict | None = None) -> None:
    """The worker process: import the library once, then run the jobs the server sends until it goes.
    `own_process`: the process is this worker's alone, so it is held to the memory limit (a Ray actor's process
    is Ray's: its node's memory is Ray's to police). `env`: the server's environment when the worker started
    (a fork server's child has the fork server's)."""
    import importlib

    if env is not None:
        from explorer.parallel import adopt_environment

        adopt_environment(env)
    from explorer import budget

    limits = _limit_memory() if own_process else None  # the caps the limit in force comes from
    for module in ("torch", "explorer", "explorer.papers"):  # paid once, before Ready (papers: claims register)
        importlib.import_module(module)
    try:
        _warm_up()
    except Exception:  # noqa: BLE001  (e.g. a server cap below the default experiment: the jobs will say so)
        pass

    send_lock = threading.Lock()

    def send(message) -> None:
        data = dump(message)
        with send_lock:
            conn.send_bytes(data)

    jobs: queue.Queue = queue.Queue()
    current: list[_Controls] = [_Controls()]

    def read() -> None:  # the only thread that receives: a job for the main thread, or a control for its job
        while True:
            try:
                message = load(conn.recv_bytes())
                match message:
                    case RunTraining(paused=paused):
                        current[0] = _Controls(paused=paused)
                        jobs.put((message, current[0]))
                    case RunClaims() | RunProbes():
                        current[0] = _Controls()
                        jobs.put((message, current[0]))
                    case Exit():
                        jobs.put(None)
                        return
                    case _:
                        current[0].apply(message)
            except (EOFError, OSError):  # the server went away: stop what runs and leave
                current[0].apply(Stop())
                jobs.put(None)
                return
            except UnknownMessage as refused:  # refused; the job goes on (the server's log says why)
                print(f"explorer worker {os.getpid()}: {refused}", file=sys.stderr, flush=True)

    threading.Thread(target=read, name="explorer-worker-reader", daemon=True).start()
    send(Ready(os.getpid()))
    while (item := jobs.get()) is not None:
        job, controls = item
        retiring = False
        try:
            _prepare(job)
            if own_process:  # from the caps the server sent with the job (a misset one: the job says so)
                limits = _limit_memory() or limits
            match job:
                case RunTraining():
                    _train(job, controls, send)
                case RunClaims():
                    _claims(job, controls, send)
                case RunProbes():
                    _probe(job, controls, send)
        except Exception as error:  # noqa: BLE001  (reported on the job; the worker goes on, or leaves: out of memory)
            from explorer.training import out_of_memory

            retiring = out_of_memory(error) is not None
            if retiring and limits is not None:
                reason = budget.over_limit(*controls.doing, limits)
            else:
                reason = out_of_memory(error) or f"{type(error).__name__}: {error}"
            send(Failed(reason))
        del item, job, controls
        if retiring:  # a heap that ran into its limit may stay fragmented: a fresh worker takes the next job
            send(Free(resident_mb(), retiring=True))
            return
        send(Free(give_memory_back(_idle_limit_mb())))


def _limit_memory():
    """Hold this process to explorer.budget's limit for the EXPLORER_* caps in force; those caps (budget.Caps), or
    None where it cannot be set (not Linux, or a cap misset: the job says so when it checks its spec)."""
    from explorer import budget
    from explorer.settings import SettingError

    try:
        limits = budget.caps()
        return limits if budget.limit_memory(budget.process_limit_mb(limits)) else None
    except (SettingError, ValueError, OSError):
        return None


def _warm_up() -> None:
    """Train the default experiment (digits, an MLP, Adam) for two steps with two live probes: the first
    run in a process reads the digits, imports torch's compiler stack (the optimizers load it) and
    torch.func, seconds on a small CPU that would otherwise come between a click on Train and its first
    loss."""
    import explorer

    spec = explorer.ExperimentSpec.default().with_values({"train.steps": 2, "train.log_every": 1})
    explorer.train(spec, probes={"coefficients": {}, "jacobian": {"max_inputs": 1}}, probe_every=1)


def _prepare(job: Run) -> None:
    """The server's settings at submission: EXPLORER_* limits, the folders data may be read from, threads."""
    import torch

    from explorer.data.files import restrict_reads

    for name, value in job.env.items():  # None: unset on the server
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    restrict_reads(job.data_roots)
    torch.set_num_threads(max(1, int(job.threads)))


def _train(job: RunTraining, controls: _Controls, send) -> None:
    import torch

    import explorer
    from explorer.runs import RunStore, StoreRecorder

    send(Threads(torch.get_num_threads()))
    controls.doing = (f"the run {job.label}", "lower model.width, model.depth, train.batch_size or the data size")
    spec = explorer.ExperimentSpec.from_dict(job.spec)
    probes = dict(job.probes)
    for name, error in _probe_problems(spec, probes, job.optional_probes).items():
        probes.pop(name, None)
        send(Note(name, error.message))
    recorder = StoreRecorder(RunStore(job.store), label=job.label) if job.store else None
    sent_id = [False]

    def listen(event) -> None:
        run = event.run
        if recorder is not None and not sent_id[0] and recorder.run_id is not None:
            send(Recorded(recorder.run_id))
            sent_id[0] = True
        if event.kind == "log":
            _follow_threads(controls, send)
            sps = run.steps_done / run.wall_time if run.wall_time > 0 and run.steps_done else None
            send(Logged(row=dict(event.metrics), probes=event.probes, step=event.step, steps_done=run.steps_done,
                        steps_per_second=sps, diverged_at=run.diverged_at, diverged_loss=run.diverged_loss))
            if controls.snapshot.is_set():
                _send_snapshot(run, controls, send)
            _rewire(run, event.step, controls, send)
            if controls.step_once:
                controls.step_once = False
                controls.go.clear()
                send(Held())
            while not controls.go.wait(0.1):  # paused: hold the trainer here until Resume, Step or Stop
                _follow_threads(controls, send)
                if controls.snapshot.is_set():
                    _send_snapshot(run, controls, send)
                _rewire(run, event.step, controls, send)
        elif event.kind == "end":
            send(Finished(status=run.status, steps_done=run.steps_done, diverged_at=run.diverged_at,
                          diverged_loss=run.diverged_loss, history=[dict(row) for row in run.history]))

    listeners = [recorder, listen] if recorder is not None else [listen]
    try:
        explorer.train(spec, callbacks=listeners, stop=controls.stop, probes=probes or None,
                       probe_every=job.probe_every)
    except Exception as error:
        if recorder is not None:  # marks the run error where the store still takes the write
            recorder.fail(explorer.training.out_of_memory(error) or f"{type(error).__name__}: {error}")
        raise
    finally:
        if recorder is not None:
            recorder.release()


def _follow_threads(controls: _Controls, send) -> None:
    """Between steps: train with the threads the server asks for now (it shares the cores among the jobs
    running), and say so."""
    import torch

    wanted = controls.threads
    if wanted is not None and wanted != torch.get_num_threads():
        torch.set_num_threads(wanted)
        send(Threads(torch.get_num_threads()))


def _probe_problems(spec, probes: dict, names) -> dict:
    """{name: the SpecError probe `name` (with its options) raises on the untrained model}, for the optional
    probes that do not apply (tried on two validation inputs)."""
    import explorer
    from explorer.probes import validation_tensors

    problems = {}
    if not names:
        return problems
    model, data = explorer.build(spec, device="cpu")
    for name in names:
        try:
            explorer.probe(model, data.x_val[:2], name, **probes.get(name, {}), **validation_tensors(name, data, 2))
        except explorer.SpecError as error:
            problems[name] = error
    return problems


def _probe(job: RunProbes, controls: _Controls, send) -> None:
    """Build the run's model and data here, load its weights (the checkpoint, map_location cpu, or the state the
    server sent) and run the probes one after another, each result sent as it comes (Stop: the rest are
    skipped). Refused first, with nothing built, when the probes' memory estimate passes EXPLORER_MAX_MODEL_MB."""
    import torch

    import explorer
    from explorer import budget
    from explorer.probes import PROBES, validation_tensors
    from explorer.runs import RunStore, StoreError

    send(Threads(torch.get_num_threads()))
    controls.doing = ("loading the model and data to probe", "try a smaller model or less data")
    try:
        spec = explorer.ExperimentSpec.from_dict(job.spec, runnable=False)  # where it trained is not asked:
        budget.check_probes(spec, job.probes, job.inputs)  # it is built on this machine's CPU below
        if job.state is not None:
            step, state = job.step, torch.load(io.BytesIO(job.state), weights_only=True)
        else:
            checkpoint = RunStore(job.store).load_checkpoint(job.run_id, map_location="cpu")
            if checkpoint is None:
                send(Failed("this run has no saved weights yet (it is queued, or was recorded without a "
                            "checkpoint); train it first"))
                return
            step, state = int(checkpoint.get("step", job.step or 0)), checkpoint["model"]
            del checkpoint
        if controls.stop.is_set():  # cancelled while it started: nothing built
            return
        model, data = explorer.build(spec, device="cpu")
    except (explorer.SpecError, StoreError) as error:
        send(Failed(getattr(error, "message", None) or str(error)))
        return
    try:
        model.load_state_dict(state)
    except (RuntimeError, KeyError, TypeError) as error:
        first = (str(error).strip().splitlines() or [""])[0][:300]
        send(Failed(f"the saved weights do not fit this run's model ({type(error).__name__}: {first})"))
        return
    del state
    model.eval()
    names = list(job.probes)
    inputs = data.x_val[:job.inputs]
    for i, name in enumerate(names):
        if controls.stop.is_set():  # cancelled: the probes left are skipped
            return
        controls.doing = (f"the probe {name}", "try fewer inputs or a smaller model")
        send(Probing(i, len(names), name, step))
        extra = validation_tensors(name, data, job.inputs)
        if PROBES[name].param("max_inputs") is not None:
            extra["max_inputs"] = job.inputs
        try:
            send(ProbeResult(name, explorer.probe(model, inputs, name, **{**job.probes[name], **extra})))
        except explorer.SpecError as error:
            send(ProbeResult(name, None, error.path, error.message))
    send(Probing(len(names), len(names), None, step))


def _idle_limit_mb() -> int:
    """EXPLORER_WORKER_IDLE_MB as the server sent it with the last job (its default when unset or not valid)."""
    from explorer.settings import SETTINGS, SettingError, number

    try:
        return number("EXPLORER_WORKER_IDLE_MB")
    except SettingError:
        return SETTINGS["EXPLORER_WORKER_IDLE_MB"].default


def give_memory_back(limit_mb: float | None = None) -> float | None:
    """After a job, with its model and data unreferenced: collect them and hand the freed heap back to the
    system (glibc keeps it otherwise, malloc_trim); past `limit_mb` also drop the dataset and paper-run caches.
    The resident memory left, in MB (None where it cannot be read)."""
    gc.collect()
    _malloc_trim()
    rss = resident_mb()
    if rss is not None and limit_mb is not None and rss > limit_mb:
        from explorer.data import clear_cache
        from explorer.papers import clear_cache as clear_runs

        clear_cache()
        clear_runs()
        gc.collect()
        _malloc_trim()
        rss = resident_mb()
    return rss


def _malloc_trim() -> None:
    """glibc's malloc_trim(0): free heap pages go back to the system (a no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        pass


def resident_mb() -> float | None:
    """This process's resident memory in MB (Linux's /proc), None elsewhere."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        return None


def _rewire(run, step: int, controls: _Controls, send) -> None:
    """(In a log event.) Apply the rewires the server sent, each answered by `Rewired` or `RewireRefused`."""
    from explorer.registries import SpecError
    from explorer.topology.shortcuts import describe_change

    while controls.rewires:
        topology = controls.rewires.popleft()
        before = run.spec.topology.to_dict()
        try:
            run.rewire(topology)
        except SpecError as error:
            send(RewireRefused(str(error)))
            continue
        after = run.spec.topology.to_dict()
        send(Rewired(step=step, topology=after, change=describe_change(before, after)))


def _send_snapshot(run, controls: _Controls, send) -> None:
    import torch

    buffer = io.BytesIO()
    torch.save({key: value.detach().cpu() for key, value in run.model.state_dict().items()}, buffer)
    controls.snapshot.clear()
    send(Snapshot(run.steps_done, buffer.getvalue()))


def _claims(job: RunClaims, controls: _Controls, send) -> None:
    """Run paper claims one after another, reporting each result as it comes and, between them, where the
    current claim stands with time estimates (Stop: the rest are skipped). The claims of one job share their runs
    (the papers' run cache); the job's end drops them, so the worker keeps results only (the server keeps the
    rows), never whole runs from one job to the next. The claim's runs train here, one after another: the
    server's job limit (EXPLORER_MAX_JOBS) counts this worker as one job."""
    from explorer.papers import clear_cache
    from explorer.papers.claims import CLAIMS, run_claims

    todo = [tuple(item) for item in job.claims]
    done = 0

    def progress(state) -> None:
        controls.doing = (f"the claim {state.key}", "run it in fast mode, or with the CLI on a larger machine")
        send(Progress(done + state.index, len(todo), state.key.split("/", 1)[1], state.where()))

    def result(row) -> None:
        send(ClaimResult(row["paper"], row["id"], row))

    try:
        while done < len(todo) and not controls.stop.is_set():
            paper = todo[done][0]
            if f"{paper}/{todo[done][1]}" not in CLAIMS:
                send(Progress(done, len(todo), todo[done][1], ""))
                raise ValueError(f"no claim {paper}/{todo[done][1]}")
            ids = []  # the next claims of the same paper, in order, up to an unknown one
            for p, claim_id in todo[done:]:
                if p != paper or f"{p}/{claim_id}" not in CLAIMS:
                    break
                ids.append(claim_id)
            run_claims(paper, fast=job.fast, ids=ids, callback=result, progress=progress, stop=controls.stop)
            done += len(ids)
        if not controls.stop.is_set():
            send(Progress(len(todo), len(todo), None, ""))
    finally:
        clear_cache()


# ---- the server's side ---------------------------------------------------------------------------

# While Streamlit runs a page it sets sys.modules["__main__"] to that page's script, and a child of the "spawn" or
# "forkserver" context re-runs the parent's __main__ file before its target: a worker started from a page would
# run the whole app (and start workers of its own). Workers are started with a bare __main__ instead, one at a time.
_START_LOCK = threading.Lock()


class WorkerDied(Exception):
    """The worker process ended while it ran a job."""


def _noted(worker, message):
    """`message`, received from `worker`: a Free(retiring=True) marks the worker as leaving (not alive)."""
    if isinstance(message, Free) and message.retiring:
        worker.retiring = True
    return message


class Worker:
    """The server's handle on one worker process: send messages to it, receive its messages."""

    def __init__(self, context):
        self._conn, child = context.Pipe(duplex=True)
        self.process = context.Process(target=worker_main, args=(child, True, dict(os.environ)),
                                       name="explorer-worker", daemon=True)
        with _START_LOCK:  # a started child first runs the parent's __main__; hide it (see _START_LOCK)
            main = sys.modules.get("__main__")
            sys.modules["__main__"] = types.ModuleType("__main__")
            try:
                self.process.start()
            finally:
                sys.modules["__main__"] = main
        child.close()
        self._send_lock = threading.Lock()
        self.pid = self.process.pid
        self.retiring = False  # it said it leaves after its job (Free(retiring=True)): the pool replaces it

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        if not isinstance(self.receive(timeout), Ready):
            self.kill()
            raise WorkerDied(f"the worker process did not start in {timeout:.0f} s")

    def send(self, message) -> bool:
        """Send a message; False when the worker is gone."""
        data = dump(message)
        with self._send_lock:
            try:
                self._conn.send_bytes(data)
                return True
            except (OSError, ValueError):
                return False

    def receive(self, timeout: float):
        """The next message, None when none came within `timeout`; WorkerDied when the worker is gone."""
        try:
            if not self._conn.poll(timeout):
                if not self.process.is_alive():
                    raise WorkerDied(self.death())
                return None
            return _noted(self, load(self._conn.recv_bytes()))
        except (EOFError, OSError):
            raise WorkerDied(self.death()) from None

    def death(self) -> str:
        self.process.join(5.0)
        return f"the worker process died: exit code {self.process.exitcode}"

    @property
    def alive(self) -> bool:
        return not self.retiring and self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5.0)
        self._conn.close()


# ---- workers on a Ray cluster ---------------------------------------------------------------------

class _RayHost:
    """A Ray actor hosting one worker: `worker_main` runs in a thread of the actor's process and talks over
    a local pipe, so a job on the cluster speaks exactly the protocol of a local worker. `send` and `receive`
    relay messages as `dump` wrote them; they run in concurrency groups of their own, so a receive that waits
    for the next message never holds back a Pause."""

    def __init__(self):
        self._conn, child = multiprocessing.Pipe(duplex=True)
        threading.Thread(target=worker_main, args=(child, False), name="explorer-worker", daemon=True).start()

    def pid(self) -> int:
        return os.getpid()

    def send(self, data: bytes) -> None:
        self._conn.send_bytes(data)

    def receive(self, timeout: float) -> list[bytes]:
        """The messages waiting (at most 256), after up to `timeout` seconds for the first."""
        waiting = []
        if self._conn.poll(timeout):
            while len(waiting) < 256 and self._conn.poll(0):
                waiting.append(self._conn.recv_bytes())
        return waiting


@functools.lru_cache(maxsize=1)
def _ray_host():
    """The Ray actor class, made once (Ray is imported only when RAY_ADDRESS asks for it). This module
    travels to the cluster by value (its code is pickled, not imported there): the nodes need `explorer`
    and torch installed, not the app."""
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray.remote(num_cpus=1, concurrency_groups={"send": 1, "receive": 1})(_RayHost)


def default_backend() -> str:
    """Where the server's jobs run: "ray" when RAY_ADDRESS is set (e.g. ray://head:10001, or "local" to start a
    private one), else "local" (worker processes here)."""
    from explorer.settings import ray_address

    return "ray" if ray_address() else "local"


_RAY_LOCK = threading.Lock()


def _connect_ray(cpus: int):
    """The `ray` module, connected the sweeps' way (explorer.parallel.connect_ray), from a thread that lives as
    long as the server: a private Ray ("local") is a set of processes that die with the *thread* that started
    them (Linux's parent-death signal), and workers are started from short-lived threads."""
    from explorer.parallel import connect_ray

    with _RAY_LOCK:
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            return ray
        started, outcome = threading.Event(), []

        def own() -> None:
            try:
                outcome.append(connect_ray(cpus))
            except Exception as error:  # noqa: BLE001  (raised in the caller)
                outcome.append(error)
            started.set()
            threading.Event().wait()

        threading.Thread(target=own, name="explorer-ray", daemon=True).start()
        started.wait()
        if isinstance(outcome[0], Exception):
            raise outcome[0]
        return outcome[0]


class RayWorker:
    """The server's handle on a worker hosted by a Ray actor; the same methods as `Worker`. `cpus`: the CPUs of
    the local Ray started when RAY_ADDRESS names none."""

    def __init__(self, cpus: int = 1):
        self._ray = _connect_ray(cpus)
        self._actor = _ray_host().remote()
        self._messages: collections.deque = collections.deque()
        self._dead: str | None = None
        self.pid = None
        self.retiring = False

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        message = self.receive(timeout)
        if not isinstance(message, Ready):
            self.kill()
            raise WorkerDied(f"the Ray worker did not start in {timeout:.0f} s")
        self.pid = message.pid  # the actor's process id, on whichever node it runs

    def send(self, message) -> bool:
        """Send a message and wait until the actor has it (so messages arrive in order); False when it is
        gone."""
        if self._dead is not None:
            return False
        data = dump(message)
        try:
            call = self._actor.send.options(concurrency_group="send")
            self._ray.get(call.remote(data), timeout=60)
            return True
        except Exception as error:  # noqa: BLE001  (RayActorError, GetTimeoutError: receive() reports it)
            self._dead = f"the Ray worker died: {type(error).__name__}: {error}"
            return False

    def receive(self, timeout: float):
        """The next message, None when none came within `timeout`; WorkerDied when the actor is gone."""
        if not self._messages:
            if self._dead is not None:
                raise WorkerDied(self._dead)
            try:
                call = self._actor.receive.options(concurrency_group="receive")
                waiting = self._ray.get(call.remote(timeout), timeout=timeout + 60)
            except Exception as error:  # noqa: BLE001  (the actor died, was killed, or its node went)
                self._dead = f"the Ray worker died: {type(error).__name__}: {error}"
                raise WorkerDied(self._dead) from None
            self._messages.extend(load(data) for data in waiting)
        return _noted(self, self._messages.popleft()) if self._messages else None

    def death(self) -> str:
        return self._dead or "the Ray worker died"

    @property
    def alive(self) -> bool:
        return not self.retiring and self._dead is None

    def kill(self) -> None:
        self._dead = self._dead or "the Ray worker was stopped"
        try:
            self._ray.kill(self._actor)
        except Exception:  # noqa: BLE001  (already gone)
            pass


_SHARED: dict = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(size: int, backend: str | None = None) -> "WorkerPool":
    """The server's pool of `size` workers (one per size and backend for the life of the process): the
    server's start-up warms it before any page has run, and the pages' job queue uses the same one."""
    backend = backend or default_backend()
    with _SHARED_LOCK:
        if (size, backend) not in _SHARED:
            _SHARED[size, backend] = WorkerPool(size, backend=backend)
        return _SHARED[size, backend]


class WorkerPool:
    """Pre-started workers, reused across jobs; `size` are kept warm (a dead one is replaced). `backend`:
    "local" (processes of this machine) or "ray" (actors on the cluster at RAY_ADDRESS, `RayWorker`)."""

    def __init__(self, size: int, backend: str = "local"):
        from explorer.parallel import process_context

        if backend not in ("local", "ray"):
            raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
        self.size, self.backend = size, backend
        self._context = process_context()
        self._cond = threading.Condition()
        self._idle: list[Worker] = []
        self._busy: set[Worker] = set()
        self._starting = 0
        self._closed = False
        self._failures, self._failure = 0, ""  # workers that failed to start, and why the last one did

    def warm(self, delay: float = 0.0, count: int | None = None) -> None:
        """Start workers in the background until `count` (default `size`) exist (returns at once), the first
        after `delay` seconds. They start one after another: on a small CPU the first is ready for a click
        twice as soon as when all start at once, and a delay leaves the cores to the browser while it draws
        the page."""
        want = self.size if count is None else min(count, self.size)
        with self._cond:
            missing = max(want - len(self._idle) - len(self._busy) - self._starting, 0)
            self._starting += missing
        if missing:
            threading.Thread(target=self._start_several, args=(missing, delay), name="explorer-worker-start",
                             daemon=True).start()

    def wait_started(self, count: int = 1, timeout: float = READY_TIMEOUT_S) -> bool:
        """Block until `count` workers have started (idle or busy); False at once when one fails to start or
        the pool closes, and after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            failures = self._failures
            while len(self._idle) + len(self._busy) < min(count, self.size):
                left = deadline - time.monotonic()
                if left <= 0 or self._closed or self._failures > failures:
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    def _start_several(self, count: int, delay: float = 0.0) -> None:
        time.sleep(delay)
        for _ in range(count):
            self._start_one()

    def _start_one(self) -> None:
        worker = None
        try:
            worker = RayWorker(self.size) if self.backend == "ray" else Worker(self._context)
            worker.wait_ready()
        except Exception as error:  # noqa: BLE001  (take() says why)
            worker = None
            failure = f"a worker process could not start: {error}"
        with self._cond:
            if worker is None:
                self._failures += 1
                self._failure = failure
            self._starting -= 1
            if worker is not None and not self._closed:
                self._idle.append(worker)
            elif worker is not None:
                worker.kill()
            self._cond.notify_all()

    def take(self, timeout: float = READY_TIMEOUT_S) -> Worker:
        """An idle, live worker for one job (started now when none is idle or starting)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            failures = self._failures
            while True:
                if self._closed:
                    raise WorkerDied("the worker pool was closed")
                if self._failures > failures:
                    raise WorkerDied(self._failure)
                self._idle = [w for w in self._idle if w.alive]
                if self._idle:
                    worker = self._idle.pop(0)
                    self._busy.add(worker)
                    return worker
                if self._starting == 0:
                    self._starting += 1
                    threading.Thread(target=self._start_one, name="explorer-worker-start", daemon=True).start()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerDied(f"no worker process started in {timeout:.0f} s")
                self._cond.wait(min(left, 0.5))

    def give_back(self, worker: Worker) -> None:
        """A worker whose job ended: idle again, or (dead) replaced by a fresh one."""
        with self._cond:
            self._busy.discard(worker)
            if worker.alive and not self._closed:
                self._idle.append(worker)
                self._cond.notify_all()
                return
        worker.kill()
        if not self._closed:
            self.warm()

    def pids(self) -> list[int]:
        with self._cond:
            return [w.pid for w in [*self._idle, *self._busy] if w.alive]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers = [*self._idle, *self._busy]
            self._idle, self._busy = [], set()
        for worker in workers:
            worker.send(Exit())
            worker.kill()

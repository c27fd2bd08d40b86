"""The papers and presets registries (each paper module registers its `Paper` record, with its presets and its
diagnosis rules), the papers' run cache, and the runner that trains a claim's runs as independent jobs.

The claims and the notebooks share their runs through `cached`: one least-recently-used cache for every
paper, bounded by EXPLORER_PAPERS_CACHE_MB (default 256) of model weights, data and results, so a process
that runs every claim (a server's worker, a notebook kernel) does not keep every run it ever trained. A run
is kept without its training state (optimizer moments): claims and figures read its model, data and history.
Where EXPLORER_PAPERS_CACHE_DIR names a folder, each entry is also written there (`DiskRuns`), so another
process (a notebook's kernel after `explorer claims`, a notebook run again) reads it instead of training again.

A claim asks for all its runs at once (`train_all(specs)`, or `run_jobs(fn, items)` for work that is not a
plain training run), so its seeds and arms can train side by side: in this process one after the other (the
default), in worker processes of one thread each, on Ray, or with the seeds of an arm stacked into one model
(explorer.batched), as the enclosing `execution(...)` says:

    with execution(workers=2):               # both cores, one run per core
        runs = train_all([seeded(spec, s) for s in (0, 1, 2)])
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.cache import LRUCache, megabytes_setting
from explorer.diagnosis import Context, register_rules
from explorer.parallel import Workers
from explorer.registries import Entry, Registry, SpecError

PRESETS = Registry("presets")
RUNS = LRUCache(megabytes_setting("EXPLORER_PAPERS_CACHE_MB"))


def _perturbing() -> bool:
    from explorer.training import perturbing

    return perturbing()


def _cache_key(key: tuple) -> tuple:
    """`key` in the papers' cache; inside `explorer.training.float_perturbation` a key of its own (a perturbed run
    is another run)."""
    return (*key, "one ulp up") if _perturbing() else key


@functools.cache
def code_fingerprint() -> str:
    """A digest of the library's source files and torch's version: a run kept on disk by other code is another run."""
    import torch

    digest = hashlib.sha256(torch.__version__.encode())
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def _numpy_globals() -> tuple:
    """What weights_only needs besides tensors to read numpy arrays of numbers (a probe's results hold them):
    numpy's array constructor, the array and dtype classes, and the numeric dtypes. An array of objects still
    needs what its objects name, and is refused."""
    import numpy as np

    numeric = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
               np.float16, np.float32, np.float64, np.complex64, np.complex128)
    return (np.zeros(0).__reduce__()[0], np.ndarray, np.dtype, *(type(np.dtype(kind)) for kind in numeric))


class DiskRuns:
    """The papers' cache entries kept as files in EXPLORER_PAPERS_CACHE_DIR/runs-<code_fingerprint()>/, one file per
    key (torch.save; read with weights_only, so a file can hold tensors, numeric numpy arrays and plain containers
    but no code), so other processes reuse them; the folders of other fingerprints are removed at the first write, and
    past EXPLORER_PAPERS_CACHE_DIR_MB the entries read least recently go first. Reading and writing are best
    effort: an entry that cannot be saved or read that way is trained again, never an error."""

    @staticmethod
    def folder() -> Path | None:
        from explorer.settings import papers_cache_dir

        root = papers_cache_dir()
        return None if root is None else root / f"runs-{code_fingerprint()}"

    @staticmethod
    def _path(folder: Path, key: tuple) -> Path:
        return folder / (hashlib.sha256(repr(key).encode()).hexdigest() + ".pt")

    @classmethod
    def get(cls, key: tuple) -> Any:
        folder = cls.folder()
        if folder is None:
            return None
        import torch

        path = cls._path(folder, key)
        try:
            with torch.serialization.safe_globals(_numpy_globals()):  # reading runs no code
                stored = torch.load(path, weights_only=True)
            if stored["key"] != repr(key):
                return None
            os.utime(path)  # read now: the last to be removed when the folder is full
            if stored["run"] is not None:
                from explorer.spec import ExperimentSpec

                return _unpack(ExperimentSpec.from_dict(stored["run"]), stored["value"])
            return stored["value"]
        except Exception:  # missing, partly written by a process that was killed, or holding another type
            return None

    @classmethod
    def put(cls, key: tuple, value: Any) -> None:
        folder = cls.folder()
        if folder is None:
            return
        run = None
        if hasattr(value, "_rewire"):  # an explorer Run: its spec, weights and record (the data is generated again)
            if value.rewires:
                return  # a rewired model is not the one its spec builds
            run, value = value.spec.to_dict(), _portable(value)
        try:
            import torch

            if not folder.is_dir():
                folder.mkdir(parents=True, exist_ok=True)
                for other in folder.parent.iterdir():
                    if other != folder and other.is_dir() and other.name.startswith("runs-"):
                        shutil.rmtree(other, ignore_errors=True)
            with tempfile.NamedTemporaryFile(dir=folder, suffix=".tmp", delete=False) as file:
                torch.save({"key": repr(key), "run": run, "value": value}, file)
            os.replace(file.name, cls._path(folder, key))  # whole or not at all, for a reader in another process
            cls._prune(folder)
        except Exception:
            with contextlib.suppress(Exception):
                os.unlink(file.name)

    @staticmethod
    def _prune(folder: Path) -> None:
        """Remove the entries read or written least recently until the folder holds EXPLORER_PAPERS_CACHE_DIR_MB."""
        from explorer.settings import number

        limit = number("EXPLORER_PAPERS_CACHE_DIR_MB") * 2**20
        entries = []
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                entries.append((entry.stat().st_mtime, entry.stat().st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= limit:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
            total -= size


def _kept(key: tuple) -> Any:
    """The papers' cache entry of `key` (the key already made by `_cache_key`): this process's, else the folder's."""
    value = RUNS.get(key)
    if value is None:
        value = DiskRuns.get(key)
        if value is not None:
            RUNS.put(key, value)
    return value


def _keep(key: tuple, value: Any) -> None:
    RUNS.put(key, value)
    DiskRuns.put(key, value)


def cached(key: tuple, make: Callable[[], Any]) -> Any:
    """`make()`, kept per `key` (a tuple starting with the paper's id) in the papers' bounded cache."""
    key = _cache_key(key)
    value = _kept(key)
    if value is None:
        value = make()
        if hasattr(value, "_state"):  # an explorer Run: drop the closure that holds the optimizer's state
            value._state = None
        _keep(key, value)
    return value


def clear_cache() -> None:
    """Drop every run the papers' cache keeps in this process (a server's worker does after each claims job: the
    server keeps the claims' result rows, and the runs behind them would only hold the worker's memory); the
    folder of EXPLORER_PAPERS_CACHE_DIR is left as it is."""
    RUNS.clear()


@dataclass(frozen=True)
class Paper:
    """One paper, declared once, in its own module (explorer/papers/<id>.py): what the Papers page says of it,
    the notebook that walks through it and its presets. Its claims register themselves under `id`
    (explorer.papers.claims); the command line, the app and the tests read the rest from here."""

    id: str  # `--paper` on the command line; the paper of its presets and claims
    tab: str  # its short name: the Papers page's tab, and ?paper= in the app's URL
    title: str
    summary: str  # what it says, in plain language (markdown)
    equations: tuple[tuple[str, str], ...]  # the equations its claims test: (what it says (markdown), LaTeX)
    notebook: str  # the notebook that walks through its claims, from the project folder
    presets: dict[str, tuple[str, dict]]  # its experiments at CPU scale: name -> (description, spec dict)
    # its rules for explorer.diagnose: rules(context) adds quantities and explanations (explorer.diagnosis.Context);
    # diagnosis_probes(jacobian) and diagnosis_batch_probes: the probes they run, for the memory check
    diagnosis: Callable[[Context], None] | None = None
    diagnosis_probes: Callable[[bool], dict[str, dict]] | None = None
    diagnosis_batch_probes: dict[str, dict] = field(default_factory=dict)


PAPERS: dict[str, Paper] = {}  # id -> Paper, in the order of their notebooks (explorer.papers imports them so)


def register_paper(paper: Paper) -> Paper:
    """Register `paper` and its presets (a paper module does, above its claims); returns it."""
    if paper.id in PAPERS:
        raise ValueError(f"paper {paper.id!r} is registered twice")
    PAPERS[paper.id] = paper
    if paper.diagnosis is not None:
        register_rules(paper.id, paper.diagnosis, paper.diagnosis_probes, paper.diagnosis_batch_probes)
    for name, (description, spec_dict) in paper.presets.items():
        PRESETS.register(name, description, paper=paper.id)(_loader(spec_dict))
    return paper


def presets_of(paper: str) -> dict[str, Entry]:
    """The presets of `paper` (name -> registry entry, as the paper declares them); a SpecError lists the papers."""
    if paper not in PAPERS:
        raise SpecError("paper", f"unknown paper {paper!r}; valid papers: {', '.join(PAPERS)}")
    return {name: PRESETS[name] for name in PAPERS[paper].presets}


def _loader(spec_dict):
    def load():
        from explorer.spec import ExperimentSpec

        return ExperimentSpec.from_dict(spec_dict)

    return load


def preset(name: str):
    """The ExperimentSpec registered under `name` (a SpecError lists the valid names)."""
    return PRESETS.lookup(name, "preset").factory()


# ------------------------------------------------------------------------------------------ the claims' runner


@dataclass
class Execution:
    """How a claim's runs train: on `workers` (one local worker: here, one after the other), whether the seeds of
    an arm train stacked (`batched`), and `progress(done, total)` called as runs end (for a bar and its estimate)."""

    workers: Workers = field(default_factory=lambda: Workers(1))
    batched: bool = False
    progress: Callable[[int, int], None] | None = None


_EXECUTION: contextvars.ContextVar[Execution] = contextvars.ContextVar("execution", default=Execution())


@contextlib.contextmanager
def execution(workers: int = 1, backend: str = "local", batched: bool = False,
              progress: Callable[[int, int], None] | None = None) -> Iterator[Execution]:
    """Within the block, claims train their runs with `workers` processes of one torch thread each (
    1: in this process) on `backend` ("local" or "ray"), batched or not, reporting `progress(done, total)`."""
    pool = Workers(workers, backend, threads=1)
    setting = Execution(pool, batched, progress)
    token = _EXECUTION.set(setting)
    try:
        yield setting
    finally:
        _EXECUTION.reset(token)
        pool.close()


def run_jobs(fn: Callable, items: Sequence[tuple]) -> list:
    """[fn(*item) for item in items] as independent jobs of the current execution (fn: a module-level function,
    its arguments and result picklable), in order; progress is reported as each ends."""
    setting = _EXECUTION.get()
    items = list(items)
    if _perturbing():  # the worker builds its models one ulp off too
        fn, items = _one_ulp_job, [(fn, *item) for item in items]
    done = [0]

    def ended(_index, _value):
        done[0] += 1
        if setting.progress is not None:
            setting.progress(done[0], len(items))

    return setting.workers.map(fn, items, on_done=ended)


def _one_ulp_job(fn: Callable, *args):
    """`fn(*args)` with every model built one ulp off (explorer.training.float_perturbation), in a worker."""
    from explorer.training import float_perturbation

    with float_perturbation():
        return fn(*args)


def cached_jobs(fn: Callable, items: Sequence[tuple], paper: str) -> list:
    """[fn(*item) for item in items], each kept in the papers' cache under (`paper`, fn's name, *item); those not
    cached run as independent jobs of the current execution (`run_jobs`), so a claim's seeds and arms run side
    by side. `fn` is a module-level function with picklable arguments and result."""
    wanted = {_cache_key((paper, fn.__name__, *item)): tuple(item) for item in items}
    found = {key: _kept(key) for key in wanted}
    missing = [key for key in wanted if found[key] is None]
    if missing:
        for key, value in zip(missing, run_jobs(fn, [wanted[key] for key in missing])):
            _keep(key, value)
            found[key] = value
    return [found[_cache_key((paper, fn.__name__, *item))] for item in items]


def run_key(spec, callbacks: Sequence[Callable] = ()) -> tuple:
    """The papers' cache key of `train(spec, callbacks)`: the spec itself and the callbacks' names."""
    return _cache_key(("run", spec.to_json(indent=None), tuple(f"{c.__module__}.{c.__qualname__}" for c in callbacks)))


def train_all(specs: Sequence, callbacks: Sequence[Callable] = ()) -> list:
    """`train(spec, callbacks)` for every spec, the runs cached per spec: those not in the papers' cache train as
    independent jobs of the current execution (see `execution`). Callbacks are module-level functions (they
    cross to the workers). Runs are deterministic on CPU, so where they train does not change them; batched
    members match their separate runs to float32 rounding (explorer.batched)."""
    specs = list(specs)
    callbacks = tuple(callbacks)
    keys = [run_key(spec, callbacks) for spec in specs]
    found = {key: _kept(key) for key in keys}
    missing = {key: spec for key, spec in zip(keys, specs) if found[key] is None}
    if missing:
        setting = _EXECUTION.get()
        order = list(missing)
        groups = _batched_groups([missing[k] for k in order]) if setting.batched and not callbacks else \
            [[i] for i in range(len(order))]
        portable = not setting.workers.in_process
        outcomes = run_jobs(_train_group, [([missing[order[i]].to_dict() for i in group], callbacks, portable)
                                           for group in groups])
        for group, runs in zip(groups, outcomes):
            for i, run in zip(group, runs):
                run = _unpack(missing[order[i]], run) if portable else run
                found[order[i]] = run
                _keep(order[i], run)
    return [found[key] for key in keys]


def _batched_groups(specs: list) -> list[list[int]]:
    """Indices of `specs` grouped by everything but the seed (the seeds of one arm share every shape)."""
    groups: dict[str, list[int]] = {}
    for i, spec in enumerate(specs):
        groups.setdefault(spec.with_values({"train.seed": 0}).to_json(indent=None), []).append(i)
    return list(groups.values())


_RUN_FIELDS = ("status", "history", "steps_done", "diverged_at", "diverged_loss", "wall_time", "probe_history")


def _train_group(spec_dicts: list[dict], callbacks: tuple, portable: bool) -> list:
    """A job: train the specs (stacked with explorer.batched when several share their shapes; separately when
    they cannot be stacked, e.g. BatchNorm). Portable: each run as its weights and record only (what crosses
    back from a worker; the caller rebuilds the model and the data), else the runs themselves."""
    from explorer.spec import ExperimentSpec
    from explorer.training import train

    specs = [ExperimentSpec.from_dict(d) for d in spec_dicts]
    runs = None
    if len(specs) > 1:
        from explorer.batched import train_batched

        try:
            runs = train_batched(specs)
        except SpecError:
            runs = None
    if runs is None:
        runs = [train(spec, callbacks=list(callbacks) or None) for spec in specs]
    return [_portable(run) for run in runs] if portable else runs


def _portable(run) -> dict:
    """A run as its weights and record only (what crosses back from a worker, and what DiskRuns writes)."""
    return {"weights": {k: v.detach().cpu() for k, v in run.model.state_dict().items()}, "device": run.device,
            **{name: getattr(run, name) for name in _RUN_FIELDS}}


def _unpack(spec, portable: dict):
    """The Run of a portable record: the model built from `spec` with the trained weights loaded, the data rebuilt
    (generated, cached)."""
    from explorer.training import Run, build

    model, data = build(spec)
    model.load_state_dict(portable["weights"])
    return Run(spec, model, data, portable["device"], **{name: portable[name] for name in _RUN_FIELDS})

"""The run store: every recorded training run in one embedded SQLite database, checkpoints beside it.

Layout, under `EXPLORER_HOME` (default ~/.explorer):

    runs.sqlite               runs, history rows and probe results (WAL mode)
    checkpoints/<run_id>.pt   torch.save'd state dicts, loaded back with weights_only=True
    locks/<run_id>.lock       held (flock) by the process training that run; holds its pid and host

A missing or empty runs.sqlite beside existing checkpoints is an error, never a fresh store over them;
`check_store` (`explorer runs check`) says what is in a store and what is wrong with it. A run whose row does
not decode (its JSON damaged) is skipped by `list` and named by the listing's `notice()`; reading it alone
raises DamagedRun. A write the disk refuses (full, read-only, locked) raises StoreWriteError, and a
StoreRecorder that meets one marks its run `error` with the reason (where the store still takes that write).
Messages about the store name its folder as EXPLORER_HOME, never by its path.

A stored spec is read back checked for form only (`RunStore.spec`): a run trained on a GPU node, or on data
this machine lacks, still lists, shows and exports, and rebuilds on CPU for probing; `resume` asks whether it
can run here first.

Why SQLite: many processes (a sweep, a notebook, the CLI) can write and read at once. WAL mode lets
readers run beside a writer, `busy_timeout` makes concurrent writers wait instead of failing, and every
write is one short transaction, so a process killed mid-run leaves every committed row intact.

Nothing but checkpoints is ever pickled: specs, histories, metrics, environments and probe results are
JSON. Numpy arrays (and tensors) become {"__ndarray__": nested lists, "dtype", "shape"} with NaN and
infinities as null; non-finite metric values are stored as null too (as in `Run.summary()`).

The schema is versioned: `meta.schema_version` counts the entries of MIGRATIONS applied so far, and
opening a store applies the missing ones in order, each in its own transaction.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import socket
import sqlite3
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from explorer.registries import SpecError
from explorer.settings import home  # noqa: F401  (explorer.runs.home: where the store lives)

BUSY_TIMEOUT_S = 60.0


class UnknownRun(SpecError):
    """No run with that id (or id prefix) in the store; says where to look."""

    def __init__(self, run_id: str, message: str | None = None):
        self.run_id = run_id
        super().__init__("run", message or f"no run with id {run_id!r}; see `explorer runs list` for the recorded runs")


class StoreError(RuntimeError):
    """The store itself is unusable here (e.g. written by a newer explorer with a newer schema, or damaged)."""


class DamagedRun(StoreError):
    """One run whose stored row is not what explorer writes (JSON that does not parse, or of the wrong shape):
    the rest of the store reads on; this one can only be deleted."""

    def __init__(self, run_id: Any, what: str):
        self.run_id, self.what = str(run_id), what
        super().__init__(f"run {self.run_id[:12]} is damaged in the store ({what}); delete it with "
                         f"`explorer runs delete {self.run_id[:12]}`")


class StoreWriteError(StoreError):
    """A write the store could not make: the disk is full, the store is read-only, or another process holds it
    locked past the busy timeout."""


def write_failed(error: Exception) -> StoreWriteError:
    """The one-line error for a refused write: SQLite's or the system's reason, never a path or a traceback."""
    if isinstance(error, OSError):
        reason = error.strerror or type(error).__name__
    elif isinstance(error, sqlite3.Error):
        reason = str(error)
    else:  # torch.save's RuntimeError quotes its C++ source; its cause is the file write
        reason = "a checkpoint file could not be written"
    return StoreWriteError(f"the run store could not be written ({reason}); free disk space or make EXPLORER_HOME "
                           "writable, then see `explorer runs check`")


def store_place(root: str | os.PathLike) -> str:
    """How a message names a store's folder: the setting EXPLORER_HOME when it is that folder, never the path
    (a server's folders are not its users' business; `explorer runs check` names them for whoever owns them)."""
    try:
        same = Path(root).expanduser().resolve() == home().resolve()
    except (OSError, RuntimeError):
        same = False
    return "EXPLORER_HOME" if same else "the run store's folder"


def damaged_database(db_path: Path, error: Exception) -> StoreError:
    """The one-line error for a runs.sqlite SQLite cannot read (truncated, overwritten, not a database)."""
    return StoreError(f"the run store (runs.sqlite in {store_place(Path(db_path).parent)}) is damaged or not a run "
                      f"store ({error}); move it aside (rename that file) and run `explorer runs check` to see what "
                      "is left")


def damaged_checkpoint(path: Path, error: Exception) -> StoreError:
    """The one-line error for a checkpoint file that does not load, naming its run (its own text is not shown:
    torch's suggests unpickling it unsafely)."""
    path = Path(path)
    run_id = path.stem[:12]
    return StoreError(f"the checkpoint of run {run_id} ({path.parent.name}/{path.name} in "
                      f"{store_place(path.parent.parent)}) is damaged or not a checkpoint ({type(error).__name__}); "
                      f"move that file aside, or delete the run with `explorer runs delete {run_id}`")


# ---- schema -------------------------------------------------------------------------------------

def _v1(conn: sqlite3.Connection) -> None:
    """Version 1: runs, their history rows and their probe results."""
    conn.execute("""
        CREATE TABLE runs (
            id           TEXT PRIMARY KEY,          -- uuid4 hex
            created      REAL NOT NULL,             -- unix time
            updated      REAL NOT NULL,
            label        TEXT,
            status       TEXT NOT NULL,
            spec         TEXT NOT NULL,             -- ExperimentSpec.to_dict() as JSON
            steps_done   INTEGER NOT NULL DEFAULT 0,
            diverged_at  INTEGER,
            wall_time    REAL,
            final        TEXT,                      -- last history row (JSON)
            environment  TEXT,                      -- torch / python / device / hostname (JSON)
            parent       TEXT                       -- the run this one was resumed from
        )""")
    conn.execute("CREATE INDEX runs_created ON runs (created)")
    conn.execute("CREATE INDEX runs_status ON runs (status)")
    conn.execute("""
        CREATE TABLE history (
            run_id   TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            step     INTEGER NOT NULL,
            metrics  TEXT NOT NULL,                 -- the whole logged row (JSON), step included
            PRIMARY KEY (run_id, step)
        ) WITHOUT ROWID""")
    conn.execute("""
        CREATE TABLE probes (
            run_id   TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            step     INTEGER NOT NULL,
            name     TEXT NOT NULL,
            result   TEXT NOT NULL,                 -- {key: encoded array} (JSON)
            PRIMARY KEY (run_id, step, name)
        ) WITHOUT ROWID""")


def _v2(conn: sqlite3.Connection) -> None:
    """Version 2: the changes of design a run made while it trained (explorer.Run.rewire)."""
    conn.execute("ALTER TABLE runs ADD COLUMN rewires TEXT")  # [{"step", "topology"}] (JSON), NULL: none


# MIGRATIONS[i] takes a store from schema version i to i + 1; append, never edit, to change the schema.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2]


def schema_version() -> int:
    """The schema version this code writes (the number of migrations)."""
    return len(MIGRATIONS)


# ---- JSON encoding (never pickle) ----------------------------------------------------------------

def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def encode(obj: Any) -> Any:
    """A strict-JSON-able copy: arrays/tensors -> {"__ndarray__", "dtype", "shape"}, NaN/inf -> None."""
    import numpy as np

    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return _finite(obj)
    if isinstance(obj, Mapping):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    if type(obj).__module__.startswith("torch"):
        import torch

        if isinstance(obj, torch.Tensor):
            obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.generic):
        return encode(obj.item())
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "c":
            data = {"real": encode(obj.real)["__ndarray__"], "imag": encode(obj.imag)["__ndarray__"]}
        elif obj.dtype.kind == "f":
            data = np.where(np.isfinite(obj), obj, None).tolist()
        elif obj.dtype.kind in "biu":
            data = obj.tolist()
        else:
            data = obj.astype(str).tolist()
        return {"__ndarray__": data, "dtype": str(obj.dtype), "shape": list(obj.shape)}
    raise TypeError(f"cannot store a {type(obj).__name__} as JSON; give numbers, strings, lists, dicts or arrays")


def decode(obj: Any) -> Any:
    """The inverse of `encode`: encoded arrays come back as numpy arrays (null -> NaN in float arrays)."""
    import numpy as np

    if isinstance(obj, dict):
        if "__ndarray__" in obj and "dtype" in obj:
            dtype, shape, data = np.dtype(obj["dtype"]), tuple(obj["shape"]), obj["__ndarray__"]
            if dtype.kind == "c":
                real = decode({"__ndarray__": data["real"], "dtype": "float64", "shape": shape})
                imag = decode({"__ndarray__": data["imag"], "dtype": "float64", "shape": shape})
                return (real + 1j * imag).astype(dtype)
            if dtype.kind == "f":
                data = _nan_for_none(data)
            return np.array(data, dtype=dtype).reshape(shape)
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


def _nan_for_none(data: Any) -> Any:
    if data is None:
        return float("nan")
    return [_nan_for_none(v) for v in data] if isinstance(data, list) else data


def _dumps(obj: Any) -> str:
    return json.dumps(encode(obj), allow_nan=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def environment(device: str | None = None) -> dict[str, Any]:
    """Where a run ran: torch and python versions, device, hostname, platform."""
    import torch

    from explorer.version import __version__

    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "cuda": torch.version.cuda,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "explorer": __version__,
    }


def _check_state(state: Any, path: str = "state") -> None:
    """Raise TypeError naming the first value that `torch.load(weights_only=True)` would refuse."""
    import torch

    if isinstance(state, torch.Tensor) or state is None or isinstance(state, (bool, int, float, str, bytes)):
        return
    if isinstance(state, (torch.Size, torch.dtype, torch.device)):
        return
    if isinstance(state, Mapping):
        for key, value in state.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{path}: checkpoint keys must be strings or ints, got {type(key).__name__}")
            _check_state(value, f"{path}[{key!r}]")
        return
    if isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            _check_state(value, f"{path}[{i}]")
        return
    raise TypeError(f"{path}: a checkpoint holds only tensors, numbers, strings and lists/dicts of them, "
                    f"not {type(state).__name__} (it must load with weights_only=True)")


# ---- the store ----------------------------------------------------------------------------------

_RUN_FIELDS = ("label", "status", "steps_done", "diverged_at", "wall_time", "final", "environment", "parent", "rewires")
_JSON_FIELDS = ("final", "environment")


class Listing(list):
    """The records `RunStore.list` read, newest first, and in `skipped` a DamagedRun for each row it could not."""

    def __init__(self, records: Iterable[dict] = ()):
        super().__init__(records)
        self.skipped: list[DamagedRun] = []

    def notice(self) -> str | None:
        """One line naming the skipped runs and what to do about them, or None when none was skipped."""
        if not self.skipped:
            return None
        shown = "; ".join(f"{damaged.run_id[:12]}: {damaged.what}" for damaged in self.skipped[:3])
        more = f"; and {len(self.skipped) - 3} more" if len(self.skipped) > 3 else ""
        return (f"{len(self.skipped)} damaged run(s) not listed ({shown}{more}); `explorer runs delete ID` removes "
                "one, `explorer runs check` names them all")


class RunStore:
    """Runs, histories, probe results and checkpoints under one directory (default: `home()`).

    Safe to use from many threads and processes at once: each thread (and each forked process) opens its
    own sqlite3 connection, and each write is one short `BEGIN IMMEDIATE` transaction.
    """

    def __init__(self, path: str | os.PathLike | None = None):
        self.root = Path(path).expanduser() if path is not None else home()
        self.db_path = self.root / "runs.sqlite"
        self.checkpoint_dir = self.root / "checkpoints"
        self._local = threading.local()
        self.root.mkdir(parents=True, exist_ok=True)
        self._refuse_to_replace_lost_runs()
        try:
            self._migrate()
        except sqlite3.DatabaseError as error:
            raise damaged_database(self.db_path, error) from None

    # pickling (for multiprocessing) carries the path only; connections are reopened on use
    def __getstate__(self) -> dict:
        return {"root": self.root}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["root"])

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

    def _refuse_to_replace_lost_runs(self) -> None:
        """A missing or 0-byte runs.sqlite is created afresh only where no run was recorded before: with
        checkpoints beside it, the runs they belong to would silently vanish."""
        if self.db_path.exists() and self.db_path.stat().st_size > 0:
            return
        orphans = sorted(self.checkpoint_dir.glob("*.pt")) if self.checkpoint_dir.is_dir() else []
        if orphans:
            state = "is empty (0 bytes)" if self.db_path.exists() else "is missing"
            raise StoreError(f"the run store's runs.sqlite in {store_place(self.root)} {state}, but {len(orphans)} "
                             "checkpoint(s) in its checkpoints folder belong to runs recorded there; restore "
                             "runs.sqlite from a backup, or move the checkpoints folder aside to start a new store "
                             "(`explorer runs check` shows what is there)")

    # ---- connections and transactions -----------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (a fresh one after a fork: sqlite connections must not cross processes)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is None or local.pid != os.getpid():
            conn = sqlite3.connect(self.db_path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")  # in WAL mode: durable across process crashes
            local.conn, local.pid = conn, os.getpid()
        return conn

    def close(self) -> None:
        """Close this thread's connection (others close when their thread's store is collected)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local.conn = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _tx(self):
        """One write transaction, holding the write lock from its start (no read-to-write upgrade deadlock)."""
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:  # read-only, locked past the busy timeout
            raise write_failed(error) from None
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as error:
            if conn.in_transaction:  # SQLite has already rolled back after some failures (disk full, I/O)
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            if isinstance(error, sqlite3.OperationalError):
                raise write_failed(error) from None
            raise

    def _migrate(self) -> None:
        """Switch to WAL mode and apply the migrations this database lacks, each in its own transaction."""
        conn = self._conn()
        for attempt in range(50):
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError:  # another process holds a lock while switching
                time.sleep(0.05 * (attempt + 1))
        target = len(MIGRATIONS)
        while True:
            with self._tx() as tx:
                tx.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                version = self._version(tx)
                if version > target:
                    raise StoreError(f"the run store in {store_place(self.root)} has schema version {version}, "
                                     f"newer than this explorer understands ({target}); upgrade explorer to read it")
                if version == target:
                    return
                MIGRATIONS[version](tx)
                tx.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (str(version + 1),))

    @staticmethod
    def _version(conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    @property
    def version(self) -> int:
        """The schema version of the database on disk."""
        return self._version(self._conn())

    def integrity_check(self) -> str:
        """"ok" when SQLite finds the database file sound."""
        return self._conn().execute("PRAGMA integrity_check").fetchone()[0]

    # ---- writing --------------------------------------------------------------------------------
    def create(self, spec, label: str | None = None, *, status: str = "created",
               environment: Mapping[str, Any] | None = None, parent: str | None = None) -> str:
        """Record a new run of `spec` (an ExperimentSpec or its dict); returns its id (uuid4 hex)."""
        spec_dict = spec.to_dict() if hasattr(spec, "to_dict") else dict(spec)
        run_id, now = uuid.uuid4().hex, time.time()
        with self._tx() as tx:
            if parent is not None:
                parent = self._resolve(tx, parent)
            tx.execute("INSERT INTO runs (id, created, updated, label, status, spec, environment, parent) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (run_id, now, now, label, status, _dumps(spec_dict),
                        None if environment is None else _dumps(environment), parent))
        return run_id

    def append_history(self, run_id: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Add logged rows (each with an int "step"); a row for a step already stored replaces it."""
        params = []
        for row in rows:
            if "step" not in row:
                raise ValueError(f"history rows need a 'step', got keys {sorted(row)}")
            params.append((run_id, int(row["step"]), _dumps(dict(row))))
        if not params:
            return
        try:
            with self._tx() as tx:
                tx.executemany("INSERT OR REPLACE INTO history (run_id, step, metrics) VALUES (?, ?, ?)", params)
                tx.execute("UPDATE runs SET updated = ? WHERE id = ?", (time.time(), run_id))
        except sqlite3.IntegrityError:
            raise UnknownRun(run_id) from None

    def append_probes(self, run_id: str, step: int, name: str, result: Mapping[str, Any]) -> None:
        """Store one probe's result ({key: array}) at `step`."""
        try:
            with self._tx() as tx:
                tx.execute("INSERT OR REPLACE INTO probes (run_id, step, name, result) VALUES (?, ?, ?, ?)",
                           (run_id, int(step), name, _dumps(result)))
        except sqlite3.IntegrityError:
            raise UnknownRun(run_id) from None

    def set_status(self, run_id: str, status: str, **fields: Any) -> None:
        """Set a run's status and any of label, steps_done, diverged_at, wall_time, final, environment, parent,
        rewires (the run's `Run.rewires`: its design from each of those steps on)."""
        unknown = set(fields) - set(_RUN_FIELDS)
        if unknown:
            raise TypeError(f"set_status: unknown fields {sorted(unknown)}; valid: {', '.join(_RUN_FIELDS)}")
        values = {"status": status, **fields, "updated": time.time()}
        for key in _JSON_FIELDS:
            if key in values and values[key] is not None:
                values[key] = _dumps(values[key])
        if values.get("rewires") is not None:
            values["rewires"] = _dumps([{"step": int(r["step"]), "topology": dict(r["topology"])}
                                        for r in values["rewires"]])
        if values.get("wall_time") is not None:
            values["wall_time"] = float(values["wall_time"])
        columns = ", ".join(f"{key} = ?" for key in values)
        with self._tx() as tx:
            changed = tx.execute(f"UPDATE runs SET {columns} WHERE id = ?", (*values.values(), run_id)).rowcount
        if not changed:
            raise UnknownRun(run_id)

    def checkpoint_path(self, run_id: str) -> Path:
        return self.checkpoint_dir / f"{run_id}.pt"

    def save_checkpoint(self, run_id: str, state: Mapping[str, Any]) -> Path:
        """Write `state` (tensors, numbers, nested dicts/lists) atomically: temp file, fsync, os.replace."""
        import torch

        _check_state(state)
        if not self._exists(run_id):
            raise UnknownRun(run_id)
        final = self.checkpoint_path(run_id)
        tmp = final.with_name(f".{run_id}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                torch.save(dict(state), f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except (OSError, RuntimeError) as error:  # disk full or read-only (torch.save says so as a RuntimeError)
            raise write_failed(error) from None
        finally:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)
        with self._tx() as tx:
            tx.execute("UPDATE runs SET updated = ? WHERE id = ?", (time.time(), run_id))
        return final

    def load_checkpoint(self, run_id: str, map_location: Any = "cpu") -> dict | None:
        """The last saved checkpoint (loaded with weights_only=True), or None when the run has none."""
        import torch

        path = self.checkpoint_path(self.resolve(run_id))
        if not path.exists():
            return None
        try:
            with warnings.catch_warnings():  # torch warns about a foreign pickle before refusing it
                warnings.simplefilter("ignore")
                state = torch.load(path, map_location=map_location, weights_only=True)
        except Exception as error:  # truncated, overwritten, or a pickle that weights_only refuses
            raise damaged_checkpoint(path, error) from None
        if not isinstance(state, dict):
            raise damaged_checkpoint(path, TypeError(f"holds a {type(state).__name__}, not a dict"))
        return state

    def delete(self, run_id: str, force: bool = False) -> str:
        """Remove a run's rows and its checkpoint file; returns the full id.

        A run that a live process is training (its RunLock is held) is refused with RunBusy naming the process,
        unless `force`; the lock is held while the run is removed, so no trainer claims it meanwhile."""
        run_id = self.resolve(run_id)
        lock = RunLock(self, run_id)
        try:
            lock.acquire()
        except RunBusy as busy:
            if not force:
                raise RunBusy(run_id, busy.holder, "stop it first or pass --force (force=True in Python)") from None
            lock = None
        try:
            with self._tx() as tx:
                for table in ("probes", "history"):
                    tx.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                tx.execute("DELETE FROM runs WHERE id = ?", (run_id,))
            self.checkpoint_path(run_id).unlink(missing_ok=True)
            (self.root / "locks" / f"{run_id}.lock").unlink(missing_ok=True)
        finally:
            if lock is not None:
                lock.release()
        return run_id

    # ---- reading --------------------------------------------------------------------------------
    def _exists(self, run_id: str) -> bool:
        return self._conn().execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None

    @staticmethod
    def _resolve(conn: sqlite3.Connection, run_id: str) -> str:
        run_id = str(run_id).strip().lower()
        if not run_id:
            raise UnknownRun(run_id, "give a run id (or a unique prefix of one); see `explorer runs list`")
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
            return run_id
        matches = [r[0] for r in conn.execute("SELECT id FROM runs WHERE substr(id, 1, ?) = ? LIMIT 6",
                                              (len(run_id), run_id))]
        if len(matches) == 1:
            return matches[0]
        if matches:
            shown = ", ".join(m[:12] for m in matches[:5]) + (", ..." if len(matches) > 5 else "")
            raise UnknownRun(run_id, f"id prefix {run_id!r} matches several runs ({shown}); give more characters "
                                     "(see `explorer runs list`)")
        raise UnknownRun(run_id)

    def resolve(self, run_id: str) -> str:
        """The full id of the run whose id is or starts with `run_id` (UnknownRun if none or several)."""
        return self._resolve(self._conn(), run_id)

    @staticmethod
    def _row(row: sqlite3.Row) -> dict[str, Any]:
        """A runs row as a record, its JSON decoded; DamagedRun when it is not what `create` and `set_status` write."""
        record = dict(row)
        for key in ("id", "status"):
            if not isinstance(record[key], str):
                raise DamagedRun(record["id"], f"its {key} is not text")
        for key in ("created", "updated", "steps_done"):
            if not isinstance(record[key], (int, float)):
                raise DamagedRun(record["id"], f"its {key} is not a number")
        for key in ("spec", *_JSON_FIELDS):
            try:
                record[key] = _loads(record[key])
            except (ValueError, TypeError, RecursionError):
                raise DamagedRun(record["id"], f"its {key} is not valid JSON") from None
            if not isinstance(record[key], dict) and (key == "spec" or record[key] is not None):
                raise DamagedRun(record["id"], f"its {key} is not a JSON object")
        if not all(isinstance(section, dict) for section in record["spec"].values()):
            raise DamagedRun(record["id"], "its spec has a section that is not a JSON object")
        try:
            record["rewires"] = _loads(record.get("rewires")) or []
        except (ValueError, TypeError, RecursionError):
            raise DamagedRun(record["id"], "its rewires are not valid JSON") from None
        if not isinstance(record["rewires"], list) or not all(
                isinstance(r, dict) and isinstance(r.get("step"), int) and isinstance(r.get("topology"), dict)
                for r in record["rewires"]):
            raise DamagedRun(record["id"], "its rewires are not a list of {step, topology}")
        return record

    @staticmethod
    def _rows(run_id: str, what: str, rows: Iterable[tuple]) -> list:
        """Decode the JSON in the last column of each (key..., text) row of one run's history or probes."""
        decoded = []
        for *key, text in rows:
            try:
                decoded.append((*key, json.loads(text)))
            except (ValueError, TypeError, RecursionError):
                raise DamagedRun(run_id, f"its {what} at step {key[0]} is not valid JSON") from None
        return decoded

    def get(self, run_id: str, arrays: bool = True) -> dict[str, Any]:
        """Everything about one run: its fields, spec (dict), environment, history rows and probe results.

        `spec` is the design the run started with; `rewires` lists the changes it made while it trained
        ({"step": N, "topology": the topology section from step N + 1 on}, in order; [] for most runs).

        Probe results come back as numpy arrays, or as their JSON encoding with `arrays=False`.
        Reads happen in one transaction, so the record is a consistent snapshot.
        """
        conn = self._conn()
        conn.row_factory = sqlite3.Row
        try:
            conn.execute("BEGIN")
            try:
                run_id = self._resolve(conn, run_id)
                record = self._row(conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone())
                record["history"] = [metrics for _, metrics in self._rows(run_id, "history row", conn.execute(
                    "SELECT step, metrics FROM history WHERE run_id = ? ORDER BY step", (run_id,)))]
                probes = [{"step": step, "name": name, "result": result} for step, name, result in self._rows(
                    run_id, "probe result", conn.execute(
                        "SELECT step, name, result FROM probes WHERE run_id = ? ORDER BY step, name", (run_id,)))]
            finally:
                conn.execute("COMMIT")
        finally:
            conn.row_factory = None
        record["probes"] = decode(probes) if arrays else probes
        path = self.checkpoint_path(run_id)
        record["checkpoint"] = str(path) if path.exists() else None
        return record

    def spec(self, run_id: str):
        """The run's ExperimentSpec, rebuilt from the stored dict and checked for form only: a run trained with
        train.device=cuda, or on data this machine lacks, still opens. `spec.check_runnable(device)` says whether
        it can be built here (SpecError, one line); an entry not registered in this process is a SpecError here."""
        from explorer.spec import ExperimentSpec

        return ExperimentSpec.from_dict(self.get(run_id, arrays=False)["spec"], runnable=False)

    def list(self, status: str | None = None, limit: int | None = None, label: str | None = None) -> Listing:
        """Runs newest first, without histories (each with `history_rows`, its number of history rows).

        A damaged row is skipped (it still counts towards `limit`); the listing's `notice()` names it."""
        where, params = [], []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if label is not None:
            where.append("label = ?")
            params.append(label)
        sql = ("SELECT runs.*, (SELECT count(*) FROM history WHERE history.run_id = runs.id) AS history_rows "
               "FROM runs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY created DESC, rowid DESC")
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        conn = self._conn()
        conn.row_factory = sqlite3.Row
        listing = Listing()
        try:
            for row in conn.execute(sql, params):
                try:
                    listing.append(self._row(row))
                except DamagedRun as damaged:
                    listing.skipped.append(damaged)
        finally:
            conn.row_factory = None
        return listing

    # ---- export ---------------------------------------------------------------------------------
    def export(self, run_id: str, path: str | os.PathLike) -> Path:
        """Write a run to `.json` (everything, arrays encoded as in the store) or `.csv` (the history table:
        one row per logged step, columns step then every metric name in first-seen order)."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".json", ".csv"):
            raise SpecError("PATH", f"cannot export to {path.name!r}; give a file ending in .json or .csv")
        record = self.get(run_id, arrays=False)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w", newline="") as f:
                if suffix == ".json":
                    json.dump(record, f, indent=2, allow_nan=False)
                    f.write("\n")
                else:
                    columns = ["step"]
                    for row in record["history"]:
                        columns += [key for key in row if key not in columns]
                    writer = csv.DictWriter(f, fieldnames=columns, restval="")
                    writer.writeheader()
                    for row in record["history"]:
                        writer.writerow({k: "" if v is None else v for k, v in row.items()})
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path


def check_store(root: str | os.PathLike | None = None) -> tuple[list[str], list[str]]:
    """(facts, problems) about the store under `root` (default EXPLORER_HOME), read without changing it:
    whether runs.sqlite is there, sound and of a known schema, how many runs it holds, runs whose rows are
    damaged, checkpoints that belong to no run or do not load, and runs marked running that no process is
    training (with how to resume them where a checkpoint can)."""
    import torch

    root = Path(root).expanduser() if root is not None else home()
    db, checkpoints = root / "runs.sqlite", root / "checkpoints"
    facts, problems = [f"store       {root}"], []
    files = sorted(checkpoints.glob("*.pt")) if checkpoints.is_dir() else []
    ids: set[str] | None = None  # None: the database could not be read
    running: list[str] = []
    damaged: list[DamagedRun] = []
    if not db.exists() or db.stat().st_size == 0:
        state = "missing" if not db.exists() else "empty (0 bytes)"
        (problems if files else facts).append(f"{db} is {state}" + (f", but {len(files)} checkpoint(s) are in "
                                              f"{checkpoints}: restore runs.sqlite from a backup" if files else ""))
    else:
        try:
            conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
            try:
                verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
                version = RunStore._version(conn)
                ids = {row[0] for row in conn.execute("SELECT id FROM runs")}
                damaged = _damaged_runs(conn)
                running = [row[0] for row in conn.execute("SELECT id FROM runs WHERE status = 'running'")
                           if row[0] not in {d.run_id for d in damaged}]
            finally:
                conn.close()
        except sqlite3.DatabaseError as error:
            problems.append(str(damaged_database(db, error)))
        else:
            facts.append(f"database    {db}: {len(ids)} run(s), schema version {version}")
            if verdict != "ok":
                problems.append(f"{db} fails SQLite's integrity check ({verdict}); copy what `explorer runs list` "
                                "still shows, then move it aside")
            if version > schema_version():
                problems.append(f"{db} has schema version {version}; upgrade explorer to read it")
            problems += [str(d) for d in damaged]
    resumable: set[str] = set()
    for path in files:
        run_id = path.stem
        if ids is not None and run_id not in ids:
            problems.append(f"{path} belongs to no recorded run; move it aside or delete it")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                state = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict):
                raise TypeError(type(state).__name__)
        except Exception as error:  # this report is for whoever owns the files: it names each one by its path
            problems.append(f"{path} is damaged or not a checkpoint ({type(error).__name__}); move it aside, or "
                            f"delete run {run_id[:12]} with `explorer runs delete {run_id[:12]}`")
        else:
            if "optimizer" in state:  # what `resume` needs
                resumable.add(run_id)
    facts.append(f"checkpoints {len(files)} in {checkpoints}")
    store = _Unopened(root)
    for run_id in running:
        if RunLock(store, run_id).held_elsewhere() is None:
            facts.append(f"run {run_id[:12]} is marked running but no process trains it: " + (
                f"`explorer runs resume {run_id[:12]}` continues it" if run_id in resumable else
                f"it has no checkpoint to resume from, so it stays as recorded (`explorer runs delete {run_id[:12]}` "
                "removes it)"))
    return facts, problems


def _damaged_runs(conn: sqlite3.Connection) -> list[DamagedRun]:
    """One DamagedRun for each run whose row, history or probe results do not decode as `RunStore.get` reads them."""
    found: dict[str, DamagedRun] = {}
    conn.row_factory = sqlite3.Row
    try:
        for row in conn.execute("SELECT * FROM runs"):
            try:
                RunStore._row(row)
            except DamagedRun as damaged:
                found[damaged.run_id] = damaged
    finally:
        conn.row_factory = None
    for table, what, column in (("history", "history row", "metrics"), ("probes", "probe result", "result")):
        for run_id, step, text in conn.execute(f"SELECT run_id, step, {column} FROM {table}"):
            if str(run_id) not in found:
                try:
                    RunStore._rows(run_id, what, [(step, text)])
                except DamagedRun as damaged:
                    found[damaged.run_id] = damaged
    return list(found.values())


class _Unopened:
    """Just the `root` a RunLock needs, without opening (or creating) the database."""

    def __init__(self, root: Path):
        self.root = root


def default_store() -> RunStore:
    """The store in EXPLORER_HOME (default ~/.explorer), created on first use."""
    return RunStore()


# ---- one writer per run -------------------------------------------------------------------------

class RunLock:
    """An exclusive claim on one run while a process trains it: an flock on locks/<run_id>.lock (released by
    the system when the process ends, even by kill -9), with the holder's pid and host written inside for
    the message another writer gets."""

    def __init__(self, store: RunStore, run_id: str):
        self.path = store.root / "locks" / f"{run_id}.lock"
        self.run_id = run_id
        self._handle = None

    def acquire(self) -> RunLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise RunBusy(self.run_id, holder) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} on {socket.gethostname()}")
        handle.flush()
        self._handle = handle
        return self

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing drops the flock
            self._handle = None

    def held_elsewhere(self) -> str | None:
        """Who holds this run's lock now (pid and host), or None when nobody does."""
        try:
            self.acquire()
        except RunBusy as busy:
            return busy.holder
        self.release()
        return None


class RunBusy(SpecError):
    """A run another process (or another job) is training: a second writer is refused."""

    def __init__(self, run_id: str, holder: str, fix: str = "wait for it to end or stop it there, then resume"):
        self.holder = holder
        super().__init__("run", f"run {run_id[:8]} is being trained by {holder}; {fix}")


# ---- trainer listener ---------------------------------------------------------------------------

class StoreRecorder:
    """A `train(..., callbacks=[recorder])` listener that records the run into a RunStore as it trains.

    "start" creates the run (status running, with the environment), each "log" appends its history row
    and probe results (and a checkpoint every `checkpoint_every` steps) and any rewires of the run (its stored
    spec stays the design it started with), "end" writes the final status and
    metrics, any rows logged without an event (a stopped run's last step), and a final checkpoint: the
    full training state of `Run.checkpoint()`, from which `resume` continues. With `resume=run_id` it
    goes on writing into that run instead of creating one. `run_id` is the id of the run being recorded.
    """

    def __init__(self, store: RunStore | None = None, label: str | None = None, checkpoint_every: int | None = None,
                 parent: str | None = None, resume: str | None = None):
        if checkpoint_every is not None and checkpoint_every < 1:
            raise SpecError("checkpoint_every", f"must be a positive number of steps, got {checkpoint_every}")
        self.store = store if store is not None else default_store()
        self.label, self.checkpoint_every, self.parent = label, checkpoint_every, parent
        self.resume = resume
        self.run_id: str | None = None
        self._steps: set[int] = set()
        self._lock: RunLock | None = None

    def __call__(self, event) -> None:
        try:
            self._record(event)
        except StoreWriteError as error:
            self.fail(str(error), event.run)
            raise

    def fail(self, reason: str, run=None) -> None:
        """Mark the run `error` with `reason` (in its final metrics, beside the last ones `run` logged), where the
        store still takes the write, and let go of it. For a write that failed, or training that raised."""
        if self.run_id is not None:
            final = {**((run.final or {}) if run is not None else {}), "error": reason}
            progress = {} if run is None else {"steps_done": run.steps_done, "wall_time": run.wall_time}
            with suppress(StoreError, sqlite3.Error):
                self.store.set_status(self.run_id, "error", final=final, **progress)
        self.release()

    def _record(self, event) -> None:
        run = event.run
        if event.kind == "start":
            self._steps = {row["step"] for row in run.history}
            if self.resume is not None:
                self.run_id = self.resume
                self._lock = RunLock(self.store, self.run_id).acquire()
                self.store.set_status(self.run_id, "running", environment=environment(run.device))
            else:
                self.run_id = self.store.create(run.spec, self.label, status="running",
                                                environment=environment(run.device), parent=self.parent)
                self._lock = RunLock(self.store, self.run_id).acquire()
        elif event.kind == "log":
            self.store.append_history(self.run_id, [event.metrics])
            self._steps.add(event.step)
            for name, result in event.probes.items():
                self.store.append_probes(self.run_id, event.step, name, result)
            self.store.set_status(self.run_id, run.status, steps_done=run.steps_done, wall_time=run.wall_time,
                                  **self._rewires(run))
            if self.checkpoint_every and event.step and event.step % self.checkpoint_every == 0:
                self._checkpoint(run)
        elif event.kind == "end":
            missed = [row for row in run.history if row["step"] not in self._steps]
            self.store.append_history(self.run_id, missed)
            self._steps.update(row["step"] for row in missed)
            self._checkpoint(run)
            self.store.set_status(self.run_id, run.status, steps_done=run.steps_done, diverged_at=run.diverged_at,
                                  wall_time=run.wall_time, final=run.final, **self._rewires(run))
            self.release()

    @staticmethod
    def _rewires(run) -> dict[str, Any]:
        """The run's rewires as a set_status field, where it has any."""
        rewires = getattr(run, "rewires", None)
        return {"rewires": rewires} if rewires else {}

    def release(self) -> None:
        """Let another process write into this run (done at "end"; call it when training raised)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _checkpoint(self, run) -> None:
        self.store.save_checkpoint(self.run_id, run.checkpoint())


RESUMABLE = ("running", "stopped")


def resume(run_id: str, store: RunStore | None = None, callbacks=None, stop=None, checkpoint_every: int | None = None):
    """Continue a stopped or interrupted run from its last checkpoint, recording into the same run.

    Its history goes on where the checkpoint left it; on CPU the result equals a run that never stopped.
    A run killed mid-way resumes from its last periodic checkpoint (record with `checkpoint_every`).
    """
    from explorer.training import CheckpointMismatch, train

    store = store if store is not None else default_store()
    run_id = store.resolve(run_id)
    record = store.get(run_id, arrays=False)
    holder = RunLock(store, run_id).held_elsewhere()
    if holder is not None:
        raise RunBusy(run_id, holder)
    if record["status"] not in RESUMABLE:
        raise SpecError("run", f"run {run_id[:8]} is {record['status']}; only a stopped or interrupted (running) run "
                               "can resume; start a new run to train further")
    state = store.load_checkpoint(run_id)
    if state is None or "optimizer" not in state:
        raise SpecError("run", f"run {run_id[:8]} has no training checkpoint to resume from; record runs with "
                               "StoreRecorder (checkpoint_every=N for runs that may be killed)")
    spec = store.spec(run_id)
    try:
        spec.check_runnable()
    except SpecError as error:
        if error.path != "train.device":
            raise
        raise SpecError("train.device", f"run {run_id[:8]} trains with train.device={spec.train.device}, and CUDA is "
                                         "not available on this machine; resume it on a machine with CUDA, or train a "
                                         "new run from its spec with train.device=cpu or auto") from None
    recorder = StoreRecorder(store, checkpoint_every=checkpoint_every, resume=run_id)
    try:
        return train(spec, callbacks=[recorder, *(callbacks or [])], stop=stop, resume_from=state)
    except CheckpointMismatch as error:
        raise damaged_checkpoint(store.checkpoint_path(run_id), error) from None
    finally:
        recorder.release()

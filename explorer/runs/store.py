"""The store itself: the SQLite schema and its migrations (`MIGRATIONS`, `schema_version`) and `RunStore`,
the queries that create, read, update, export and delete runs, their history rows, probe results and
checkpoints; `default_store` opens the one in EXPLORER_HOME."""

from __future__ import annotations

import csv
import json
import os
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
from explorer.runs.encoding import _check_state, decode, _dumps, _loads
from explorer.runs.errors import (
    DamagedRun, StoreError, UnknownRun, damaged_checkpoint, damaged_database, store_place, write_failed,
)
from explorer.runs.lock import RunBusy, RunLock
from explorer.settings import home

BUSY_TIMEOUT_S = 60.0


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



def default_store() -> RunStore:
    """The store in EXPLORER_HOME (default ~/.explorer), created on first use."""
    return RunStore()

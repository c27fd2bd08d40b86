"""`check_store` (`explorer runs check`): what a store holds and what is wrong with it, read without opening
it for writing: the database's soundness and schema, damaged runs, stray or unreadable checkpoints, and runs
marked running that no process trains."""

from __future__ import annotations

import os
import sqlite3
import warnings
from pathlib import Path

from explorer.runs.errors import DamagedRun, damaged_database
from explorer.runs.lock import RunLock, _Unopened
from explorer.runs.store import BUSY_TIMEOUT_S, RunStore, schema_version
from explorer.settings import home


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

"""The run store's errors, each one line naming what is wrong and what to do: no such run (`UnknownRun`), a
store unusable here (`StoreError`), one damaged run (`DamagedRun`), a write the disk refused
(`StoreWriteError`, made by `write_failed`), and the messages for a damaged database or checkpoint. A message
names the store's folder as EXPLORER_HOME, never by its path (`store_place`)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from explorer.registries import SpecError
from explorer.settings import home


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

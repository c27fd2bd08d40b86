"""One writer per run: `RunLock`, an flock on locks/<run_id>.lock under the store's folder held by the
process training the run (the system releases it when that process ends, even by kill -9), and `RunBusy`, the
error a second writer gets, naming the holder."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from explorer.registries import SpecError


class _Unopened:
    """Just the `root` a RunLock needs, without opening (or creating) the database."""

    def __init__(self, root: Path):
        self.root = root


class RunLock:
    """An exclusive claim on one run while a process trains it: an flock on locks/<run_id>.lock (released by
    the system when the process ends, even by kill -9), with the holder's pid and host written inside for
    the message another writer gets. `store` is a RunStore, or anything with its `root` folder (`_Unopened`)."""

    def __init__(self, store: Any, run_id: str):
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

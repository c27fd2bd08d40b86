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

One module per job, every name re-exported here (import from `explorer.runs`): `errors` (the store's errors
and their messages), `encoding` (JSON for stored values, what a checkpoint may hold, the environment),
`store` (the schema, its migrations and `RunStore`'s queries), `check` (`check_store`), `lock` (`RunLock`, one
writer per run) and `recorder` (`StoreRecorder`, which writes runs as they train, and `resume`).
"""

from __future__ import annotations

from explorer.runs.check import check_store
from explorer.runs.encoding import decode, encode, environment
from explorer.runs.errors import (
    DamagedRun, StoreError, StoreWriteError, UnknownRun, damaged_checkpoint, damaged_database, store_place, write_failed,
)
from explorer.runs.lock import RunBusy, RunLock
from explorer.runs.recorder import RESUMABLE, StoreRecorder, resume
from explorer.runs.store import BUSY_TIMEOUT_S, MIGRATIONS, Listing, RunStore, default_store, schema_version
from explorer.settings import home  # explorer.runs.home: where the store lives

__all__ = [
    "BUSY_TIMEOUT_S", "MIGRATIONS", "RESUMABLE", "DamagedRun", "Listing", "RunBusy", "RunLock", "RunStore",
    "StoreError", "StoreRecorder", "StoreWriteError", "UnknownRun", "check_store", "damaged_checkpoint",
    "damaged_database", "decode", "default_store", "encode", "environment", "home", "resume", "schema_version",
    "store_place", "write_failed",
]

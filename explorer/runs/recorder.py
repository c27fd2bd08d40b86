"""Recording runs as they train: `StoreRecorder`, the `train(..., callbacks=[...])` listener that writes a
run into a RunStore event by event (with periodic checkpoints), and `resume`, which continues a stopped or
interrupted run from its last checkpoint into the same run."""

from __future__ import annotations

import sqlite3
from contextlib import suppress
from typing import Any

from explorer.registries import SpecError
from explorer.runs.encoding import environment
from explorer.runs.errors import StoreError, StoreWriteError, store_place
from explorer.runs.lock import RunBusy, RunLock
from explorer.runs.store import RunStore, default_store


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
    except CheckpointMismatch as error:  # it loads but does not fit the model and optimizer this code builds
        path = store.checkpoint_path(run_id)
        raise StoreError(f"the checkpoint of run {run_id[:12]} ({path.parent.name}/{path.name} in "
                         f"{store_place(path.parent.parent)}) cannot resume it: {error}; move that file aside and "
                         f"train a new run from its spec, or delete the run with `explorer runs delete {run_id[:12]}`"
                         ) from None
    finally:
        recorder.release()

"""Server-wide limits, set by environment variables, for serving the app to a class.

EXPLORER_MAX_JOBS      training jobs that run at once across all sessions (more wait in a queue)
EXPLORER_MAX_STEPS     most optimizer steps one run may ask for
EXPLORER_MAX_PARAMS    most parameters one model may have
EXPLORER_MAX_UPLOAD_KB largest spec JSON or text file a user may upload
EXPLORER_DATA_DIR      the only folder dataset files (MNIST, CIFAR, text) are read from (default EXPLORER_HOME/data)
EXPLORER_MAX_JOBS_PER_SESSION  active jobs one browser may have, all its tabs together (a Compare grid counts each run)
EXPLORER_MAX_JOBS_PER_ADDRESS  active jobs one network address may have, all its browsers together: a new browser,
                               cleared cookies or a forged cookie do not lift it. Local connections (127.0.0.1,
                               ::1) have no address and no such cap. Students behind one NAT or proxy share an
                               address: raise it for such a class (e.g. 4 x the students)
EXPLORER_MAX_QUEUED    jobs that may wait for a slot across the server; a submit past it is refused ("the server is
                       full"), so a newcomer is never told to wait behind an unbounded line
EXPLORER_SESSION_GRACE_S       seconds after a session ends (tab closed) before its jobs are stopped
EXPLORER_ADMIN_TOKEN   when set, /admin?token=... lists every job on the server and can stop any
EXPLORER_PROBE_SECONDS         seconds one probe of the Inside page may run before its worker is stopped
EXPLORER_WORKER_IDLE_MB        resident memory an idle worker may keep after a job; above it, it is replaced
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from explorer import budget
from explorer.data.files import restrict_reads
from explorer.nn.models import parameter_count
from explorer.registries import SpecError
from explorer.settings import SettingError, whole_number
from explorer.runs import home
from explorer_app.workers import IDLE_MB




VARIABLES = {
    "EXPLORER_MAX_JOBS": ("max_jobs", 2, "training jobs that run at once across all sessions; more wait in a queue"),
    "EXPLORER_MAX_STEPS": ("max_steps", 20_000, "most optimizer steps one run may ask for"),
    "EXPLORER_MAX_PARAMS": ("max_params", 5_000_000, "most parameters one model may have"),
    "EXPLORER_MAX_UPLOAD_KB": ("max_upload_kb", 2048, "largest spec JSON or text file a user may upload (KiB)"),
    "EXPLORER_MAX_JOBS_PER_SESSION": ("max_jobs_per_session", 4, "active jobs one browser session may have"),
    "EXPLORER_MAX_JOBS_PER_ADDRESS": ("max_jobs_per_address", 8, "active jobs one network address may have"),
    "EXPLORER_MAX_QUEUED": ("max_queued", 16, "jobs that may wait for a slot across the server"),
    "EXPLORER_SESSION_GRACE_S": ("session_grace_s", 60, "seconds a closed session's jobs go on before they stop"),
    "EXPLORER_PROBE_SECONDS": ("probe_seconds", 120, "seconds one probe of the Inside page may run"),
    "EXPLORER_WORKER_IDLE_MB": ("worker_idle_mb", IDLE_MB, "resident memory (MB) an idle worker may keep after a job"),
}


@dataclass(frozen=True)
class Limits:
    max_jobs: int
    max_steps: int
    max_params: int
    max_upload_kb: int
    max_jobs_per_session: int
    max_jobs_per_address: int
    max_queued: int
    session_grace_s: int
    probe_seconds: int
    worker_idle_mb: int

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_kb * 1024


def limits() -> Limits:
    """The limits in force now: each variable's value, or its default when unset."""
    values = {field: whole_number(variable, default, meaning) for variable, (field, default, meaning) in VARIABLES.items()}
    return Limits(**values)


def data_roots() -> list[Path]:
    """Folders the app may read dataset files from: EXPLORER_DATA_DIR (default EXPLORER_HOME/data) and uploads."""
    root = Path(os.environ.get("EXPLORER_DATA_DIR") or home() / "data").expanduser().resolve()
    return [root, (home() / "uploads").resolve()]


def restrict_data_reads() -> None:
    """Let this server read dataset files only from `data_roots()`; checked before any file is touched."""
    restrict_reads(data_roots())


def check_spec(spec, caps: Limits) -> None:
    """Raise SpecError (naming the field) when the spec asks for more than this server allows. (A data.path
    outside the data folders is refused earlier, while the spec is validated: see `restrict_data_reads`.)"""
    if spec.train.steps > caps.max_steps:
        raise SpecError("train.steps", f"this server allows at most {caps.max_steps} steps per run "
                                       f"(EXPLORER_MAX_STEPS); set train.steps to {caps.max_steps} or fewer")
    budget.check(spec)  # the memory its data and its training would take (EXPLORER_MAX_DATA_MB, _MODEL_MB)
    count = parameter_count(spec)
    if count > caps.max_params:
        raise SpecError("model.width", f"this model has {count:,} parameters, above this server's cap of "
                                       f"{caps.max_params:,} (EXPLORER_MAX_PARAMS); lower model.width or model.depth")

"""Server-wide limits, set by environment variables for serving the app to a class (each declared, with its
default and what it limits, in explorer.settings.SETTINGS; the README's table is written from there)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from explorer import budget
from explorer.data.files import restrict_reads
from explorer.nn.models import parameter_count
from explorer.registries import SpecError
from explorer.settings import data_dir, home, number


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
    return Limits(**{field.name: number("EXPLORER_" + field.name.upper()) for field in fields(Limits)})


def data_roots() -> list[Path]:
    """Folders the app may read dataset files from: EXPLORER_DATA_DIR (default EXPLORER_HOME/data) and uploads."""
    root = data_dir().resolve()
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

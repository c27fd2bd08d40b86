"""Every setting made by an environment variable, declared once (`SETTINGS`: name, default, what it sets), and
its one reader: numbers (caps, cache sizes, server limits) with `number`, the folders with `home`, `data_dir`,
`papers_cache_dir` and `plugins_folder`, the switches with `fast_mode`, `admin_token` and `ray_address`.

A number variable that is unset or blank gives its default; anything else must be a whole number in range,
or the reader raises a SettingError that names the variable, what it sets, and the fix. Read at each use, so
a server, the CLI and a notebook follow a change without restarting. The README's settings table is written
from `SETTINGS` (docs/sync.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from explorer.registries import SpecError


@dataclass(frozen=True)
class Setting:
    """One environment variable: its default (a number, or None: unset), what it sets (`sets`, short, for error
    messages), the README's line on it (`doc`, empty: `sets`), the smallest number it takes (`low`), and whether a
    server's worker processes take it from the server (`worker`)."""

    name: str
    default: int | None
    sets: str
    doc: str = ""
    shown_default: str = ""  # the default as the README shows it, where it is not the number
    low: int = 1
    worker: bool = False


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("EXPLORER_MAX_JOBS", 2, "training jobs that run at once across all sessions; more wait in a queue",
            "jobs (training runs, paper claims, Inside's probes) running at once across all users, and worker "
            "processes the server keeps; more wait in a queue, and the page shows their place in it"),
    Setting("EXPLORER_MAX_STEPS", 20_000, "most optimizer steps one run may ask for"),
    Setting("EXPLORER_MAX_PARAMS", 5_000_000, "most parameters one model may have",
            "parameters one model may have (counted before anything is built)"),
    Setting("EXPLORER_MAX_UPLOAD_KB", 2048, "largest spec JSON or text file a user may upload (KiB)",
            "size of an uploaded spec JSON or text file"),
    Setting("EXPLORER_MAX_DATA_MB", 512, "megabytes one run's data may take",
            "memory one dataset may take, estimated from its parameters before anything is generated (also the "
            "CLI and the API; `--max-data-mb` on the CLI)", worker=True),
    Setting("EXPLORER_MAX_MODEL_MB", 2048, "megabytes one run's model may take",
            "memory training one model may take: weights, gradients, optimizer state and one batch's activations "
            "(the whole training set's for a full-batch optimizer such as `gd`), and probing one on Inside (the "
            "probes' own memory for the chosen number of inputs); estimated before anything is allocated (also the "
            "CLI and the API; `--max-model-mb`)", worker=True),
    Setting("EXPLORER_MEMORY_LIMIT_MB", None, "megabytes a process that runs jobs may take",
            "hard memory limit of each worker process (and each `explorer.fuzz` process), set with `RLIMIT_DATA` on "
            "Linux: the estimates above refuse early and kindly, this limit holds when an estimate is wrong. A job "
            "past it ends with one line naming the probe or run and the limit, and a fresh worker takes the next job",
            shown_default="`EXPLORER_MAX_MODEL_MB` + `EXPLORER_MAX_DATA_MB` + 1024", low=0),
    Setting("EXPLORER_PROBE_SECONDS", 120, "seconds one probe of the Inside page may run",
            "seconds one probe of an Inside probe job may run; past it the worker is stopped and the page says which "
            "probe and what to do"),
    Setting("EXPLORER_WORKER_IDLE_MB", 1024, "resident memory (MB) an idle worker may keep after a job",
            "resident memory a worker may keep after a job (it lets its model and data go and returns freed memory "
            "first); above it, it is replaced by a fresh one", worker=True),
    Setting("EXPLORER_MAX_JOBS_PER_SESSION", 4, "active jobs one browser session may have",
            "runs one browser may have training or waiting, all its tabs together (Streamlit's per-browser XSRF "
            "cookie tells its tabs apart from other browsers'; a Compare grid counts each of its runs)"),
    Setting("EXPLORER_MAX_JOBS_PER_ADDRESS", 8, "active jobs one network address may have",
            "runs one network address may have training or waiting, all its browsers together: a new browser, "
            "cleared cookies or a forged cookie do not lift it. Local connections (127.0.0.1, ::1) are not capped by "
            "address. A class behind one NAT or proxy shares one address: raise it (e.g. 4 x the students)"),
    Setting("EXPLORER_MAX_QUEUED", 16, "jobs that may wait for a slot across the server",
            "jobs that may wait for a slot across the server; past it a submit is refused with \"the server is "
            "full: N job(s) ahead of yours\", and a Compare grid that would overfill the line queues none of its runs"),
    Setting("EXPLORER_SESSION_GRACE_S", 60, "seconds a closed session's jobs go on before they stop",
            "seconds after a session ends (its tab closed) before its runs are stopped, so an orphan does not hold "
            "a slot"),
    Setting("EXPLORER_ADMIN_TOKEN", None, "the token of the operator's pages /admin and /classroom",
            "when set, the page `/admin?token=<it>` lists every job on the server (whose session, how far) and stops "
            "any, and `/classroom?token=<it>` is the teacher's page of a class (below)", shown_default="unset"),
    Setting("EXPLORER_DATA_CACHE_MB", 256, "megabytes the dataset cache may hold",
            "generated datasets kept for reuse (least recently used dropped first); every run gets its own copy",
            low=0, worker=True),
    Setting("EXPLORER_PAPERS_CACHE_MB", 256, "megabytes the paper runs' cache may hold",
            "runs the paper claims and notebooks keep for reuse, per process (least recently used dropped first; "
            "model weights, data and history, without optimizer state); a server's worker drops them when its claims "
            "job ends, so between jobs it keeps none and the server keeps only the claims' result rows",
            low=0, worker=True),
    Setting("EXPLORER_PAPERS_CACHE_DIR", None, "the folder the paper runs' cache is also kept in",
            "a folder of your own where the paper runs' cache is also kept, so a notebook run again, another kernel or "
            "`explorer claims` reuses the runs instead of training them again. Entries are keyed by the run and by a "
            "fingerprint of the library's code and torch's version (a changed library trains afresh; the folder keeps "
            "one fingerprint's runs). They are read as tensors and plain data only, never as code",
            shown_default="unset", worker=True),
    Setting("EXPLORER_PAPERS_CACHE_DIR_MB", 2048, "megabytes the paper runs' cache folder may hold",
            "what the folder of `EXPLORER_PAPERS_CACHE_DIR` may hold; past it the entries read least recently are "
            "removed first", worker=True),
    Setting("EXPLORER_DATA_DIR", None, "the folder dataset files are read from",
            "the only folder the app reads dataset files (MNIST, CIFAR, text) from",
            shown_default="`EXPLORER_HOME/data`", worker=True),
    Setting("EXPLORER_HOME", None, "the folder of the run store", "the run store, checkpoints and uploads",
            shown_default="`~/.explorer`", worker=True),
    Setting("EXPLORER_FAST", None, "fast mode (1: one seed, small runs)",
            "`1`: fast mode, one seed and small runs, for the claims (`explorer claims`, the Papers page) and the "
            "notebooks (what CI runs)", shown_default="unset", worker=True),
    Setting("EXPLORER_PLUGINS_DIR", None, "the folder of plug-in files",
            "a folder of plug-in files (a probe, a model... in one file each), imported after the built-in entries",
            shown_default="unset"),
    Setting("RAY_ADDRESS", None, "the Ray cluster jobs go to",
            "jobs, sweeps and claims go to this Ray cluster (`ray://head-node:10001`, `auto`, `local`) instead of "
            "local worker processes", shown_default="unset"),
)}


def number(name: str) -> int:
    """The whole number SETTINGS[name] holds now (its default when unset; a SettingError naming it otherwise)."""
    setting = SETTINGS[name]
    return whole_number(name, setting.default if setting.default is not None else 0, setting.sets, setting.low)


def _text(name: str) -> str:
    return os.environ.get(name, "").strip()


def home() -> Path:
    """EXPLORER_HOME, or ~/.explorer: the run store, checkpoints and uploads."""
    return Path(_text("EXPLORER_HOME") or Path.home() / ".explorer").expanduser()


def data_dir() -> Path:
    """EXPLORER_DATA_DIR, or EXPLORER_HOME/data: the only folder the app reads dataset files from."""
    return Path(_text("EXPLORER_DATA_DIR") or home() / "data").expanduser()


def papers_cache_dir() -> Path | None:
    """EXPLORER_PAPERS_CACHE_DIR, or None when unset: the folder the paper runs' cache is also kept in."""
    text = _text("EXPLORER_PAPERS_CACHE_DIR")
    return Path(text).expanduser() if text else None


def fast_mode() -> bool:
    """EXPLORER_FAST=1: one seed and small runs, for the claims and the notebooks."""
    return _text("EXPLORER_FAST") == "1"


def admin_token() -> str:
    """EXPLORER_ADMIN_TOKEN, or "" when unset (then the operator's page does not exist)."""
    return _text("EXPLORER_ADMIN_TOKEN")


def ray_address() -> str | None:
    """RAY_ADDRESS, or None when unset (then jobs run in local worker processes)."""
    return _text("RAY_ADDRESS") or None


def worker_settings() -> dict[str, str | None]:
    """The settings a server's worker processes take from the server, as they are set now."""
    return {name: os.environ.get(name) for name, setting in SETTINGS.items() if setting.worker}


class SettingError(SpecError):
    """An environment variable holds a value that is not a whole number in its range (its field is the variable)."""


def whole_number(variable: str, default: int, meaning: str, low: int = 1) -> int:
    """The value of `variable` (a whole number >= `low`), or `default` when it is unset or blank."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low:
        shown = text if len(text) <= 40 else text[:40] + "..."
        kind = "a positive whole number" if low == 1 else f"a whole number of at least {low}"
        raise SettingError(variable, f"{shown!r} is not valid: it sets the {meaning}; set it to {kind} "
                                     f"(default {default}) or unset it")
    return value


PLUGINS_VARIABLE = "EXPLORER_PLUGINS_DIR"  # (in SETTINGS)


def plugins_folder() -> Path | None:
    """The folder of plug-in files named by EXPLORER_PLUGINS_DIR (each .py file in it registers entries, e.g.
    a probe in one file, and is imported with the library's own), or None when it is unset or blank."""
    text = os.environ.get(PLUGINS_VARIABLE, "").strip()
    if not text:
        return None
    folder = Path(text).expanduser()
    if not folder.is_dir():
        shown = text if len(text) <= 80 else text[:80] + "..."
        raise SettingError(PLUGINS_VARIABLE, f"{shown!r} is not a folder: it names the folder of plug-in files "
                                             f"(probes in one file each); create it, or unset the variable")
    return folder

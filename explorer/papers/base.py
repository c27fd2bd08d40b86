"""The presets registry (named specs at CPU scale, each paper module's PRESETS registered by the package),
and the papers' run cache.

The claims and the notebooks share their runs through `cached`: one least-recently-used cache for every
paper, bounded by EXPLORER_PAPERS_CACHE_MB (default 256) of model weights, data and results, so a process
that runs every claim (a server's worker, a notebook kernel) does not keep every run it ever trained. A run
is kept without its training state (optimizer moments): claims and figures read its model, data and history.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from explorer.cache import LRUCache, megabytes_from_env
from explorer.registry import Entry, Registry

PRESETS = Registry("presets")
RUNS = LRUCache(megabytes_from_env("EXPLORER_PAPERS_CACHE_MB", 256))


def cached(key: Hashable, make: Callable[[], Any]) -> Any:
    """`make()`, kept per `key` (a tuple starting with the paper's id) in the papers' bounded cache."""

    def slim():
        value = make()
        if hasattr(value, "_state"):  # an explorer Run: drop the closure that holds the optimizer's state
            value._state = None
        return value

    return RUNS.get_or_make(key, slim)


def clear_cache() -> None:
    """Drop every run the papers' cache keeps (a server's worker does after each claims job: the server keeps
    the claims' result rows, and the runs behind them would only hold the worker's memory)."""
    RUNS.clear()


def register_presets(paper: str, presets: dict) -> None:
    """Register a paper module's {name: (description, spec dict)} under its paper id."""
    for name, (description, spec_dict) in presets.items():
        PRESETS.add(Entry(name, description, (), _loader(spec_dict), {"paper": paper}))


def _loader(spec_dict):
    def load():
        from explorer.spec import ExperimentSpec

        return ExperimentSpec.from_dict(spec_dict)

    return load


def preset(name: str):
    """The ExperimentSpec registered under `name` (a SpecError lists the valid names)."""
    return PRESETS.lookup(name, "preset").factory()

"""Claims: a paper's statement, checked on real runs at CPU scale, with the numbers measured.

A claim is a function `check(fast: bool) -> Verdict` registered with `@claim(paper, id, section,
statement, expected)`. It runs what it needs (a fast mode for CI: fewer steps, depths or seeds)
and returns what it measured and whether the statement held at this scale. Running one never
raises: an exception becomes the verdict "error" with its message, so a table of claims always
comes back whole.

    from explorer.papers.claims import run_claims
    rows = run_claims(paper="tau", fast=True)   # [{"paper", "id", "section", "statement", ...}, ...]
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from explorer.registry import SpecError

PAPERS = ("ancre", "dca", "idinit", "tau", "skipless")
VERDICTS = ("holds", "does-not-hold", "error")


@dataclass(frozen=True)
class Verdict:
    """What a check returns: the numbers it measured, whether the claim held, and a note on the scale."""

    measured: dict[str, Any]
    holds: bool
    note: str = ""


@dataclass(frozen=True)
class Claim:
    paper: str
    id: str
    section: str
    statement: str
    expected: str
    check: Callable[[bool], Verdict] = field(repr=False)

    def run(self, fast: bool = False) -> dict[str, Any]:
        """The claim's row: paper, id, section, statement, measured, expected, verdict, note, seconds."""
        start = time.perf_counter()
        try:
            verdict = self.check(fast)
            measured, outcome, note = _jsonable(verdict.measured), "holds" if verdict.holds else "does-not-hold", \
                verdict.note
        except Exception as error:  # noqa: BLE001  (a claim that errors is reported, the table goes on)
            measured, outcome = {}, "error"
            note = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}"
        return {"paper": self.paper, "id": self.id, "section": self.section, "statement": self.statement,
                "measured": measured, "expected": self.expected, "verdict": outcome, "note": note,
                "seconds": round(time.perf_counter() - start, 2)}


CLAIMS: dict[str, Claim] = {}


def claim(paper: str, id: str, section: str, statement: str, expected: str):
    """Register `check(fast) -> Verdict` as a claim of `paper` (one of PAPERS), under a unique `id`."""
    if paper not in PAPERS:
        raise ValueError(f"paper must be one of {', '.join(PAPERS)}, got {paper!r}")

    def register(check: Callable[[bool], Verdict]) -> Callable[[bool], Verdict]:
        key = f"{paper}/{id}"
        if key in CLAIMS:
            raise ValueError(f"claim {key} is registered twice")
        CLAIMS[key] = Claim(paper, id, section, statement, expected, check)
        return check

    return register


def claims(paper: str | None = None) -> list[Claim]:
    """The registered claims, of one paper or all, in registration order (importing explorer.papers registers them)."""
    if paper is not None and paper not in PAPERS:
        raise SpecError("--paper", f"unknown paper {paper!r}; use one of {', '.join(PAPERS)}")
    return [c for c in CLAIMS.values() if paper is None or c.paper == paper]


def run_claims(paper: str | None = None, fast: bool = False, ids: list[str] | None = None,
               callback: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
    """Run the claims (of one paper, or only `ids`) and return their rows; `callback(row)` after each."""
    rows = []
    for c in claims(paper):
        if ids is not None and c.id not in ids:
            continue
        row = c.run(fast)
        rows.append(row)
        if callback is not None:
            callback(row)
    return rows


def _jsonable(value: Any) -> Any:
    """Numbers, strings, lists and dicts only (numpy scalars and arrays converted; NaN/inf -> None)."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return value

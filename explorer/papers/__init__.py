"""One module per paper: its `Paper` record (what it says, its equations, its notebook and its presets, at CPU
scale) and its claims (see explorer.papers.claims).

Importing this package imports every paper module, in the order of their notebooks; each registers its record
and presets in `PAPERS` and `PRESETS`, then its claims. The paper modules import only `explorer.papers.base` and
`explorer.papers.claims` of this package. A new paper is a new module here, added to the import below.
"""

from __future__ import annotations

from explorer.papers.base import PAPERS, PRESETS, Paper, clear_cache, preset, presets_of
from explorer.papers import ancre, dca, idinit, tau, skipless  # noqa: F401,I001  (register their records and claims)

__all__ = ["PAPERS", "PRESETS", "Paper", "clear_cache", "preset", "presets_of"]

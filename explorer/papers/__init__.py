"""One module per paper: its presets (named specs at CPU scale) and its claims (see explorer.papers.claims).

Importing this package imports every paper module, which registers its claims, and registers their
presets; the paper modules import only `explorer.papers.base` and `explorer.papers.claims` of this package.
"""

from __future__ import annotations

from explorer.papers.base import PRESETS, clear_cache, preset, register_presets
from explorer.papers import ancre, dca, idinit, skipless, tau  # noqa: I001  (register their claims)

for _module in (ancre, dca, idinit, skipless, tau):
    register_presets(_module.__name__.rsplit(".", 1)[-1], _module.PRESETS)

__all__ = ["PRESETS", "clear_cache", "preset"]

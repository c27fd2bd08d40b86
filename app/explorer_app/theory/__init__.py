"""The Theory page's sections, one module per paper that has closed-form results to draw: a module named after the
paper's id (explorer.papers: PAPERS) with `TITLE` and `section()`. The page shows them in the papers' order, so a
new paper's section is one module here."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable

from explorer.papers import PAPERS


def sections() -> dict[str, Callable[[], None]]:
    """{title: draw} of every paper with a section module, in the papers' order."""
    found = {}
    for paper in PAPERS:
        name = f"{__name__}.{paper}"
        if importlib.util.find_spec(name) is not None:
            module = importlib.import_module(name)
            found[module.TITLE] = module.section
    return found

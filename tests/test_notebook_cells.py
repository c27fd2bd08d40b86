"""Every notebook is a valid nbformat 4.5 file as it is written on disk: each cell has an id of its own.

A cell without one is repaired on the fly by today's nbformat, with a warning that a later release will refuse
the file; a cell added by hand (not through Jupyter) is the usual way to lose it.
"""

import json
import re
import warnings
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # a cell id in nbformat 4.5's schema


def id_problems(raw: dict) -> list[str]:
    """What is wrong with the cell ids of a notebook's JSON: cells with no valid id, and ids used twice."""
    ids = [cell.get("id") for cell in raw["cells"]]
    problems = [f"cell {i} has no valid id ({cell_id!r})" for i, cell_id in enumerate(ids)
                if not (isinstance(cell_id, str) and CELL_ID.fullmatch(cell_id))]
    problems += [f"id {cell_id!r} is used {ids.count(cell_id)} times" for cell_id in sorted(set(ids) - {None})
                 if ids.count(cell_id) > 1]
    return problems


def test_the_check_sees_a_missing_and_a_repeated_id():
    raw = {"cells": [{"id": "a1"}, {}, {"id": "a1"}, {"id": "no spaces"}]}
    assert id_problems(raw) == ["cell 1 has no valid id (None)", "cell 3 has no valid id ('no spaces')",
                                "id 'a1' is used 2 times"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_cell_has_its_own_id_and_the_file_validates_as_written(path):
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert not id_problems(raw), f"{path.name}: {id_problems(raw)}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a repair nbformat would make (and warn about) fails here
        nbformat.validate(nbformat.from_dict(raw))

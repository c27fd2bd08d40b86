"""Every notebook is a valid nbformat 4.5 file as it is written on disk: each cell has an id of its own.

A cell without one (or with one used twice) is repaired on the fly by today's nbformat, with a warning that a
later release will refuse the file; a cell added by hand (not through Jupyter) is the usual way to lose it.
"""

import json
import warnings

import pytest
from conftest import NOTEBOOKS

nbformat = pytest.importorskip("nbformat")


def validate_as_written(raw: dict) -> None:
    """nbformat's validation of a notebook's JSON, where a repair it would make (and warn about) is an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nbformat.validate(nbformat.from_dict(raw))


@pytest.mark.parametrize("change", ["missing", "repeated", "malformed"])
def test_the_check_refuses_a_missing_a_repeated_and_a_malformed_id(change):
    raw = json.loads(NOTEBOOKS[0].read_text(encoding="utf-8"))
    first, second = raw["cells"][:2]
    if change == "missing":
        del second["id"]
    else:
        second["id"] = first["id"] if change == "repeated" else "no spaces"
    with pytest.raises((Warning, nbformat.ValidationError)):
        validate_as_written(raw)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_cell_has_its_own_id_and_the_file_validates_as_written(path):
    validate_as_written(json.loads(path.read_text(encoding="utf-8")))

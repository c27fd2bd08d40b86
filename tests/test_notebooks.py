"""Every notebook executes top to bottom in fast mode (EXPLORER_FAST=1), as a reader would run it."""

import os
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


def test_there_is_a_quickstart_and_one_notebook_per_paper():
    names = [path.stem for path in NOTEBOOKS]
    assert names[0] == "00_quickstart"
    for paper in ("ancre", "dca", "idinit", "tau", "skipless"):
        assert any(name.endswith(paper) for name in names), f"no notebook for {paper}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_fast_mode(path, monkeypatch, tmp_path):
    monkeypatch.setenv("EXPLORER_FAST", "1")
    notebook = nbformat.read(path, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        f"{path.name} is stored with outputs; clear them"
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs
              if out.output_type == "error"]
    assert not errors, errors

"""Every notebook executes top to bottom in fast mode (EXPLORER_FAST=1), as a reader would run it, its exercise
solutions included: a solution cell runs its experiment and asserts the answer its text states, so a solution that
no longer runs or no longer agrees with its text fails its notebook's test here."""

import sys
from pathlib import Path

import pytest

from explorer.papers import PAPERS
from conftest import NOTEBOOKS

ROOT = Path(__file__).resolve().parents[1]

PLOTLY = "application/vnd.plotly.v1+json"
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


def test_there_is_a_quickstart_and_one_notebook_per_paper():
    """Each paper's record names its notebook; the notebooks are the quickstart and those, in the papers' order."""
    notebooks = [ROOT / paper.notebook for paper in PAPERS.values()]
    assert NOTEBOOKS == [ROOT / "notebooks" / "00_quickstart.ipynb", *notebooks]


def test_notebooks_are_stored_without_outputs():
    """Outputs in a stored notebook would show a reader results that this code did not produce."""
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
            f"{path.name} is stored with outputs; clear them"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_fast_mode(path, executed_notebooks):
    notebook = executed_notebooks[path.stem]
    if isinstance(notebook, BaseException):
        raise notebook
    errors = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs
              if out.output_type == "error"]
    assert not errors, errors
    solutions = [cell for cell in notebook.cells if "solution" in cell.metadata.get("tags", [])]
    assert all(cell.get("execution_count") for cell in solutions), f"a solution cell of {path.name} did not run"
    # every figure keeps an HTML copy (exports show it), and widget outputs hold what they show: the
    # old `out.append_display_data(plotly_figure)` left an entry with no data
    figures = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs
               if PLOTLY in out.get("data", {})]
    assert figures, f"{path.name} shows no figure"
    assert all("plotly-graph-div" in out["data"].get("text/html", "") for out in figures)
    widgets = notebook.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    for model in widgets.get("state", {}).values():
        if model["model_name"] == "OutputModel":
            for out in model["state"].get("outputs", []):
                assert out["output_type"] != "display_data" or out["data"], f"an empty widget output in {path.name}"


def test_a_solution_that_disagrees_with_its_text_fails_its_notebook(tmp_path):
    """The negative control: a notebook whose solution cell asserts what its runs do not give does not execute
    (the executed_notebooks fixture keeps the error, and test_notebook_runs_in_fast_mode raises it)."""
    sys.path.insert(0, str(ROOT / "notebooks"))
    import build_site

    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("answer = 1 + 1"),
        nbformat.v4.new_code_cell("def _solution():\n    assert answer == 3, 'the text says 3'\n\n\n_solution()",
                                  metadata={"tags": ["solution"]})])
    path = tmp_path / "exercise.ipynb"
    nbformat.write(notebook, path)
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="the text says 3"):
        build_site.execute(path, tmp_path, timeout=120)

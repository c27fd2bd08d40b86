"""Every notebook executes top to bottom in fast mode (EXPLORER_FAST=1), as a reader would run it."""

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from explorer.papers import PAPERS

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

PLOTLY = "application/vnd.plotly.v1+json"
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


def test_there_is_a_quickstart_and_one_notebook_per_paper():
    """Each paper's record names its notebook; the notebooks are the quickstart and those, in the papers' order."""
    notebooks = [ROOT / paper.notebook for paper in PAPERS.values()]
    assert NOTEBOOKS == [ROOT / "notebooks" / "00_quickstart.ipynb", *notebooks]


def execute(path: Path, folder: Path):
    """The notebook at `path` run top to bottom by a fresh kernel in `folder` (its outputs in the returned copy)."""
    notebook = nbformat.read(path, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), \
        f"{path.name} is stored with outputs; clear them"
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute()
    return notebook


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Every notebook executed in fast mode, two kernels at a time with one torch thread each: a notebook's
    small runs gain little from a second thread, so the two cores of a CI machine run two notebooks."""
    saved = {key: os.environ.get(key) for key in ("EXPLORER_FAST", "OMP_NUM_THREADS")}
    os.environ.update(EXPLORER_FAST="1", OMP_NUM_THREADS="1")  # the kernels inherit them
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {path: pool.submit(execute, path, tmp_path_factory.mktemp(path.stem)) for path in NOTEBOOKS}
            yield {path: future.exception() or future.result() for path, future in futures.items()}
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_fast_mode(path, executed):
    notebook = executed[path]
    if isinstance(notebook, BaseException):
        raise notebook
    errors = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs
              if out.output_type == "error"]
    assert not errors, errors
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

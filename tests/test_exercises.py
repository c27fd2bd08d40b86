"""The notebooks' exercise solutions: there are some, and the ```python blocks in folded solutions hold.

A solution is either a code cell tagged "solution" (folded away in JupyterLab; it runs the experiment behind the
answer and asserts the answer its text states), or a ```python block inside a folded "Solution" in a markdown cell.
The solution cells run where a student runs them, in the notebook top to bottom: tests/test_notebooks.py executes
every notebook in fast mode (one kernel each) and fails on any cell's error, a solution's false assertion included.
The ```python blocks are examples for the reader, some of them minutes long at full size: each must parse and use
only names that Python or the notebook's code defines.
"""

import ast
import builtins
import re
from pathlib import Path

import pytest
from conftest import NOTEBOOKS

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = re.compile(r"<summary>\s*Solution\s*</summary>(.*?)</details>", re.S)
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def code_of(cell_source: str) -> str:
    """A code cell's source as plain Python: IPython's magics and shell lines (% and !) left out."""
    return "\n".join(line for line in cell_source.splitlines() if not line.lstrip().startswith(("%", "!")))


def defined(tree: ast.AST) -> set[str]:
    """Names a piece of code binds at any level: assignments, loop targets, imports, functions and classes."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def used(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def needed(code: str) -> set[str]:
    """Names `code` reads that it does not bind itself and Python does not provide."""
    tree = ast.parse(code)
    return used(tree) - defined(tree) - set(dir(builtins))


def code_cells(notebook) -> list[tuple[int, str]]:
    return [(i, code_of(cell.source)) for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"]


def solution_cells() -> list[tuple[str, int]]:
    return [(path.name, i) for path in NOTEBOOKS
            for i, cell in enumerate(nbformat.read(path, as_version=4).cells)
            if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", [])]


def solution_blocks() -> list[tuple[str, int, int]]:
    found = []
    for path in NOTEBOOKS:
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "markdown":
                blocks = [b for s in SOLUTION.findall(cell.source) for b in PYTHON_BLOCK.findall(s)]
                found += [(path.name, i, k) for k in range(len(blocks))]
    return found


def test_there_are_solutions_to_run():
    """At least one solution is a run that checks its answer (the quickstart's first exercise)."""
    assert any(name == "00_quickstart.ipynb" for name, _ in solution_cells())


@pytest.mark.parametrize("name,index,block", solution_blocks(), ids=lambda v: str(v))
def test_a_solution_block_parses_and_uses_only_names_the_notebook_defines(name, index, block):
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    code = [b for s in SOLUTION.findall(notebook.cells[index].source) for b in PYTHON_BLOCK.findall(s)][block]
    everything = set()
    for _, source in code_cells(notebook):
        everything |= defined(ast.parse(source))
    missing = needed(code) - everything
    assert not missing, f"{name}, cell {index}: the solution uses {sorted(missing)}, which no cell defines"

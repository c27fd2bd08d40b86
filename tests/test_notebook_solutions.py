"""An exercise's solution cannot break what the notebook built before it.

A student who runs a notebook top to bottom runs the solution cells too. A solution that assigned a name the
notebook uses (a widget's `steps` slider, the `run` a later cell reads) would leave that widget or cell broken
with no error. So every code cell tagged "solution" keeps its names inside a function of its own: at the top
level it binds `_solution` and nothing else, and calls it.
"""

import ast
from pathlib import Path

import pytest
from conftest import NOTEBOOKS

nbformat = pytest.importorskip("nbformat")

ALLOWED = {"_solution"}


def top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level (not inside the functions or classes it defines)."""
    names = set()
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
            continue
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in statement.names)
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.Lambda, ast.FunctionDef, ast.ClassDef)):
                break
    return names


def solutions(path: Path) -> list[tuple[int, str]]:
    notebook = nbformat.read(path, as_version=4)
    return [(i, cell.source) for i, cell in enumerate(notebook.cells)
            if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", [])]


def test_the_check_sees_a_solution_that_rebinds_a_name():
    assert top_level_names(ast.parse("steps = {'0:4': 144}\nprint(steps)")) == {"steps"}
    assert top_level_names(ast.parse("def _solution():\n    steps = 1\n\n_solution()")) == ALLOWED
    assert top_level_names(ast.parse("for run in runs:\n    pass")) == {"run"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_solution_keeps_its_names_to_itself(path):
    cells = solutions(path)
    if not cells:
        pytest.skip(f"{path.name} has no solution cells")
    for index, source in cells:
        tree = ast.parse(source)
        assert top_level_names(tree) <= ALLOWED, (path.name, index, top_level_names(tree) - ALLOWED)
        last = tree.body[-1]
        assert isinstance(last, ast.Expr) and ast.unparse(last) == "_solution()", (path.name, index)

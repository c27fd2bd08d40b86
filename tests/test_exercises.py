"""The notebooks' exercise solutions run and agree with what their text says.

A solution is either a code cell tagged "solution" (folded away in JupyterLab; it runs the experiment behind the
answer and asserts the answer its text states), or a ```python block inside a folded "Solution" in a markdown cell.
Every tagged solution cell is executed here in fast mode after only the earlier cells that define the names it uses
(found from the code, transitively), so a solution that no longer runs or no longer agrees with its text fails on its
own, without executing the whole notebook. One interpreter per notebook imports the modules the notebook imports,
once; each solution then runs in a forked copy of it (its own process and namespace: nothing one solution does is
seen by the next). The ```python blocks are examples for the
reader, some of them minutes long at full size: each must parse and use only names that Python or the notebook's
code defines.
"""

import ast
import builtins
import json
import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
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


def with_dependencies(notebook, index: int, code: str) -> str:
    """`code` preceded by the earlier code cells (in notebook order) that bind a name it needs, transitively."""
    earlier = [(i, source) for i, source in code_cells(notebook) if i < index]
    bound = {i: defined(ast.parse(source)) for i, source in earlier}
    wanted, chosen = needed(code), set()
    for i, source in reversed(earlier):
        if bound[i] & wanted:
            chosen.add(i)
            wanted = (wanted - bound[i]) | needed(source)
    assert not wanted, f"no earlier cell defines {sorted(wanted)}"
    return "\n\n".join([source for i, source in earlier if i in chosen] + [code])


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


# The notebook's interpreter: imports what the notebook imports (paid once), then, for each script it reads (one
# JSON line), forks a child that runs the script in a fresh namespace with its output in the given log file, and
# answers {"exit": code}.
RUNNER = """
import importlib, json, os, sys, traceback
for module in json.loads(sys.argv[1]):
    try:
        importlib.import_module(module)
    except Exception:
        pass  # the solution that needs it fails with the error, on its own
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)
        os.dup2(log, 2)
        code = 0
        try:
            exec(compile(request["script"], "<solution>", "exec"), {"__name__": "__main__"})
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)
"""


def imported_modules(notebook) -> list[str]:
    """The modules a notebook's code cells import (top-level names and dotted paths), in order of first use."""
    found = []
    for _, source in code_cells(notebook):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.append(node.module)
    return list(dict.fromkeys(found))


class NotebookInterpreter:
    """One warm interpreter per notebook (see RUNNER); `run(script, log)` -> the exit code of a forked copy."""

    def __init__(self, name: str):
        notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
        env = {**os.environ, "EXPLORER_FAST": "1", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, "-c", RUNNER, json.dumps(imported_modules(notebook))], cwd=ROOT / "notebooks",
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.answer(600)

    def answer(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise AssertionError(f"{self.name}'s interpreter " + ("exited" if ready else f"took over {timeout} s"))
        return json.loads(line)

    def run(self, script: str, log: Path, timeout: float = 900) -> int:
        self.process.stdin.write(json.dumps({"script": script, "log": str(log)}) + "\n")
        self.process.stdin.flush()
        return self.answer(timeout)["exit"]

    def close(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # the interpreter and a solution still running
        self.process.wait()


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="the solutions run in forked copies of an interpreter")


@pytest.fixture(scope="module")
def interpreters():
    """interpreters(name) -> the notebook's interpreter, started on first use; the previous notebook's goes."""
    current: list[NotebookInterpreter] = []

    def get(name: str) -> NotebookInterpreter:
        if current and (current[0].name != name or current[0].process.poll() is not None):
            current.pop().close()
        if not current:
            current.append(NotebookInterpreter(name))
        return current[0]

    yield get
    for interpreter in current:
        interpreter.close()


@needs_fork
def test_a_failing_solution_fails_and_one_solution_leaves_nothing_to_the_next(interpreters, tmp_path):
    """The negative control: a solution that raises, or asserts something false, exits non-zero with its traceback;
    a name a solution binds is gone in the next one (each runs in its own forked copy)."""
    interpreter = interpreters("00_quickstart.ipynb")
    log = tmp_path / "output.txt"
    assert interpreter.run("leftover = 1\nimport explorer\nassert explorer.preset", log) == 0
    assert interpreter.run("assert 1 + 1 == 3, 'the text says 3'", log) == 1
    assert "AssertionError: the text says 3" in log.read_text()
    assert interpreter.run("leftover", log) == 1 and "NameError" in log.read_text()
    assert interpreter.run("import sys\nsys.exit(3)", log) == 3


@needs_fork
@pytest.mark.parametrize("name,index", solution_cells(), ids=lambda v: str(v))
def test_a_solution_cell_runs_and_agrees_with_its_text(name, index, interpreters, tmp_path):
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    script = with_dependencies(notebook, index, code_of(notebook.cells[index].source))
    log = tmp_path / "output.txt"
    code = interpreters(name).run(script, log)
    assert code == 0, f"{name} cell {index} (exit {code}):\n{log.read_text()[-6000:]}"


@pytest.mark.parametrize("name,index,block", solution_blocks(), ids=lambda v: str(v))
def test_a_solution_block_parses_and_uses_only_names_the_notebook_defines(name, index, block):
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    code = [b for s in SOLUTION.findall(notebook.cells[index].source) for b in PYTHON_BLOCK.findall(s)][block]
    everything = set()
    for _, source in code_cells(notebook):
        everything |= defined(ast.parse(source))
    missing = needed(code) - everything
    assert not missing, f"{name}, cell {index}: the solution uses {sorted(missing)}, which no cell defines"

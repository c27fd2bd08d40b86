"""The house reads bottom-up: no import cycle in explorer/, and no module imports a higher layer.

Every import counts, also those inside functions: a deferred import hides a cycle from the
interpreter, not from the design. Read with the standard library's ast, nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "explorer"

# Layers, bottom-up (README "The house"); a module may import its own layer or lower ones.
LAYERS = (
    ("explorer.registries", "explorer.spec", "explorer.version", "explorer.cache", "explorer.settings",
     "explorer.parallel"),
    ("explorer.data", "explorer.nn", "explorer.topology", "explorer.init", "explorer.init_schemes", "explorer.optim",
     "explorer.combinations", "explorer.budget"),
    ("explorer.training", "explorer.probes", "explorer.plots", "explorer.theory", "explorer.diagnosis",
     "explorer.network_view"),
    ("explorer.papers", "explorer.runs", "explorer.sweeps", "explorer.batched", "explorer.fuzz",
     "explorer.challenge", "explorer.design_widget", "explorer.network_widget"),
    ("explorer.cli", "explorer"),  # the command line and the public facade (explorer/__init__.py)
)


def module_files() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """{module: explorer modules it imports}; `from pkg import name` counts as pkg.name when that is a module."""

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in files else known(base))
        graph[module] = {t for t in targets if t and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def layer_of(module: str) -> int:
    best = None
    for number, members in enumerate(LAYERS):
        for member in members:
            if module == member or module.startswith(member + "."):
                if best is None or len(member) > best[1]:
                    best = (number, len(member))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def test_every_module_has_a_layer():
    for module in module_files():
        layer_of(module)


def test_import_graph_has_no_cycle():
    assert cycles(import_graph(module_files())) == []


def test_no_module_imports_a_higher_layer():
    upward = [f"{module} (layer {layer_of(module) + 1}) imports {target} (layer {layer_of(target) + 1})"
              for module, targets in import_graph(module_files()).items()
              for target in sorted(targets) if layer_of(target) > layer_of(module)]
    assert upward == []


@pytest.mark.parametrize("source, expected", [
    ({"a": "from explorer import b", "b": "import explorer.a"}, [["explorer.a", "explorer.b"]]),
    ({"a": "def f():\n    from explorer.b import x", "b": "from . import a"}, [["explorer.a", "explorer.b"]]),
    ({"a": "from explorer import b", "b": "import torch"}, []),
])
def test_the_checker_finds_cycles(tmp_path, source, expected):
    """The check itself can fail: a cycle written into a throw-away package is found, also inside a function."""
    root = tmp_path / "explorer"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name, text in source.items():
        (root / f"{name}.py").write_text(text)
    files = {f"explorer.{name}": root / f"{name}.py" for name in source}
    assert cycles(import_graph(files)) == expected

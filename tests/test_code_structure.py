"""The shape of the testbed package: every module imports, no import circle, short functions.

The import graph is built from the source with `ast`, function-level (lazy) imports included:
a circle through a lazy import is still a circle (calibrate, its summary and its validation
were one until the package was split by stage).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from testbed import ROOT

PACKAGE = ROOT / "testbed"
#: The longest function, in lines from `def` to its last line.
MAX_FUNCTION_LINES = 80


def module_names(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted name -> file of every module of the package (a package is its __init__)."""
    out = {}
    for f in sorted(package.rglob("*.py")):
        parts = list(f.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its code."""
    modules = module_names(package)
    top = package.name
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from testbed.run import simulate` imports the module testbed.run.simulate
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            for t in targets:
                while t and t not in modules and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t.split(".")[0] == top and t in modules and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def long_functions(package: Path = PACKAGE, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    out = []
    for f in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append(f"{f.relative_to(package.parent)}:{node.lineno} {node.name}: {lines} lines")
    return out


@pytest.mark.parametrize("module", sorted(module_names()))
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_no_import_circle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_cycle_finder_finds_a_lazy_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "testbed"
    (pkg / "calibrate").mkdir(parents=True)
    for f in ("__init__.py", "calibrate/__init__.py"):
        (pkg / f).write_text("")
    (pkg / "calibrate" / "a.py").write_text("def f():\n    from testbed.calibrate.b import g\n")
    (pkg / "calibrate" / "b.py").write_text("from testbed.calibrate import a\n")
    assert find_cycle(import_graph(pkg)) == ["testbed.calibrate.a", "testbed.calibrate.b", "testbed.calibrate.a"]


def test_functions_are_short() -> None:
    assert not long_functions(), "\n".join(long_functions())

"""The worker's modules (naiad_backend_python/stub/) import each other by top-level name,
without a cycle, and inside the server each is one module object under both names."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import naiad_backend_python.stub as stub

STUB = Path(stub.__file__).parent


def stub_imports() -> dict[str, set[str]]:
    """Each stub module -> the stub modules it imports (anywhere in its source)."""
    graph = {}
    for path in STUB.glob("*.py"):
        if path.stem == "__init__":
            continue
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)
        graph[path.stem] = found & stub.MODULES
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*trail, node, nxt]
            if nxt not in state and (found := visit(nxt, [*trail, node])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return None


def test_the_stub_has_no_import_cycle_and_no_package_branches():
    graph = stub_imports()
    assert "naiad_stub_errors" in graph["naiad_stub_metrics"]
    assert "naiad_stub_metrics" in graph["triton_python_backend_utils"]
    assert cycle(graph) is None, f"import cycle: {' -> '.join(cycle(graph) or [])}"
    assert cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]  # the check can fail
    for path in STUB.glob("naiad_stub_*.py"):
        assert "if __package__" not in path.read_text(encoding="utf-8"), path.name
    assert "if __package__" not in (STUB / "triton_python_backend_utils.py").read_text()


def test_top_level_names_are_the_package_s_modules_in_the_server():
    for name in ("naiad_stub_wire", "naiad_stub_errors", "triton_python_backend_utils"):
        assert importlib.import_module(name) is importlib.import_module(f"{stub.__name__}.{name}")
    pb_utils = sys.modules["triton_python_backend_utils"]
    errors = sys.modules["naiad_stub_errors"]
    assert pb_utils.TritonModelException is errors.TritonModelException

"""The core's import graph: no cycle, and the public contract at the bottom.

Read from the source with ``ast`` (imports under ``if TYPE_CHECKING:`` and inside functions
included), so a cycle hidden behind a type-only or a late import counts as one. A cycle
means no module in it can be understood, tested or moved without the others; and a plugin
that imports :mod:`naiad.hookspecs` or :mod:`naiad.types` must not drag in the core's
internals, which change in any release.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from naiad.plugins import PUBLIC_MODULES

CORE = Path(__file__).resolve().parents[2] / "core"
PACKAGE = CORE / "naiad"

#: The contract plugins are written against: these import nothing but each other, the
#: standard library and third-party packages.
CONTRACT = ("naiad.hookspecs", "naiad.types", "naiad.errors")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(CORE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The naiad modules ``name`` (the module at ``path``) imports."""
    return imports_in(name, path.read_text(encoding="utf-8"), path.name == "__init__.py",
                      known)


def imports_in(name: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The naiad modules ``source`` imports, anywhere: under ``if TYPE_CHECKING:``, inside
    functions. ``from a import b`` counts as an import of ``a.b`` when that is a module,
    else of ``a``."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    found = modules()
    known = set(found)
    return {name: frozenset(imported(name, path, known)) for name, path in found.items()}


def graph() -> dict[str, set[str]]:
    """Module -> the naiad modules it imports (a fresh copy, read once per session)."""
    return {name: set(targets) for name, targets in _graph().items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def is_package_init(name: str, edges: dict[str, set[str]]) -> bool:
    return (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()


def test_the_graph_is_read() -> None:
    edges = graph()
    assert "naiad.server" in edges and "naiad.models.manager" in edges["naiad.server"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_core_has_no_import_cycle() -> None:
    edges = graph()
    # A package's __init__ importing its own submodules is how Python packages work, not a
    # cycle between jobs: a submodule importing its package runs the __init__ first.
    for name in edges:
        if is_package_init(name, edges):
            edges[name] = {t for t in edges[name] if not t.startswith(name + ".")}
    found = cycles(edges)
    assert not found, "import cycles in core/naiad:\n" + "\n".join(
        " <-> ".join(component) for component in found)


@pytest.mark.parametrize("name", CONTRACT)
def test_the_contract_imports_only_public_modules(name: str) -> None:
    edges = graph()
    assert edges[name] <= set(PUBLIC_MODULES), (
        f"{name} imports non-public modules: {sorted(edges[name] - set(PUBLIC_MODULES))}")


@pytest.mark.parametrize("name", CONTRACT)
def test_the_contract_reaches_no_core_internals(name: str) -> None:
    """Transitively: public modules, and below them only leaves (modules that import
    nothing of naiad, such as the histogram custom metrics record into), which cannot
    drag the core in."""
    edges = graph()
    leaves = {module for module, targets in edges.items() if not targets}
    reached, todo = set(), [name]
    while todo:
        for target in edges[todo.pop()]:
            if target not in reached:
                reached.add(target)
                todo.append(target)
    assert reached <= set(PUBLIC_MODULES) | leaves, (
        f"{name} reaches core internals: {sorted(reached - set(PUBLIC_MODULES) - leaves)}")


def test_type_only_late_and_relative_imports_count() -> None:
    known = set(modules())
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from naiad.server import InferenceServer\n"
              "def later():\n    from ..tracing import trace\n"
              "from . import worker\n")
    assert imports_in("naiad.scheduling.base", source, False, known) == {
        "naiad.server", "naiad.tracing.trace", "naiad.scheduling.worker"}

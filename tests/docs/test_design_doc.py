"""docs/design.md names only what exists: every module, class, function and hook it puts in
backticks, and every file path of the repository.

A design document that names a module which was renamed, or a hook that never existed, sends
a newcomer looking for it; this keeps the document as true as the code it describes.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from naiad import hookspecs
from naiad.cli import COMMANDS_GROUP
from naiad.plugins import ENTRY_POINT_GROUPS
from naiad.scheduling import hookspecs as scheduling_hookspecs

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

#: Names in ``naiad.`` form that are not Python objects: entry point groups and the one
#: model-config parameter the document names.
NOT_CODE = {*ENTRY_POINT_GROUPS.values(), COMMANDS_GROUP, "naiad.adaptive_batching"}

DOTTED = re.compile(r"^naiad(_\w+)?(\.\w+)+$")
HOOK = re.compile(r"^naiad_[a-z_]+$")
PATH = re.compile(r"^(core|plugins|tools|tests|docs|benchmarks|deploy|examples|results)/[\w./-]*$")


def backticked() -> list[str]:
    text = DESIGN.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # diagrams and the layout listing
    return sorted({m.group(1) for m in re.finditer(r"`([^`\n]+)`", text)})


def resolve(dotted: str) -> object:
    """The object ``dotted`` names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


def test_the_document_names_modules_classes_and_hooks() -> None:
    names = backticked()
    assert sum(bool(DOTTED.match(n)) for n in names) > 30
    assert sum(bool(HOOK.match(n)) for n in names) >= 4


@pytest.mark.parametrize("name", [n for n in backticked() if DOTTED.match(n)])
def test_every_dotted_name_exists(name: str) -> None:
    if name in NOT_CODE:
        return
    try:
        resolve(name)
    except (ModuleNotFoundError, AttributeError) as exc:
        pytest.fail(f"docs/design.md names `{name}`, which does not exist: {exc}")


@pytest.mark.parametrize("name", [n for n in backticked() if HOOK.match(n)])
def test_every_hook_is_specified(name: str) -> None:
    """A ``naiad_*`` name is a distribution's package (``naiad_backend_onnx``) or a hook."""
    if importlib.util.find_spec(name) is not None:
        return
    specified = {n for module in (hookspecs, scheduling_hookspecs) for n in dir(module)
                 if n.startswith("naiad_")}
    assert name in specified, f"docs/design.md names hook `{name}`; hookspecs has {specified}"


@pytest.mark.parametrize("name", [n for n in backticked() if PATH.match(n)])
def test_every_path_exists(name: str) -> None:
    candidates = [ROOT / name, ROOT / "benchmarks" / name]
    assert any(p.exists() for p in candidates), f"docs/design.md names `{name}`, not found"


@pytest.mark.parametrize("group", sorted({*ENTRY_POINT_GROUPS.values(), COMMANDS_GROUP}))
@pytest.mark.parametrize("page", ["design.md", "plugin-author-guide.md"])
def test_every_entry_point_group_is_listed(page: str, group: str) -> None:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    assert f"`{group}`" in text, f"docs/{page} does not list the entry point group {group}"

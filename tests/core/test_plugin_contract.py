"""The plugin contract kept true (datasette's ``test_plugin_hooks_are_documented``, widened):

- every hook of ``naiad.hookspecs`` and every public name of every public module is in the
  reference of ``docs/plugin-author-guide.md`` with its real signature, and the reference
  names nothing that does not exist;
- every hook has a caller in the core, through the ``PluginManager`` method that asks it;
- the plugins (``plugins/*/`` and the test fixtures' distributions) import no naiad module
  outside :data:`naiad.plugins.PUBLIC_MODULES`;
- schedulers are built in: no entry point group, an in-process registration is asked first.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

import naiad
from naiad import hookspecs
from naiad.plugins import ENTRY_POINT_GROUPS, PUBLIC_MODULES, PluginManager
from naiad.scheduling import hookspecs as scheduling_hookspecs
from naiad.scheduling.default import DefaultScheduler

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "plugin-author-guide.md"
CORE = ROOT / "core" / "naiad"

# A reference section: "### `naiad.types`"; an entry: "- `Target(params) -> returns`: text".
SECTION = re.compile(r"^### `(naiad(?:\.\w+)*)`\s*$")
ENTRY = re.compile(r"^- `([\w.]+)(?:\(([^`]*)\))?(?:\s*->[^`]*)?`")

Signature = tuple[str, ...] | None  # parameter names, or None for a name without a call


# --- what the code offers -----------------------------------------------------------------


def parameters(function: object, drop_first: bool = False) -> tuple[str, ...]:
    names = []
    star = False
    for parameter in inspect.signature(function).parameters.values():  # type: ignore[arg-type]
        if parameter.kind is parameter.KEYWORD_ONLY and not star:
            names.append("*")
            star = True
        prefix = {parameter.VAR_POSITIONAL: "*", parameter.VAR_KEYWORD: "**"}.get(
            parameter.kind, "")
        star = star or parameter.kind is parameter.VAR_POSITIONAL
        names.append(prefix + parameter.name)
    return tuple(names[1:] if drop_first else names)


def public_names(module_name: str) -> list[str]:
    """``__all__``, or every public top-level class, function and assignment of the source
    (not what it imports)."""
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return list(module.__all__)
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[arg-type]
    names = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in names if not name.startswith("_")]


def class_members(cls: type) -> dict[str, Signature]:
    """The class itself (a dataclass with its constructor's parameters) and what it defines:
    methods with their parameters, properties and attributes by name. Enum members are the
    class's values, not entries."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    members: dict[str, Signature] = {
        cls.__name__: parameters(cls) if dataclasses.is_dataclass(cls) else None}
    for name, value in vars(cls).items():
        if name.startswith("_") or name in fields:
            continue
        if isinstance(cls, enum.EnumMeta) and name in cls.__members__:
            continue
        if isinstance(value, (staticmethod, classmethod)):
            members[f"{cls.__name__}.{name}"] = parameters(
                value.__func__, drop_first=isinstance(value, classmethod))
        elif inspect.isfunction(value):
            members[f"{cls.__name__}.{name}"] = parameters(value, drop_first=True)
        else:  # a property, a slot, a class attribute
            members[f"{cls.__name__}.{name}"] = None
    return members


def offered(module_name: str) -> dict[str, Signature]:
    """Every name a plugin author may use in ``module_name``, with its signature."""
    module = importlib.import_module(module_name)
    found: dict[str, Signature] = {}
    for name in public_names(module_name):
        value = getattr(module, name)
        if inspect.isclass(value):
            found.update(class_members(value))
        elif inspect.isfunction(value):
            found[name] = parameters(value)
        else:
            found[name] = None
    return found


# --- what the guide documents -------------------------------------------------------------


def documented() -> dict[str, dict[str, list[Signature]]]:
    """The guide's reference: module -> target -> the signature of each entry naming it."""
    sections: dict[str, dict[str, list[Signature]]] = {}
    current: dict[str, list[Signature]] | None = None
    for line in GUIDE.read_text().splitlines():
        heading = SECTION.match(line)
        if heading:
            current = sections.setdefault(heading.group(1), {})
            continue
        if line.startswith("#"):
            current = None
            continue
        entry = ENTRY.match(line)
        if entry and current is not None:
            params = entry.group(2)
            signature = None if params is None else tuple(
                p.split("=")[0].split(":")[0].strip() for p in params.split(",") if p.strip())
            current.setdefault(entry.group(1), []).append(signature)
    return sections


def test_the_guide_has_a_reference_section_for_each_public_module():
    assert sorted(documented()) == sorted(PUBLIC_MODULES)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_is_documented_with_its_signature(module_name):
    expected = offered(module_name)
    assert expected, f"{module_name} offers nothing?"
    found = documented().get(module_name, {})
    missing = sorted(set(expected) - set(found))
    assert not missing, f"{GUIDE.name}, section {module_name}, lacks entries for {missing}"
    unknown = sorted(set(found) - set(expected))
    assert not unknown, f"{GUIDE.name}, section {module_name}, documents {unknown}, which " \
                        f"{module_name} does not offer (a stale entry, or a private name)"
    module = importlib.import_module(module_name)
    for target, signatures in found.items():
        want = expected[target]
        signatures = [s for s in signatures if s is not None] or signatures
        if want is None and inspect.isclass(getattr(module, target, None)) \
                and signatures != [None]:
            # A class that is not a dataclass may be shown bare, or with its constructor.
            want = parameters(getattr(module, target))
        for signature in signatures:
            assert signature == want, (
                f"{GUIDE.name} documents {target}"
                f"{'' if signature is None else '(' + ', '.join(signature) + ')'}; the code "
                f"has {target}{'' if want is None else '(' + ', '.join(want) + ')'}")


def test_every_hook_is_in_the_reference():
    hooks = {name for name in vars(hookspecs) if name.startswith("naiad_")}
    assert {"naiad_backend", "naiad_cache", "naiad_source"} <= hooks
    assert hooks <= set(documented()["naiad.hookspecs"])
    # The scheduler hook is the core's own, beside the schedulers, not a public one.
    assert "naiad_scheduler" not in hooks and hasattr(scheduling_hookspecs, "naiad_scheduler")


def test_the_reference_reader_sees_a_wrong_signature():
    # The check above must be able to fail: an entry with the wrong parameters is read as
    # such, and differs from the code's.
    entry = ENTRY.match("- `naiad_backend(name) -> Backend | None`: text")
    assert entry is not None and entry.groups() == ("naiad_backend", "name")
    assert offered("naiad.hookspecs")["naiad_backend"] == ("name", "backend_config")


# --- every hook has a caller --------------------------------------------------------------


def core_modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(CORE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def manager_methods_calling(hook: str) -> list[str]:
    """The ``PluginManager`` methods whose body calls ``self.pm.hook.<hook>(...)``."""
    tree = ast.parse((CORE / "plugins.py").read_text())
    manager = next(node for node in tree.body
                   if isinstance(node, ast.ClassDef) and node.name == "PluginManager")
    methods = []
    for method in manager.body:
        if isinstance(method, ast.FunctionDef) and any(
                isinstance(node, ast.Call) and ast.unparse(node.func) == f"self.pm.hook.{hook}"
                for node in ast.walk(method)):
            methods.append(method.name)
    return methods


def callers_of(method: str) -> list[str]:
    """Where the core calls ``<...plugins...>.<method>(...)`` outside naiad/plugins.py."""
    found = []
    for path, tree in core_modules():
        if path.name == "plugins.py" and path.parent == CORE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == method and "plugins" in ast.unparse(node.func.value):
                found.append(f"{path.relative_to(CORE)}:{node.lineno}")
    return found


@pytest.mark.parametrize("hook", sorted(n for n in vars(hookspecs) if n.startswith("naiad_")))
def test_every_hook_has_a_caller_in_the_core(hook):
    methods = manager_methods_calling(hook)
    assert methods, f"no PluginManager method calls the hook {hook}"
    callers = [where for method in methods for where in callers_of(method)]
    assert callers, f"{hook}: PluginManager.{'/'.join(methods)} is called nowhere in the core"


# --- plugins import only public modules ---------------------------------------------------


def plugin_sources() -> list[Path]:
    roots = [*ROOT.glob("plugins/*/"), *ROOT.glob("tests/fixtures/naiad-*/")]
    return sorted(path for root in roots for path in root.rglob("*.py")
                  if not {"build", "dist"} & set(path.relative_to(root).parts)
                  and not any(part.endswith(".egg-info") for part in path.parts))


def private_imports(source: str, filename: str = "<source>") -> list[str]:
    """``file:line module`` for each import of a naiad module outside PUBLIC_MODULES
    (``from naiad import x`` counts as ``naiad.x`` when that is a module)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            if node.module == "naiad":
                modules += [f"naiad.{alias.name}" for alias in node.names
                            if importlib.util.find_spec(f"naiad.{alias.name}") is not None]
        for module in modules:
            if (module == "naiad" or module.startswith("naiad.")) \
                    and module not in PUBLIC_MODULES:
                found.append(f"{filename}:{node.lineno} {module}")
    return found


def test_plugins_import_only_public_naiad_modules():
    sources = plugin_sources()
    packages = {path.relative_to(ROOT).parts[1] for path in sources}
    assert {"backend-onnx", "backend-python", "backend-tensorrt", "backend-torch"} <= packages
    found = [hit for path in sources
             for hit in private_imports(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, ("plugins import naiad modules outside naiad.plugins.PUBLIC_MODULES "
                       "(move what they need to naiad.backend_utils): " + "; ".join(found))


@pytest.mark.parametrize(("source", "flagged"), [
    ("from naiad.batching import merge_inputs", ["naiad.batching"]),
    ("import naiad.models.signature", ["naiad.models.signature"]),
    ("from naiad import datatypes", ["naiad.datatypes"]),
    ("if TYPE_CHECKING:\n    from naiad.scheduling.base import Scheduler",
     ["naiad.scheduling.base"]),
    ("import naiad\nfrom naiad import hookimpl, types\nfrom naiad.backend_utils import "
     "gpu_count\nfrom naiad_backend_onnx.session import model_path", []),
])
def test_the_import_check_tells_public_from_private(source, flagged):
    assert [hit.split()[-1] for hit in private_imports(source)] == flagged


def test_public_modules_import():
    for name in PUBLIC_MODULES:
        importlib.import_module(name)


# --- schedulers are built in --------------------------------------------------------------


def test_schedulers_have_no_entry_point_group_and_an_embedder_registers_one_in_process():
    assert not any("schedul" in group for group in ENTRY_POINT_GROUPS.values())
    plain = ModelConfig(name="plain")
    custom = ModelConfig(name="custom")
    pm = PluginManager()
    assert pm.scheduler(plain) is DefaultScheduler

    def factory(context):
        raise AssertionError("not built in this test")

    class Embedded:
        @naiad.hookimpl(tryfirst=True)
        def naiad_scheduler(self, config):
            return factory if config.name == "custom" else None

    pm.register(Embedded(), name="embedded")
    assert pm.scheduler(custom) is factory
    assert pm.scheduler(plain) is DefaultScheduler

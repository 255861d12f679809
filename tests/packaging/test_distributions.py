"""Every distribution of the checkout builds for release: scripts/release builds each sdist and
wheel (with the venv's setuptools, no index), twine checks them, and the set agrees on its
version, on the core its plugins accept, and on the extras and install hints that name them.
The long variant installs a built core and plugin into a fresh virtual environment."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import naiad
from naiad.plugins import ENTRY_POINT_GROUPS, KNOWN_PLUGINS

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "scripts" / "release"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def load_release_script() -> ModuleType:
    """scripts/release as a module (it has no .py suffix), for its checks and folder list."""
    loader = importlib.machinery.SourceFileLoader("naiad_release_script", str(RELEASE))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


release = load_release_script()


def project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def wheel_stem(name: str) -> str:
    return canonicalize_name(name).replace("-", "_")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """scripts/release --no-isolation into a fresh folder: (the folder, its output)."""
    outdir = tmp_path_factory.mktemp("dist")
    # rich (twine's output) wraps lines at the terminal width and colours them
    env = {**os.environ, "NAIAD_RELEASE_REEXEC": "1", "NO_COLOR": "1", "COLUMNS": "1000"}
    result = subprocess.run([sys.executable, str(RELEASE), "--no-isolation", str(outdir)],
                            capture_output=True, text=True, env=env, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    yield outdir, ANSI.sub("", result.stdout)


@pytest.fixture(scope="module")
def wheels(built: tuple[Path, str]) -> dict[str, object]:
    return {canonicalize_name(w.name): w
            for w in map(release.read_wheel, sorted(built[0].glob("*.whl")))}


def test_the_release_covers_core_plugins_and_tools():
    folders = [d.relative_to(ROOT).as_posix() for d in release.distribution_dirs()]
    assert folders[0] == "core"
    for plugin in sorted((ROOT / "plugins").iterdir()):
        assert (plugin / "pyproject.toml").is_file(), plugin
        assert f"plugins/{plugin.name}" in folders
    for tool in sorted((ROOT / "tools").glob("*/pyproject.toml")):
        assert f"tools/{tool.parent.name}" in folders


def test_every_distribution_has_an_sdist_and_a_wheel_that_twine_passes(built):
    outdir, output = built
    for folder in release.distribution_dirs():
        name = project(folder)["name"]
        version = naiad.__version__
        for artifact in (f"{wheel_stem(name)}-{version}-py3-none-any.whl",
                         f"{wheel_stem(name)}-{version}.tar.gz"):
            assert (outdir / artifact).is_file(), (folder, sorted(os.listdir(outdir)))
            assert f"Checking {outdir / artifact}: PASSED" in output, artifact
    assert len(list(outdir.iterdir())) == 2 * len(release.distribution_dirs())


def test_versions_agree_with_the_core(wheels):
    versions = {name: wheel.version for name, wheel in wheels.items()}
    assert set(versions.values()) == {naiad.__version__}, versions


def shared_classifiers(meta: dict) -> set[str]:
    return {c for c in meta.get("classifiers", ())
            if c.startswith(("Programming Language", "Development Status", "Operating System"))}


def test_metadata_is_consistent_across_distributions():
    core = project(ROOT / "core")
    for folder in release.distribution_dirs():
        meta = project(folder)
        assert meta["readme"] == "README.md", folder
        assert meta["license"] == core["license"], folder
        assert meta["requires-python"] == core["requires-python"], folder
        assert meta["description"], folder
    # the server's own distributions also share their classifiers and have a real README
    # (what the package index shows)
    for folder in [ROOT / "core", *sorted((ROOT / "plugins").iterdir())]:
        assert shared_classifiers(project(folder)) == shared_classifiers(core), folder
        assert len((folder / "README.md").read_text().splitlines()) > 10, folder


def test_every_plugin_depends_on_a_compatible_core(wheels):
    incompatible = release.next_breaking(naiad.__version__)
    for folder in sorted((ROOT / "plugins").iterdir()):
        wheel = wheels[canonicalize_name(project(folder)["name"])]
        on_core = [Requirement(r) for r in wheel.requires
                   if canonicalize_name(Requirement(r).name) == "naiad"]
        assert len(on_core) == 1, (folder, wheel.requires)
        assert on_core[0].specifier.contains(naiad.__version__), on_core
        assert not on_core[0].specifier.contains(incompatible), on_core


def core_extras(wheels) -> dict[str, set[str]]:
    """The core's extras that name naiad distributions: extra -> {distribution==version}."""
    extras: dict[str, set[str]] = {}
    for text in wheels["naiad"].requires:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name.startswith("naiad-") and requirement.marker is not None:
            extra = str(requirement.marker).split("==")[1].strip(' "')
            extras.setdefault(extra, set()).add(f"{name}{requirement.specifier}")
    return extras


def test_core_extras_pull_built_plugins_at_the_core_version(wheels):
    extras = core_extras(wheels)
    plugins = {canonicalize_name(project(f)["name"]) for f in (ROOT / "plugins").iterdir()}
    pinned = {f"{name}=={naiad.__version__}" for name in plugins}
    named = set().union(*extras.values())
    # and the tool that is the core's too: naiad.pytriton (pip install 'naiad[pytriton]')
    tools = {f"naiad-pytriton=={naiad.__version__}"}
    assert named == pinned | tools, "every plugin has an extra, every extra a built plugin"
    for extra, requirements in extras.items():
        if extra != "all":
            assert len(requirements) == 1, (extra, requirements)
    # all: everything that installs without a GPU
    assert extras["all"] == pinned - {f"naiad-backend-tensorrt=={naiad.__version__}"}


def test_install_hints_name_real_distributions_extras_and_folders(wheels):
    extras = core_extras(wheels)
    for (kind, name), plugin in KNOWN_PLUGINS.items():
        assert project(ROOT / plugin.folder)["name"] == plugin.distribution
        wheel = wheels[canonicalize_name(plugin.distribution)]
        assert name in wheel.entry_points[ENTRY_POINT_GROUPS[kind]], (kind, name)
        assert extras[plugin.extra] == {f"{plugin.distribution}=={naiad.__version__}"}
    hinted = {p.distribution for p in KNOWN_PLUGINS.values()}
    assert hinted == {project(f)["name"] for f in (ROOT / "plugins").iterdir()}


def test_wheels_hold_every_module_of_their_folder(built):
    outdir, _ = built
    for folder in release.distribution_dirs():
        root = folder / "src" if (folder / "src").is_dir() else folder  # a src layout
        sources = {p.relative_to(root).as_posix() for p in root.rglob("*")
                   if p.name.endswith(".py") or p.name == "py.typed"
                   if not any(part.endswith(".egg-info") or part in ("build", "__pycache__")
                              for part in p.relative_to(root).parts)}
        wheel = next(outdir.glob(f"{wheel_stem(project(folder)['name'])}-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            missing = sources - set(archive.namelist())
        assert not missing, (folder, sorted(missing))


# --- the release's own checks, on doctored metadata ------------------------------------------


def fake_wheel(name: str, version: str = "1.2.0", requires: tuple[str, ...] = ()) -> object:
    return release.Wheel(Path(f"{name}.whl"), name, version, list(requires), [])


def sdists(*wheels) -> list[Path]:
    return [Path(f"{wheel_stem(w.name)}-{w.version}.tar.gz") for w in wheels]


def test_release_checks_pass_a_consistent_set():
    core = fake_wheel("naiad", requires=('naiad-cache-x==1.2.0; extra == "x"',))
    plugin = fake_wheel("naiad-cache-x", requires=("naiad>=1.2.0,<2",))
    assert release.problems([core, plugin], sdists(core, plugin)) == []


@pytest.mark.parametrize(("plugin_version", "on_core", "extra", "expected"), [
    ("1.1.0", "naiad>=1.2.0,<2", "naiad-cache-x==1.2.0", "is version 1.1.0, the core 1.2.0"),
    ("1.2.0", "naiad>=1.3", "naiad-cache-x==1.2.0", "excludes the core 1.2.0"),
    ("1.2.0", "naiad>=1.0", "naiad-cache-x==1.2.0", "also accepts the core 2.0.0"),
    ("1.2.0", "naiad>=1.2.0,<2", "naiad-cache-y==1.2.0", "names no distribution built here"),
    ("1.2.0", "naiad>=1.2.0,<2", "naiad-cache-x>=1.0", "is not pinned to ==1.2.0"),
])
def test_release_checks_name_what_is_wrong(plugin_version, on_core, extra, expected):
    core = fake_wheel("naiad", requires=(f'{extra}; extra == "x"',))
    plugin = fake_wheel("naiad-cache-x", plugin_version, (on_core,))
    found = release.problems([core, plugin], sdists(core, plugin))
    assert any(expected in problem for problem in found), found


def test_release_checks_find_a_missing_sdist_and_pre_1_0_bounds():
    core = fake_wheel("naiad", "0.3.1")
    plugin = fake_wheel("naiad-cache-x", "0.3.1", ("naiad>=0.3,<1",))
    found = release.problems([core, plugin], sdists(core))
    assert any("no sdist naiad_cache_x-0.3.1.tar.gz" in p for p in found), found
    assert any("also accepts the core 0.4.0" in p for p in found), found


# --- a fresh environment ----------------------------------------------------------------------


@pytest.mark.long
def test_built_core_and_plugin_install_into_a_fresh_venv(built, wheels, tmp_path):
    """The core with its [local-cache] extra from the built folder alone (--no-index): the
    extra pulls the plugin by name. Third-party dependencies come from the index first."""
    outdir, _ = built
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    third_party = [r for name in ("naiad", "naiad-cache-local") for r in wheels[name].requires
                   if Requirement(r).marker is None or "extra" not in str(Requirement(r).marker)
                   if not canonicalize_name(Requirement(r).name).startswith("naiad")]
    subprocess.run([*pip, *third_party], check=True, timeout=600)
    subprocess.run([*pip, "--no-index", "--find-links", str(outdir), "naiad[local-cache]"],
                   check=True, timeout=300)
    naiad_command = str(env_dir / "bin" / "naiad")
    version = subprocess.run([naiad_command, "--version"], capture_output=True, text=True,
                             check=True, timeout=60)
    assert version.stdout.strip() == f"naiad {naiad.__version__}"
    plugins = subprocess.run([naiad_command, "plugins"], capture_output=True, text=True,
                             check=True, timeout=60)
    assert f"naiad-cache-local {naiad.__version__}" in plugins.stdout, plugins.stdout
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout

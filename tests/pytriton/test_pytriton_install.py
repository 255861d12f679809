"""naiad.pytriton comes from a distribution of its own (tools/naiad-pytriton) but lives in
the core's package ``naiad``: importable from an editable install (this test environment's,
scripts/test) and from a normal one (its wheel built and unpacked next to the core's
package, without the editable installs in sight)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import naiad
import naiad.pytriton.triton

ROOT = Path(__file__).resolve().parents[2]
CHECK = ("import naiad, naiad.pytriton.triton as t, naiad.pytriton.client as c; "
         "print(naiad.__file__); print(t.__file__); print(c.ModelClient.__name__)")


def test_editable_install_extends_the_core_package() -> None:
    assert Path(naiad.__file__).parent == ROOT / "core" / "naiad"
    assert Path(naiad.pytriton.triton.__file__).is_relative_to(ROOT / "tools" / "naiad-pytriton")
    assert naiad.__version__ == naiad.pytriton.__version__


def test_normal_install_of_the_wheel_next_to_the_core(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(wheels), str(ROOT / "tools" / "naiad-pytriton")],
        capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    target = tmp_path / "site"
    # The core as a normal install lays it out: its package folder in site-packages.
    shutil.copytree(ROOT / "core" / "naiad", target / "naiad",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (wheel,) = wheels.glob("naiad_pytriton-*.whl")
    with zipfile.ZipFile(wheel) as archive:  # what pip does with a pure-Python wheel's files
        names = archive.namelist()
        archive.extractall(target)
    assert "naiad/__init__.py" not in names, \
        "naiad-pytriton must not ship (and overwrite) the core's naiad/__init__.py"
    # -S: no site processing, so none of this environment's editable installs; its
    # site-packages is a plain path entry for the dependencies (numpy, tritonclient...).
    deps = sysconfig.get_paths()["purelib"]
    done = subprocess.run([sys.executable, "-S", "-c", CHECK], cwd=tmp_path,
                          env={"PYTHONPATH": f"{target}:{deps}"}, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    core_file, pytriton_file, client = done.stdout.split()
    assert core_file == str(target / "naiad" / "__init__.py")
    assert pytriton_file == str(target / "naiad" / "pytriton" / "triton.py")
    assert client == "ModelClient"

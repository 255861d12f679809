"""PyTriton 0.7's own CPU examples and functional tests (../shared/upstream/pytriton-88e92b5),
copied with only their imports changed from ``pytriton.`` to ``naiad.pytriton.``, and run
against naiad as PyTriton's functional tests run them."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

UPSTREAM = Path(__file__).resolve().parents[2].parent / "shared" / "upstream" / "pytriton-88e92b5"
DRIVER = Path(__file__).with_name("example_driver.py")
_IMPORT = re.compile(r"^(\s*)(from|import) pytriton(\.|\s)", re.MULTILINE)


def upstream_copy(tmp_path: Path) -> Path:
    """A writable copy of the upstream folder whose imports name naiad.pytriton; skips
    when the folder is not there."""
    if not UPSTREAM.is_dir():
        pytest.skip(f"PyTriton's upstream examples are not at {UPSTREAM}")
    target = tmp_path / "pytriton"
    shutil.copytree(UPSTREAM, target)
    for path in target.rglob("*.py"):
        path.chmod(0o644)
        text = path.read_text()
        path.write_text(_IMPORT.sub(r"\1\2 naiad.pytriton\3", text))
    return target


def load_functional_test(root: Path, name: str) -> ModuleType:
    """The upstream functional test ``tests/functional/<name>/test.py`` as a module (its
    verify_client_output is the judge)."""
    path = root / "tests" / "functional" / name / "test.py"
    spec = importlib.util.spec_from_file_location(f"upstream_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def have_private_network() -> bool:
    """Whether ``unshare -n`` works here (root, or user namespaces)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    return probe.returncode == 0


def run_example(folder: Path, client: str, servers: list[str], timeout_s: float = 120.0,
                env: dict[str, str] | None = None) -> dict[str, dict[str, object]]:
    """The driver's report for one example, run in a private network namespace (the
    examples listen on PyTriton's fixed ports 8000-8002)."""
    if not have_private_network():
        pytest.skip("needs `unshare -n` (root or user namespaces) and `ip`: the examples use "
                    "PyTriton's fixed ports 8000-8002")
    command = ["unshare", "-n", "sh", "-c",
               'ip link set lo up && exec "$0" "$@"', sys.executable, str(DRIVER),
               str(timeout_s), client, *servers]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True,
                          timeout=timeout_s + 90, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

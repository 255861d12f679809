"""An environment's interpreter: where it is, what activating the environment would set for
it, and one start to check that it runs (and has numpy, which the worker needs)."""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from naiad.errors import unavailable
from naiad_backend_python.environment.commands import child_env, tail

log = logging.getLogger("naiad.backend.python")

SECONDS = 1.0


#: Starting an environment's interpreter once, to check that it runs and read its version.
PROBE_TIMEOUT_S = 60 * SECONDS


@dataclass(frozen=True)
class WorkerEnvironment:
    """How to start a model's worker process."""

    #: The interpreter the worker process is started with.
    python: str
    #: Variables to set for the worker, over the server's own (``PATH``, ``LD_LIBRARY_PATH``,
    #: ``VIRTUAL_ENV`` or ``CONDA_PREFIX``): what activating the environment would set.
    variables: dict[str, str]
    #: For the log: where the interpreter comes from.
    description: str


def interpreter(root: Path, where: str, in_archive: bool = False) -> str:
    """``<root>/bin/python``, else ``<root>/bin/python3``: the path as it lies, not resolved,
    so that a venv's interpreter finds its pyvenv.cfg."""
    for name in ("python", "python3"):
        candidate = root / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    for name in ("python", "python3"):
        candidate = root / "bin" / name
        if candidate.is_symlink():
            raise unavailable(f"{where}: bin/{name} is a link to '{os.readlink(candidate)}', "
                              f"which does not exist on this machine")
    if in_archive:
        top = sorted(p.name for p in root.iterdir())[:5]
        raise unavailable(f"{where}: the archive holds no bin/python or bin/python3 at its "
                          f"root (its top level: {', '.join(top) or 'nothing'}); pack the "
                          f"environment's contents, as conda-pack does")
    raise unavailable(f"{where}: the directory holds no executable bin/python or bin/python3")


def activation_variables(root: Path, library_path: bool) -> dict[str, str]:
    """What ``source <root>/bin/activate`` sets that matters to a process started directly
    with ``<root>/bin/python``. Triton also puts ``<root>/lib`` first on LD_LIBRARY_PATH."""
    variables = {"PATH": _prepend(root / "bin", os.environ.get("PATH", os.defpath))}
    if library_path:
        variables["LD_LIBRARY_PATH"] = _prepend(root / "lib",
                                                os.environ.get("LD_LIBRARY_PATH", ""))
    if (root / "pyvenv.cfg").is_file():
        variables["VIRTUAL_ENV"] = str(root)
    if (root / "conda-meta").is_dir():
        variables["CONDA_PREFIX"] = str(root)
    return variables


def _prepend(folder: Path, search_path: str) -> str:
    return os.pathsep.join([str(folder), search_path]) if search_path else str(folder)


def probe(model_name: str, python: str, variables: dict[str, str], where: str) -> str:
    """Start ``python`` once: it must run. Returns its version; warns when it lacks numpy,
    which the worker needs."""
    code = ("import sys, importlib.util; print('%d.%d.%d' % sys.version_info[:3]); "
            "print(importlib.util.find_spec('numpy') is not None)")
    try:
        result = subprocess.run([python, "-c", code], env=child_env(variables),
                                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                errors="replace", timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise unavailable(f"{where}: {python} did not answer within "
                          f"PROBE_TIMEOUT_S={PROBE_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise unavailable(f"{where}: {python} cannot be started: {exc.strerror}") from None
    lines = result.stdout.split()
    if result.returncode != 0 or len(lines) != 2:
        raise unavailable(f"{where}: {python} does not run (exit status {result.returncode}): "
                          f"{tail(result.stderr.splitlines())}")
    version, has_numpy = lines
    if has_numpy != "True":
        log.warning("model '%s': %s has no numpy, which the worker needs", model_name, python)
    return version

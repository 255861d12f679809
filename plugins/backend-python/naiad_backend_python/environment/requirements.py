"""A ``requirements.txt`` beside config.pbtxt (naiad only): pip builds a virtual environment
from the server's interpreter into the cache, under a hash of the requirements, the
interpreter and the platform. Requirement files are read first, refusing anything that
resolves outside the model's folder."""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import platform
import re
import shlex
import sys
import sysconfig
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from naiad.errors import unavailable
from naiad_backend_python.environment.archives import within
from naiad_backend_python.environment.cache import BUILD_FORMAT, prepared_entry
from naiad_backend_python.environment.commands import run_logged
from naiad_backend_python.environment.interpreters import WorkerEnvironment, activation_variables

log = logging.getLogger("naiad.backend.python")

#: The file beside config.pbtxt that asks for a built environment (naiad only).
REQUIREMENTS_FILE = "requirements.txt"


_ENV_VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)\}")  # what pip expands in requirement files


_COMMENT = re.compile(r"(^|\s+)#.*$")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


_NAME_AT_URL = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*@\s*(\S+)")


_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar")


# Options of a requirements file whose value names another requirements file ...
_FILE_OPTIONS = {"--requirement": False, "--constraint": True}  # -> is a constraints file


# ... or a package, a folder of packages or an index, which may be local
_LOCATION_OPTIONS = ("--editable", "--find-links", "--index-url", "--extra-index-url")


_SHORT_OPTIONS = {"-r": "--requirement", "-c": "--constraint", "-e": "--editable",
                  "-f": "--find-links", "-i": "--index-url"}


@dataclass
class _Requirements:
    """What the requirement files of a model ask for, as far as naiad needs to know."""

    files: list[tuple[str, bytes]] = field(default_factory=list)  # (path in model, content)
    names: set[str] = field(default_factory=set)  # canonical names of named requirements
    constrained: set[str] = field(default_factory=set)  # ... of constraints
    local: bool = False  # some requirement is a path or a file: URL
    seen: set[Path] = field(default_factory=set)


def requirements_env(model_name: str, model_dir: Path, requirements: Path, cache_dir: Path,
                      pip_timeout_s: float) -> WorkerEnvironment:
    where = f"model '{model_name}': {requirements}"
    model_root = model_dir.resolve()
    found = _Requirements()
    _read_requirement_file(requirements, False, model_root, where, found)
    numpy_requirement = _numpy_requirement(found)
    base_python = _base_interpreter()
    key = hashlib.sha256()
    parts = [BUILD_FORMAT, sys.version, sysconfig.get_platform(), platform.machine(),
             base_python, numpy_requirement]
    if found.local:  # "./pkg" means something else in each model folder
        parts.append(str(model_root))
    for name, content in found.files:
        parts += [name, str(len(content))]
    for part in parts:
        key.update(part.encode() + b"\0")
    for _, content in found.files:
        key.update(content)
    entry = cache_dir / f"req-{key.hexdigest()}"

    def build(lock_fd: int) -> dict[str, str]:
        log.info("model '%s': building a Python environment for %s in %s (with %s for the "
                 "worker)", model_name, requirements, entry, numpy_requirement)
        started = time.monotonic()
        deadline = started + pip_timeout_s
        limit = f"pip_timeout_s={pip_timeout_s:g} s"
        # A venv made from a venv's interpreter would chain to it: start from the base one.
        run_logged(model_name, "venv", [base_python, "-m", "venv", str(entry)], cwd=model_dir,
                    variables={}, lock_fd=lock_fd, deadline=deadline, limit=limit,
                    failure=f"{where}: creating a virtual environment with {base_python} failed")
        python = str(entry / "bin" / "python")
        command = [python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                   "--progress-bar", "off", "-r", str(requirements), numpy_requirement]
        # cwd: pip resolves relative paths in requirements.txt against it
        run_logged(model_name, "pip", command, cwd=model_dir, variables={}, lock_fd=lock_fd,
                    deadline=deadline, limit=limit, failure=f"{where}: pip install failed")
        log.info("model '%s': built the Python environment for %s in %.1f s", model_name,
                 requirements, time.monotonic() - started)
        return {"python": "bin/python", "version": platform.python_version(),
                "source": str(requirements)}

    prepared_entry(model_name, entry, f"{REQUIREMENTS_FILE} {requirements}", build)
    return WorkerEnvironment(str(entry / "bin" / "python"),
                             activation_variables(entry, library_path=False),
                             f"{REQUIREMENTS_FILE} {requirements} (virtual environment "
                             f"{entry})")


def _base_interpreter() -> str:
    base = getattr(sys, "_base_executable", "") or sys.executable
    return base if os.path.exists(base) else sys.executable


def _numpy_requirement(found: _Requirements) -> str:
    """numpy for the worker: pinned to the server's version, so pip's cache can serve it,
    unless the model's requirements say which numpy they want."""
    if "numpy" in found.names or "numpy" in found.constrained:
        return "numpy"
    try:
        return f"numpy=={importlib.metadata.version('numpy')}"
    except importlib.metadata.PackageNotFoundError:
        return "numpy"


def _read_requirement_file(path: Path, constraints: bool, model_root: Path, where: str,
                           found: _Requirements) -> None:
    """Read one requirements file and those it includes, refusing anything that resolves
    outside the model folder (nothing from a model may reach outside its folder)."""
    resolved = path.resolve()
    if not within(str(resolved), str(model_root)):
        raise unavailable(f"{where}: {path} resolves to {resolved}, outside the model folder")
    if resolved in found.seen:
        return
    found.seen.add(resolved)
    try:
        content = resolved.read_bytes()
    except OSError as exc:
        raise unavailable(f"{where}: cannot read {path}: {exc.strerror}") from None
    found.files.append((str(resolved.relative_to(model_root)), content))
    folder = resolved.parent
    for line in _logical_lines(content.decode("utf-8-sig", errors="replace")):
        if variable := _ENV_VARIABLE.search(line):
            # pip would fill it in from the server's environment (a secret could leave in a
            # URL, and come back in an error): a model's file must say what it means.
            raise unavailable(f"{where}: {path} uses the environment variable "
                              f"{variable.group(0)}, which pip would take from the server's "
                              f"environment; naiad does not expand variables in "
                              f"{REQUIREMENTS_FILE}: write the value itself")
        if line.startswith("-"):
            _read_options(line, constraints, folder, model_root, where, found)
            continue
        tokens = line.split()
        first = tokens[0].rstrip(";")
        if named := _NAME_AT_URL.match(line):
            _check_location(named.group(3), [model_root, folder], model_root, where, found)
            name = named.group(1)
        elif _SCHEME.match(first) or "/" in first or os.sep in first or first.startswith(
                ".") or first.endswith(_ARCHIVE_SUFFIXES):
            # pip reads these as a URL or a path, relative to its working folder
            _check_location(first, [model_root, folder], model_root, where, found)
            continue
        else:
            name = match.group(1) if (match := _NAME.match(line)) else ""
        if name:
            canonical = re.sub(r"[-_.]+", "-", name).lower()
            (found.constrained if constraints else found.names).add(canonical)


def _logical_lines(text: str) -> Iterator[str]:
    """Lines as pip reads them: ``\\`` continues a line, ``#`` after a space ends it."""
    pending = ""
    for raw in text.splitlines():
        if raw.endswith("\\") and not _COMMENT.search(raw):
            pending += raw[:-1]
            continue
        line = _COMMENT.sub("", pending + raw).strip()
        pending = ""
        if line:
            yield line
    if line := _COMMENT.sub("", pending).strip():
        yield line


def _read_options(line: str, constraints: bool, folder: Path, model_root: Path, where: str,
                  found: _Requirements) -> None:
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        raise unavailable(f"{where}: cannot read the line '{line}': {exc}") from None
    index = 0
    while index < len(tokens):
        option, value = tokens[index], None
        if option.startswith("--") and "=" in option:
            option, value = option.split("=", 1)
        elif option[:2] in _SHORT_OPTIONS and not option.startswith("--"):
            option, value = _SHORT_OPTIONS[option[:2]], option[2:] or None
        if option.startswith("--") and len(option) > 2:
            # pip's option parser takes any unambiguous prefix (--req for --requirement)
            matches = [name for name in (*_FILE_OPTIONS, *_LOCATION_OPTIONS)
                       if name.startswith(option)]
            if matches:
                if value is None:
                    index += 1
                    value = tokens[index] if index < len(tokens) else ""
                if matches[0] in _FILE_OPTIONS and len(matches) == 1:
                    _include(value, constraints or _FILE_OPTIONS[matches[0]], folder,
                             model_root, where, found)
                else:
                    _check_location(value, [model_root, folder], model_root, where, found)
        index += 1


def _include(value: str, constraints: bool, folder: Path, model_root: Path, where: str,
             found: _Requirements) -> None:
    """``-r FILE`` / ``-c FILE``: FILE is relative to the including file, as pip reads it."""
    if _SCHEME.match(value):
        scheme = value.split(":", 1)[0].lower()
        if scheme != "file":
            raise unavailable(f"{where}: '{value}': a requirements file included by a model "
                              f"must be a file in the model folder")
        value = urllib.request.url2pathname(urllib.parse.urlsplit(value).path)
    _read_requirement_file(folder / value, constraints, model_root, where, found)


def _check_location(value: str, bases: list[Path], model_root: Path, where: str,
                    found: _Requirements) -> None:
    """A package location (``-e``, ``-f``, ``--index-url``, a path or URL requirement):
    remote URLs pass; local paths and ``file:`` URLs must resolve inside the model folder,
    whichever folder pip takes them relative to."""
    if _SCHEME.match(value):
        scheme = value.split(":", 1)[0].lower()
        if scheme != "file" and not scheme.endswith("+file"):
            return
        path = urllib.request.url2pathname(
            urllib.parse.urlsplit(value.split("+", 1)[-1] if "+" in scheme else value).path)
    else:
        path = re.sub(r"\[[^\]]*\]$", "", value)  # ./pkg[extra]
    found.local = True
    for base in bases:
        resolved = (base / path).resolve()
        if not within(str(resolved), str(model_root)):
            raise unavailable(f"{where}: '{value}' resolves to {resolved}, outside the model "
                              f"folder")

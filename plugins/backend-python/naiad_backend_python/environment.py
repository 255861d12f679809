"""Per-model execution environments: which interpreter a Python model's workers start with.

The backend calls :func:`worker_environment` once per model instance, before it starts the
instance's worker process. The answer, in this order:

1. ``EXECUTION_ENV_PATH`` in config.pbtxt's ``parameters``, as Triton reads it: an absolute
   path (``$$TRITON_MODEL_DIRECTORY`` stands for the model folder) to a tarball of an
   environment (conda-pack's output, or any ``.tar.gz`` whose root holds ``bin/python``) or to
   a directory that is such an environment. A tarball is unpacked once into the cache, under
   the SHA-256 of its bytes, and conda-pack's ``bin/conda-unpack`` runs once there.
2. Beyond Triton: a ``requirements.txt`` beside config.pbtxt. pip builds a virtual environment
   from the server's interpreter into the cache, under a hash of the requirements, the
   interpreter and the platform; every later start reuses it.
3. Otherwise the server's own interpreter.

The cache is shared by the threads that load models and by server processes on one machine.
Each entry is built under an exclusive ``flock`` on ``<entry>.lock``, and it counts as finished
only once ``<entry>.ready`` has been renamed into place after the last step. An entry without
it (a crash, a kill, a failed build) is removed and built again. The entry is built at its
final path, not renamed there when done, because conda-unpack and venv both write the
environment's absolute path into its files (prefixes, ``bin/activate``, script shebangs).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import gzip
import hashlib
import importlib.metadata
import json
import logging
import lzma
import os
import platform
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tarfile
import threading
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from naiad.errors import unavailable

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger("naiad.backend.python")

#: The model parameter Triton's python backend reads (its exact spelling).
EXECUTION_ENV_PATH = "EXECUTION_ENV_PATH"
#: Replaced by the model folder in EXECUTION_ENV_PATH (Triton's exact spelling).
MODEL_DIRECTORY_KEYWORD = "$$TRITON_MODEL_DIRECTORY"
#: The file beside config.pbtxt that asks for a built environment (naiad only).
REQUIREMENTS_FILE = "requirements.txt"
#: Variables the worker launcher removes from the worker's environment, as bin/activate does:
#: a PYTHONHOME meant for the server's interpreter breaks any other interpreter.
UNSET_VARIABLES = ("PYTHONHOME",)

SECONDS = 1.0
#: conda-unpack rewrites the prefix in every file that holds it: minutes for a large env.
CONDA_UNPACK_TIMEOUT_S = 600 * SECONDS
#: Starting an environment's interpreter once, to check that it runs and read its version.
PROBE_TIMEOUT_S = 60 * SECONDS
#: The most lines of a failed build's output that its error message carries ...
ERROR_TAIL_LINES = 15
#: ... and the most characters, in all ...
ERROR_TAIL_CHARS = 4000
#: ... and per line (pip's "Ignored the following versions" line lists every version seen).
ERROR_LINE_CHARS = 300
#: How many lines of a build's output are kept to find its error lines in.
OUTPUT_KEPT_LINES = 400
HASH_CHUNK_BYTES = 1024 * 1024
#: Changing how environments are built changes this, so old cache entries are not reused.
BUILD_FORMAT = "naiad-python-env-1"


@dataclass(frozen=True)
class EnvironmentSettings:
    """Where environments are cached and how long building one may take."""

    #: Where unpacked and built environments live; reused across restarts and shared by
    #: server processes (:func:`default_cache_dir` unless configured).
    cache_dir: Path
    #: A requirements.txt build (venv and pip together) that takes longer is stopped and fails.
    pip_timeout_s: float = 600.0


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


def default_cache_dir() -> Path:
    """``$NAIAD_CACHE_DIR/python-envs``, else ``$XDG_CACHE_HOME/naiad/python-envs``, else
    ``~/.cache/naiad/python-envs``."""
    if root := os.environ.get("NAIAD_CACHE_DIR"):
        return Path(root).absolute() / "python-envs"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):  # the XDG spec says to ignore a relative value
        return Path(xdg) / "naiad" / "python-envs"
    return Path.home() / ".cache" / "naiad" / "python-envs"


def worker_environment(model_name: str, model_dir: Path, config: ModelConfig,
                       settings: EnvironmentSettings) -> WorkerEnvironment:
    """The interpreter and variables for the workers of ``model_name``, whose folder
    (``<repository>/<model>``) is ``model_dir``. Unpacks or builds the environment into
    ``settings.cache_dir`` the first time; safe to call from several threads and processes at
    once. Raises an UNAVAILABLE :class:`~naiad.errors.InferenceServerError` naming the model
    and what is wrong when the environment cannot be had."""
    model_dir = Path(model_dir).absolute()
    cache_dir = Path(settings.cache_dir).absolute()
    requirements = model_dir / REQUIREMENTS_FILE
    value = ""
    if EXECUTION_ENV_PATH in config.parameters:  # indexing a protobuf map would add the key
        value = config.parameters[EXECUTION_ENV_PATH].string_value
    if value:
        if os.path.lexists(requirements):
            log.warning("model '%s': %s is ignored because %s is set", model_name,
                        requirements, EXECUTION_ENV_PATH)
        return _execution_env(model_name, model_dir, value, cache_dir)
    if os.path.lexists(requirements):
        return _requirements_env(model_name, model_dir, requirements, cache_dir,
                                 settings.pip_timeout_s)
    return WorkerEnvironment(sys.executable, {}, f"the server's interpreter {sys.executable}")


# ---------------------------------------------------------------- EXECUTION_ENV_PATH


def _execution_env(model_name: str, model_dir: Path, value: str,
                   cache_dir: Path) -> WorkerEnvironment:
    path = value.replace(MODEL_DIRECTORY_KEYWORD, str(model_dir))
    if not os.path.isabs(path):
        raise unavailable(f"model '{model_name}': {EXECUTION_ENV_PATH} '{value}' is a relative "
                          f"path; write an absolute path, or "
                          f"'{MODEL_DIRECTORY_KEYWORD}/{value}' for one in the model folder")
    path = os.path.normpath(path)
    where = f"model '{model_name}': {EXECUTION_ENV_PATH} {path}"
    if os.path.isdir(path):
        root = Path(path)
        python = _interpreter(root, where)
        variables = _activation_variables(root, library_path=True)
        version = _probe(model_name, python, variables, where)
        return WorkerEnvironment(python, variables,
                                 f"{EXECUTION_ENV_PATH} {path} (a directory, Python {version})")
    if not os.path.exists(path):
        raise unavailable(f"{where}: no such file or directory")
    return _tarball_env(model_name, Path(path), where, cache_dir)


def _tarball_env(model_name: str, tarball: Path, where: str,
                 cache_dir: Path) -> WorkerEnvironment:
    entry = cache_dir / _file_digest(tarball, where)

    def build(lock_fd: int) -> dict[str, str]:
        log.info("model '%s': unpacking %s %s into %s", model_name, EXECUTION_ENV_PATH,
                 tarball, entry)
        started = time.monotonic()
        _unpack(tarball, entry, where)
        python = _interpreter(entry, where, in_archive=True)
        variables = _activation_variables(entry, library_path=True)
        unpack_script = entry / "bin" / "conda-unpack"
        if unpack_script.is_file():
            # conda-pack leaves the packing machine's prefix in scripts and libraries;
            # conda-unpack rewrites it to where the env now lies, so it runs at the final path.
            log.info("model '%s': running conda-unpack in %s", model_name, entry)
            _run_logged(model_name, "conda-unpack", [python, str(unpack_script)], cwd=entry,
                        variables=variables, lock_fd=lock_fd,
                        deadline=time.monotonic() + CONDA_UNPACK_TIMEOUT_S,
                        failure=f"{where}: conda-unpack failed",
                        limit=f"CONDA_UNPACK_TIMEOUT_S={CONDA_UNPACK_TIMEOUT_S:g} s")
        version = _probe(model_name, python, variables, where)
        log.info("model '%s': unpacked %s in %.1f s", model_name, tarball,
                 time.monotonic() - started)
        return {"python": os.path.relpath(python, entry), "version": version,
                "source": str(tarball)}

    info = _prepared_entry(model_name, entry, f"{EXECUTION_ENV_PATH} {tarball}", build)
    return WorkerEnvironment(str(entry / info["python"]),
                             _activation_variables(entry, library_path=True),
                             f"{EXECUTION_ENV_PATH} {tarball} (Python {info['version']}, "
                             f"unpacked in {entry})")


def _interpreter(root: Path, where: str, in_archive: bool = False) -> str:
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


def _activation_variables(root: Path, library_path: bool) -> dict[str, str]:
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


def _probe(model_name: str, python: str, variables: dict[str, str], where: str) -> str:
    """Start ``python`` once: it must run. Returns its version; warns when it lacks numpy,
    which the worker needs."""
    code = ("import sys, importlib.util; print('%d.%d.%d' % sys.version_info[:3]); "
            "print(importlib.util.find_spec('numpy') is not None)")
    try:
        result = subprocess.run([python, "-c", code], env=_child_env(variables),
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
                          f"{_tail(result.stderr.splitlines())}")
    version, has_numpy = lines
    if has_numpy != "True":
        log.warning("model '%s': %s has no numpy, which the worker needs", model_name, python)
    return version


# ---------------------------------------------------------------- unpacking a tarball

# What Python's own tarfile checks raise (3.10.12+, 3.11.4+); an empty tuple matches nothing.
_FILTER_ERROR: type[Exception] | tuple[()] = getattr(tarfile, "FilterError", ())

_digest_lock = threading.Lock()
# (path, device, inode, size, mtime) -> sha256: instances of one model hash a tarball once.
_digests: dict[tuple[str, int, int, int, int], str] = {}


def _file_digest(path: Path, where: str) -> str:
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # opening a FIFO would block
            raise unavailable(f"{where}: neither a directory nor a regular file")
        key = (str(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        with _digest_lock:
            if key in _digests:
                return _digests[key]
        digest = hashlib.sha256()
        with open(path, "rb") as stream:
            while chunk := stream.read(HASH_CHUNK_BYTES):
                digest.update(chunk)
    except OSError as exc:
        raise unavailable(f"{where}: cannot be read: {exc.strerror}") from None
    with _digest_lock:
        _digests[key] = digest.hexdigest()
    return digest.hexdigest()


def _unpack(tarball: Path, dest: Path, where: str) -> None:
    """Unpack ``tarball`` into the new folder ``dest``, refusing any member that would land
    or point outside it. Links inside the environment (conda's ``bin/python ->
    python3.11``) stay links."""
    root = str(dest)

    def checked(member: tarfile.TarInfo) -> tarfile.TarInfo:
        refused = _unsafe(member, root)
        if refused:
            raise unavailable(f"{where}: refused to unpack: {refused}")
        return member

    try:
        dest.mkdir()
        with tarfile.open(tarball, "r:*") as archive:
            archive.errorlevel = 2  # every failure raises, none is only logged
            if hasattr(tarfile, "data_filter"):  # 3.11.4+: the standard checks, after ours
                archive.extractall(root, filter=lambda member, path: tarfile.data_filter(
                    checked(member), path))
            else:
                archive.extractall(root, members=(checked(member) for member in archive))
    except _FILTER_ERROR as exc:
        raise unavailable(f"{where}: refused to unpack: {exc}") from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError) as exc:
        raise unavailable(f"{where}: not a readable tar archive ({exc})") from None
    except OSError as exc:
        raise unavailable(f"{where}: unpacking into {dest} failed: {exc}") from None


def _unsafe(member: tarfile.TarInfo, root: str) -> str:
    """Why ``member`` may not be unpacked into ``root``, or ``""``. Python's data filter
    checks much of this too, but it strips a leading ``/`` where naiad refuses, and it is
    missing before Python 3.11.4. Members are checked as they are unpacked, so ``realpath``
    sees the links unpacked before: a chain of links (``x -> sub/..``, then ``sub -> .``,
    then ``x/file``) cannot lead out."""
    name = member.name
    if name.startswith("/") or os.path.isabs(name):
        return f"the member '{name}' has an absolute path"
    if ".." in PurePosixPath(name).parts:
        return f"the member '{name}' has '..' in its path"
    if _outside(os.path.join(root, name), root):
        return f"the member '{name}' would be written outside the environment, through a link"
    if member.issym() or member.islnk():
        target = member.linkname
        kind = "symbolic link" if member.issym() else "hard link"
        if target.startswith("/") or os.path.isabs(target):
            return f"the {kind} '{name}' points to the absolute path '{target}'"
        # a symbolic link is relative to its folder, a hard link to the archive's root
        base = os.path.dirname(name) if member.issym() else ""
        if _outside(os.path.join(root, base, target), root):
            return f"the {kind} '{name}' -> '{target}' points outside the environment"
    elif not (member.isfile() or member.isdir()):
        return f"the member '{name}' is a device or a FIFO"
    return ""


def _outside(path: str, root: str) -> bool:
    """Whether ``path`` leaves ``root``, read as written or with the links on disk followed."""
    return not (_within(os.path.normpath(path), root)
                and _within(os.path.realpath(path), os.path.realpath(root)))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


# ---------------------------------------------------------------- requirements.txt

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


def _requirements_env(model_name: str, model_dir: Path, requirements: Path, cache_dir: Path,
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
        _run_logged(model_name, "venv", [base_python, "-m", "venv", str(entry)], cwd=model_dir,
                    variables={}, lock_fd=lock_fd, deadline=deadline, limit=limit,
                    failure=f"{where}: creating a virtual environment with {base_python} failed")
        python = str(entry / "bin" / "python")
        command = [python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                   "--progress-bar", "off", "-r", str(requirements), numpy_requirement]
        # cwd: pip resolves relative paths in requirements.txt against it
        _run_logged(model_name, "pip", command, cwd=model_dir, variables={}, lock_fd=lock_fd,
                    deadline=deadline, limit=limit, failure=f"{where}: pip install failed")
        log.info("model '%s': built the Python environment for %s in %.1f s", model_name,
                 requirements, time.monotonic() - started)
        return {"python": "bin/python", "version": platform.python_version(),
                "source": str(requirements)}

    _prepared_entry(model_name, entry, f"{REQUIREMENTS_FILE} {requirements}", build)
    return WorkerEnvironment(str(entry / "bin" / "python"),
                             _activation_variables(entry, library_path=False),
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
    if not _within(str(resolved), str(model_root)):
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
        line = _ENV_VARIABLE.sub(lambda m: os.environ.get(m.group(1)) or m.group(0), line)
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
        if not _within(str(resolved), str(model_root)):
            raise unavailable(f"{where}: '{value}' resolves to {resolved}, outside the model "
                              f"folder")


# ---------------------------------------------------------------- the cache and builds


def _prepared_entry(model_name: str, entry: Path, source: str,
                    build: Callable[[int], dict[str, str]]) -> dict[str, str]:
    """The information recorded for the finished cache entry ``entry``, after building it
    with ``build(lock_fd)`` unless a finished one is there. ``build`` runs under the entry's
    lock and passes ``lock_fd`` to the processes it starts: if the server dies, they keep
    the entry locked until they end, so no one builds into the same folder at once."""
    ready = entry.with_name(entry.name + ".ready")
    if (info := _finished(entry, ready)) is not None:
        log.info("model '%s': reusing %s for %s", model_name, entry, source)
        return info
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unavailable(f"model '{model_name}': cannot create the environment cache "
                          f"{entry.parent}: {exc.strerror}") from None
    with _locked(model_name, entry) as lock_fd:
        if (info := _finished(entry, ready)) is not None:
            log.info("model '%s': reusing %s for %s", model_name, entry, source)
            return info
        with contextlib.suppress(FileNotFoundError):
            ready.unlink()
        if os.path.lexists(entry):
            log.warning("model '%s': removing %s, left unfinished by an earlier build",
                        model_name, entry)
            _remove(model_name, entry)
        partial = ready.with_name(f"{ready.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            info = build(lock_fd)
            partial.write_text(json.dumps(info))
            os.replace(partial, ready)  # the entry becomes finished in one step
        except BaseException as exc:
            _remove(model_name, entry)  # the next start must try again, not reuse a half
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
            if isinstance(exc, OSError):
                raise unavailable(f"model '{model_name}': preparing {entry} failed: "
                                  f"{exc}") from None
            raise
    return info


def _finished(entry: Path, ready: Path) -> dict[str, str] | None:
    try:
        info = json.loads(ready.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and entry.is_dir() else None


@contextlib.contextmanager
def _locked(model_name: str, entry: Path) -> Iterator[int]:
    """Hold an exclusive ``flock`` on ``<entry>.lock``. flock locks belong to an open file,
    so two threads of one server exclude each other as two servers do."""
    lock_path = entry.with_name(entry.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise unavailable(f"model '{model_name}': cannot open {lock_path}: "
                          f"{exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("model '%s': waiting for %s, which another model or server is preparing",
                     model_name, entry)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # releases the lock


def _remove(model_name: str, path: Path) -> None:
    def writable_and_retry(function: Callable[[str], object], name: str,
                           _: object) -> None:
        os.chmod(os.path.dirname(name), stat.S_IRWXU)
        function(name)

    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            if sys.version_info >= (3, 12):
                shutil.rmtree(path, onexc=writable_and_retry)
            else:
                shutil.rmtree(path, onerror=writable_and_retry)
    except OSError as exc:
        raise unavailable(f"model '{model_name}': cannot remove the unfinished environment "
                          f"{path}: {exc}") from None


def _child_env(variables: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET_VARIABLES}
    env.update(variables)
    return env


def _run_logged(model_name: str, label: str, command: list[str], *, cwd: Path,
                variables: dict[str, str], lock_fd: int, deadline: float, limit: str,
                failure: str) -> None:
    """Run ``command``, forwarding each line it prints to the log at INFO as it comes, and
    kill it (with everything it started) at ``deadline``. Raises UNAVAILABLE with
    ``failure`` and the tail of the output when it fails."""
    env = _child_env(variables)
    env.pop("PYTHONPATH", None)  # the server's packages must not satisfy the model's
    env.update(PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1")  # lines as they come; no ~/.local
    if deadline <= time.monotonic():
        raise unavailable(f"{failure}: not finished within {limit}")
    try:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", start_new_session=True,
                                   pass_fds=(lock_fd,))
    except OSError as exc:
        raise unavailable(f"{failure}: cannot start {command[0]}: {exc.strerror}") from None
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # pip's own children too

    timer = threading.Timer(deadline - time.monotonic(), kill)
    timer.daemon = True
    timer.start()
    output: collections.deque[str] = collections.deque(maxlen=OUTPUT_KEPT_LINES)
    with process:  # closes the pipe
        try:
            assert process.stdout is not None
            for raw in process.stdout:
                line = raw.rstrip()
                if line:
                    log.info("model '%s': %s: %s", model_name, label, line)
                    output.append(line)
            status = process.wait()
        finally:
            timer.cancel()
            if process.poll() is None:
                kill()
                process.wait()
    if status != 0 and timed_out.is_set():
        raise unavailable(f"{failure}: stopped, not finished within {limit}; last output: "
                          f"{_tail(list(output))}")
    if status != 0:
        raise unavailable(f"{failure} (exit status {status}): {_tail(list(output))}")


def _tail(lines: list[str]) -> str:
    """The end of a failed command's output, from its first error line when it has one
    (pip prints ``ERROR: ...``, a failed build backend ``error: ...``)."""
    lines = [_shortened(line.strip()) for line in lines if line.strip()]
    first_error = next((i for i, line in enumerate(lines)
                        if line.startswith(("ERROR:", "error:", "Error:"))), None)
    if first_error is not None:
        lines = lines[first_error:]
    text = " | ".join(lines[-ERROR_TAIL_LINES:]) or "no output"
    return text if len(text) <= ERROR_TAIL_CHARS else "..." + text[-ERROR_TAIL_CHARS:]


def _shortened(line: str) -> str:
    if len(line) <= ERROR_LINE_CHARS:
        return line
    half = ERROR_LINE_CHARS // 2
    return f"{line[:half]} ... {line[-half:]}"

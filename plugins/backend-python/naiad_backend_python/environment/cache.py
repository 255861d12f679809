"""The environment cache: entries built once, under an exclusive ``flock`` on
``<entry>.lock``, and finished only once ``<entry>.ready`` is renamed into place after the
last step; an entry without it (a crash, a kill, a failed build) is removed and built again.
Shared by the threads that load models and by the server processes of one machine."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from naiad.errors import unavailable

log = logging.getLogger("naiad.backend.python")

#: Changing how environments are built changes this, so old cache entries are not reused.
BUILD_FORMAT = "naiad-python-env-1"


def default_cache_dir() -> Path:
    """``$NAIAD_CACHE_DIR/python-envs``, else ``$XDG_CACHE_HOME/naiad/python-envs``, else
    ``~/.cache/naiad/python-envs``."""
    if root := os.environ.get("NAIAD_CACHE_DIR"):
        return Path(root).absolute() / "python-envs"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):  # the XDG spec says to ignore a relative value
        return Path(xdg) / "naiad" / "python-envs"
    return Path.home() / ".cache" / "naiad" / "python-envs"


def prepared_entry(model_name: str, entry: Path, source: str,
                    build: Callable[[int], dict[str, str]]) -> dict[str, str]:
    """The information recorded for the finished cache entry ``entry``, after building it
    with ``build(lock_fd)`` unless a finished one is there. ``build`` runs under the entry's
    lock and passes ``lock_fd`` to the processes it starts: if the server dies, they keep
    the entry locked until they end, so no one builds into the same folder at once."""
    ready = entry.with_name(entry.name + ".ready")
    if (info := _finished(entry, ready)) is not None:
        _check_trusted(model_name, entry, ready)
        log.info("model '%s': reusing %s for %s", model_name, entry, source)
        return info
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unavailable(f"model '{model_name}': cannot create the environment cache "
                          f"{entry.parent}: {exc.strerror}") from None
    with _locked(model_name, entry) as lock_fd:
        if (info := _finished(entry, ready)) is not None:
            _check_trusted(model_name, entry, ready)
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
            _restrict(entry)
            partial.write_text(json.dumps(info))
            os.chmod(partial, 0o644)
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


def _restrict(entry: Path) -> None:
    """Make the entry and its ``bin`` folder writable by this user only (an unpacked
    archive may bring any mode), as :func:`_check_trusted` expects of them."""
    for path in (entry, entry / "bin"):
        with contextlib.suppress(FileNotFoundError):
            found = os.lstat(path)
            if not stat.S_ISLNK(found.st_mode):
                os.chmod(path, stat.S_IMODE(found.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))


def _check_trusted(model_name: str, entry: Path, ready: Path) -> None:
    """Refuse a finished entry that this server's user did not make: the entry, its
    ``bin`` folder (where the interpreter that will run is) and its ``.ready`` record must
    be owned by this user, not be symbolic links, and be writable by no one else. In a
    cache directory others can write to, an entry planted by another user would otherwise
    have its ``bin/python`` run as the server's user."""
    user = os.geteuid()
    for path in (entry, entry / "bin", ready):
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            if path.name == "bin":
                continue  # a conda environment on another layout: the entry itself counts
            raise unavailable(f"model '{model_name}': the environment cache entry {entry} "
                              f"lost {path.name} while being read") from None
        problem = ""
        if stat.S_ISLNK(found.st_mode):
            problem = "is a symbolic link"
        elif found.st_uid != user:
            problem = f"is owned by user {found.st_uid}, not this server's user {user}"
        elif found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            problem = "is writable by other users"
        if problem:
            raise unavailable(f"model '{model_name}': the environment cache entry {entry} is "
                              f"not used: {path} {problem}. naiad runs only environments its "
                              f"own user made; remove the entry, or give env-cache-dir a "
                              f"folder only this user can write to")


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

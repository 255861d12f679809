"""Private folders for models deployed through the load API.

Triton's repository load request may carry a model's files: a ``file:<path>`` parameter per
file (``file:1/model.onnx``), its content base64 over HTTP and bytes over gRPC, together
with the ``config`` parameter (the model's JSON configuration). Such a model loads from a
folder the server makes for that one load, under its staging directory, instead of from
its repository.

Nothing a request names may land outside that folder: every name is checked before a byte
is written (no ``..``, no absolute path, no NUL, no backslash, no folder; empty and ``.``
components are dropped, as Triton normalizes them), and the files are then created
component by component relative to the folder itself (``O_NOFOLLOW``, ``O_EXCL``), so a
symbolic link cannot redirect a write either. The total size of one load's files is bounded
(``--load-files-max-size``).

A staged folder is removed once no version uses it, serving or still unloading (the model
was unloaded, or loaded again from elsewhere and the replaced version has unloaded), and the
whole staging directory at shutdown.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from naiad.errors import InferenceServerError, Status, invalid_arg

log = logging.getLogger("naiad.models")

#: the prefix of a load request's parameters that carry a model's files
FILE_PREFIX = "file:"
MIB = 1024 * 1024
#: ``--load-files-max-size``: the most bytes the files of one load request may hold
DEFAULT_MAX_BYTES = 1024 * MIB
_EXAMPLE = "such as 'file:1/model.onnx'"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


# A name (of the model's folder, or of one step of a file parameter's path) takes at most
# this many bytes in UTF-8, as Linux file systems allow (NAME_MAX).
MAX_NAME_BYTES = 255
# A file parameter's path has at most this many steps (folders and the file), so that the
# folder tree it makes can be removed (and shown) without deep recursion.
MAX_PATH_DEPTH = 32


def file_parameters(params: Mapping[str, object]) -> dict[str, object]:
    """The ``file:`` parameters of a load request, as sent (not decoded)."""
    return {key: value for key, value in params.items() if key.startswith(FILE_PREFIX)}


def _shown(text: str) -> str:
    """``text`` for an error message: quoted as sent, escaped when it has control characters."""
    return f"'{text}'" if text.isprintable() else ascii(text)


def relative_path(model: str, key: str) -> tuple[str, ...]:
    """The path components that parameter ``key`` (``file:1/model.onnx``) names inside the
    model folder; an :class:`InferenceServerError` (INVALID_ARG) naming the parameter when
    it names nothing, or anything outside the folder."""
    name = key[len(FILE_PREFIX):]
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if "\0" in name:
        problem = "contains a NUL character"
    elif name.startswith("/"):
        problem = "is an absolute path"
    elif "\\" in name:
        problem = "contains a backslash (separate folders with '/')"
    elif ".." in parts:
        problem = "leaves the model folder ('..')"
    elif not parts:
        problem = "names no file"
    elif name.rsplit("/", 1)[-1] in ("", "."):  # "1/", "1/."
        problem = "names a folder, not a file"
    elif len(parts) > MAX_PATH_DEPTH:
        problem = (f"is {len(parts)} folders and file deep, more than the {MAX_PATH_DEPTH} "
                   f"allowed")
    elif any(len(part.encode(errors="surrogatepass")) > MAX_NAME_BYTES for part in parts):
        problem = f"has a folder or file name longer than {MAX_NAME_BYTES} bytes"
    else:
        return tuple(parts)
    raise invalid_arg(f"failed to load '{model}': load parameter {_shown(key)} {problem}; a "
                      f"file parameter names a file inside the model folder, {_EXAMPLE}")


def checked_files(model: str, files: Mapping[str, bytes], max_bytes: int
                  ) -> list[tuple[str, tuple[str, ...], bytes]]:
    """``files`` (parameter -> content) as (parameter, path components, content), every
    name checked (:func:`relative_path`), no file inside another, and at most ``max_bytes``
    in all (else RESOURCE_EXHAUSTED naming the setting; 0 refuses any file)."""
    if max_bytes == 0 and files:
        raise InferenceServerError(
            f"failed to load '{model}': this server does not accept model files in a load "
            f"request (--load-files-max-size is 0)", Status.RESOURCE_EXHAUSTED)
    total = sum(len(content) for content in files.values())
    if total > max_bytes:
        raise InferenceServerError(
            f"failed to load '{model}': the files of the load request hold {total} bytes, "
            f"over the limit of {max_bytes} bytes; raise it with --load-files-max-size",
            Status.RESOURCE_EXHAUSTED)
    checked = [(key, relative_path(model, key), content) for key, content in files.items()]
    folders = {parts[:depth] for _, parts, _ in checked for depth in range(1, len(parts))}
    seen: dict[tuple[str, ...], str] = {}
    for key, parts, _ in checked:
        if parts in folders:
            raise invalid_arg(f"failed to load '{model}': load parameter {_shown(key)} names "
                              f"a file that other file parameters use as a folder")
        if parts in seen:
            raise invalid_arg(f"failed to load '{model}': load parameters {_shown(seen[parts])} "
                              f"and {_shown(key)} name the same file")
        seen[parts] = key
    return checked


def _check_model_name(model: str) -> None:
    if not model or model in (".", "..") or "/" in model or "\\" in model or "\0" in model:
        raise invalid_arg(f"failed to load {_shown(model)}: a model deployed with file "
                          f"parameters needs a name that can name a folder")
    size = len(model.encode(errors="surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise invalid_arg(f"failed to load {_shown(model[:64])}... ({size} bytes): a model "
                          f"deployed with file parameters needs a name of at most "
                          f"{MAX_NAME_BYTES} bytes (it names a folder)")


def _write(folder: Path, parts: tuple[str, ...], content: bytes) -> None:
    """Create ``folder/<parts>`` holding ``content``, each step relative to the folder
    opened before it and never through a symbolic link."""
    directory = os.open(folder, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o700, dir_fd=directory)
            except FileExistsError:
                pass
            inner = os.open(part, _DIR_FLAGS, dir_fd=directory)
            os.close(directory)
            directory = inner
        handle = os.open(parts[-1], _FILE_FLAGS, 0o600, dir_fd=directory)
        with os.fdopen(handle, "wb") as out:
            out.write(content)
    finally:
        os.close(directory)


class ModelStaging:
    """The staging directory of one server: a private folder per load with files.

    ``directory`` is where the staging directory is made ("" for the system's temporary
    directory); the server makes its own folder inside it when a first load needs one and
    removes that folder at :meth:`close`. Thread-safe.
    """

    def __init__(self, directory: str = "", max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._root: Path | None = None
        # model folder -> whether its load is still going on (never removed meanwhile)
        self._folders: dict[Path, bool] = {}
        self._lock = threading.Lock()

    @property
    def root(self) -> Path | None:
        """The server's staging folder, None until a load needed one."""
        return self._root

    def stage(self, model: str, files: Mapping[str, bytes]) -> Path:
        """Write ``files`` (``file:`` parameter -> content) into a new private folder and
        return the model folder inside it (named after the model). Every name and the total
        size are checked before anything is written. The folder stays until the load that
        uses it is :meth:`done` and then no serving version uses it."""
        _check_model_name(model)
        checked = checked_files(model, files, self.max_bytes)
        with self._lock:
            if self._root is None:
                base = self.directory or None
                if base is not None:
                    Path(base).mkdir(parents=True, exist_ok=True)
                self._root = Path(tempfile.mkdtemp(prefix="naiad-staging-", dir=base))
            load_folder = Path(tempfile.mkdtemp(prefix="load-", dir=self._root))
            folder = load_folder / model
            self._folders[folder] = True
        try:
            folder.mkdir(mode=0o700)
            for key, parts, content in checked:
                try:
                    _write(folder, parts, content)
                except OSError as exc:
                    raise invalid_arg(f"failed to load '{model}': load parameter "
                                      f"{_shown(key)} could not be written: "
                                      f"{exc.strerror or exc}") from None
        except BaseException:
            with self._lock:
                del self._folders[folder]
            self.remove([folder])
            raise
        log.info("model '%s': %d file(s), %d bytes, staged in %s", model, len(checked),
                 sum(len(content) for _, _, content in checked), folder)
        return folder

    def done(self, folder: Path) -> None:
        """The load from ``folder`` is over (whether it worked or not)."""
        with self._lock:
            if folder in self._folders:
                self._folders[folder] = False

    def holds(self, folder: Path | None) -> bool:
        """Whether ``folder`` is a staged model folder not removed yet."""
        with self._lock:
            return folder in self._folders

    def unused(self, in_use: Iterable[Path]) -> list[Path]:
        """Forget the staged folders that no load in progress and no folder of ``in_use``
        (those of the serving versions) is; return them, for :meth:`remove`."""
        used = set(in_use)
        with self._lock:
            gone = [folder for folder, loading in self._folders.items()
                    if not loading and folder not in used]
            for folder in gone:
                del self._folders[folder]
        return gone

    def remove(self, folders: Iterable[Path]) -> None:
        """Delete model folders :meth:`unused` returned (each with its load folder)."""
        for folder in folders:
            shutil.rmtree(folder.parent, ignore_errors=True)
            log.info("removed the staged files of %s", folder)

    def close(self) -> None:
        """Delete the staging folder and everything in it (at shutdown)."""
        with self._lock:
            root, self._root = self._root, None
            self._folders.clear()
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

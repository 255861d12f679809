"""``EXECUTION_ENV_PATH``, as Triton reads it: an environment directory, or a tarball of one
(conda-pack's output, or any ``.tar.gz`` whose root holds ``bin/python``) unpacked once
into the cache under the SHA-256 of its bytes, with conda-pack's ``bin/conda-unpack`` run
once there. Nothing in an archive may land or point outside its entry."""

from __future__ import annotations

import gzip
import hashlib
import logging
import lzma
import os
import stat
import tarfile
import threading
import time
import zlib
from pathlib import Path

from naiad.errors import unavailable
from naiad_backend_python.environment.cache import prepared_entry
from naiad_backend_python.environment.commands import run_logged
from naiad_backend_python.environment.extract import UnsafeArchive, extract
from naiad_backend_python.environment.interpreters import (
    WorkerEnvironment,
    activation_variables,
    interpreter,
    probe,
)

log = logging.getLogger("naiad.backend.python")

#: The model parameter Triton's python backend reads (its exact spelling).
EXECUTION_ENV_PATH = "EXECUTION_ENV_PATH"


#: Replaced by the model folder in EXECUTION_ENV_PATH (Triton's exact spelling).
MODEL_DIRECTORY_KEYWORD = "$$TRITON_MODEL_DIRECTORY"


SECONDS = 1.0


#: conda-unpack rewrites the prefix in every file that holds it: minutes for a large env.
CONDA_UNPACK_TIMEOUT_S = 600 * SECONDS


HASH_CHUNK_BYTES = 1024 * 1024


#: ``env-max-unpacked-bytes``: the most bytes an environment tarball's files may hold once
#: unpacked (a compressed archive can expand a thousandfold).
DEFAULT_MAX_UNPACKED_BYTES = 16 * 1024 * 1024 * 1024


def execution_env(model_name: str, model_dir: Path, value: str, cache_dir: Path,
                  max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES) -> WorkerEnvironment:
    path = value.replace(MODEL_DIRECTORY_KEYWORD, str(model_dir))
    if not os.path.isabs(path):
        raise unavailable(f"model '{model_name}': {EXECUTION_ENV_PATH} '{value}' is a relative "
                          f"path; write an absolute path, or "
                          f"'{MODEL_DIRECTORY_KEYWORD}/{value}' for one in the model folder")
    path = os.path.normpath(path)
    where = f"model '{model_name}': {EXECUTION_ENV_PATH} {path}"
    if os.path.isdir(path):
        root = Path(path)
        python = interpreter(root, where)
        variables = activation_variables(root, library_path=True)
        version = probe(model_name, python, variables, where)
        return WorkerEnvironment(python, variables,
                                 f"{EXECUTION_ENV_PATH} {path} (a directory, Python {version})")
    if not os.path.exists(path):
        raise unavailable(f"{where}: no such file or directory")
    return _tarball_env(model_name, Path(path), where, cache_dir, max_unpacked_bytes)


def _tarball_env(model_name: str, tarball: Path, where: str, cache_dir: Path,
                 max_unpacked_bytes: int) -> WorkerEnvironment:
    entry = cache_dir / _file_digest(tarball, where)

    def build(lock_fd: int) -> dict[str, str]:
        log.info("model '%s': unpacking %s %s into %s", model_name, EXECUTION_ENV_PATH,
                 tarball, entry)
        started = time.monotonic()
        _unpack(tarball, entry, where, max_unpacked_bytes)
        python = interpreter(entry, where, in_archive=True)
        variables = activation_variables(entry, library_path=True)
        unpack_script = entry / "bin" / "conda-unpack"
        if unpack_script.is_file():
            # conda-pack leaves the packing machine's prefix in scripts and libraries;
            # conda-unpack rewrites it to where the env now lies, so it runs at the final path.
            log.info("model '%s': running conda-unpack in %s", model_name, entry)
            run_logged(model_name, "conda-unpack", [python, str(unpack_script)], cwd=entry,
                        variables=variables, lock_fd=lock_fd,
                        deadline=time.monotonic() + CONDA_UNPACK_TIMEOUT_S,
                        failure=f"{where}: conda-unpack failed",
                        limit=f"CONDA_UNPACK_TIMEOUT_S={CONDA_UNPACK_TIMEOUT_S:g} s")
        version = probe(model_name, python, variables, where)
        log.info("model '%s': unpacked %s in %.1f s", model_name, tarball,
                 time.monotonic() - started)
        return {"python": os.path.relpath(python, entry), "version": version,
                "source": str(tarball)}

    info = prepared_entry(model_name, entry, f"{EXECUTION_ENV_PATH} {tarball}", build)
    return WorkerEnvironment(str(entry / info["python"]),
                             activation_variables(entry, library_path=True),
                             f"{EXECUTION_ENV_PATH} {tarball} (Python {info['version']}, "
                             f"unpacked in {entry})")


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


def _unpack(tarball: Path, dest: Path, where: str, max_bytes: int) -> None:
    """Unpack ``tarball`` into the new folder ``dest`` with naiad's checked extraction
    (:mod:`naiad_backend_python.environment.extract`): every member's final path, links
    included, is resolved inside ``dest`` before anything is written, and the files may
    hold at most ``max_bytes``. Links inside the environment (conda's ``bin/python ->
    python3.11``) stay links."""
    try:
        dest.mkdir()
        with tarfile.open(tarball, "r:*") as archive:
            extract(archive, dest, max_bytes)
    except UnsafeArchive as exc:
        raise unavailable(f"{where}: refused to unpack: {exc}") from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError) as exc:
        raise unavailable(f"{where}: not a readable tar archive ({exc})") from None
    except OSError as exc:
        raise unavailable(f"{where}: unpacking into {dest} failed: {exc}") from None


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

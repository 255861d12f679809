"""What a model version was loaded from, as a digest: part of its response-cache keys.

The cache keys a response by model name and version among others; a reload of the same
version whose code or weights changed must not answer from the entries the old files made
(issue 32: it did). The generation is a digest of the version's configuration as loaded and
of the path, size and modification time of every file it loads from: its version folder and
the model folder's shared files (other versions' folders left out, ``__pycache__`` too).

Why size and modification time and not the files' contents: hashing contents reads every
byte of the model at each load (gigabytes of weights, an ``EXECUTION_ENV_PATH`` tarball) for
what one ``stat`` per file tells; it is the test poll mode uses to see a change, as Triton.
What it costs: a file rewritten with the same size and its old modification time put back
keeps the old entries (tools that copy files keep it only when asked: ``cp -p``,
``rsync -t``); a file touched without a change, or a copy of the repository with new
times, starts the version's entries over (misses, never a wrong answer); servers sharing a
remote cache (``redis``) share entries only when their copies of the files have the same
times (one image, one mount, copies that keep times)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from naiad.repository.fingerprint import model_fingerprint

_DIGEST_BYTES = 16


def version_generation(model_dir: Path, version: int, config_json: dict) -> bytes:
    """The generation of version ``version`` loaded from ``model_dir`` with ``config_json``
    (one ``stat`` per file; call it off the event loop)."""
    digest = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    digest.update(json.dumps(config_json, sort_keys=True).encode())
    for name, entries in sorted(model_fingerprint(model_dir).parts.items()):
        if name.isdigit() and name != str(version):
            continue  # another version's folder: not what this version loads
        for path, size, mtime_ns in entries:
            digest.update(f"\0{path}\0{size}\0{mtime_ns}".encode())
    return digest.digest()

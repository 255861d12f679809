"""What the S3 source tests put in buckets: the examples' add_sub model and a few more
files, and a handle on a bucket of the moto server."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moto_s3_server import MotoS3Server

ROOT = Path(__file__).resolve().parents[3]
ADD_SUB = ROOT / "examples" / "model_repository" / "add_sub"
PREFIX = "models"
# Files beside add_sub's own, as a repository holds them (labels, a second model, a file
# deeper down).
EXTRA_FILES = {
    "add_sub/labels.txt": b"sum\ndifference\n",
    "identity/config.pbtxt": b'name: "identity"\n',
    "identity/1/weights/part-0.bin": bytes(range(256)) * 4,
}


def add_sub_files() -> dict[str, bytes]:
    """The examples' add_sub model, by path under the repository ("add_sub/1/model.py")."""
    return {f"add_sub/{path.relative_to(ADD_SUB).as_posix()}": path.read_bytes()
            for path in sorted(ADD_SUB.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts}


@dataclass
class Bucket:
    """A bucket of the moto server holding a model repository under ``prefix``."""

    server: MotoS3Server
    name: str
    prefix: str
    files: dict[str, bytes]  # what the repository holds, by path under its root
    client: Any

    @property
    def uri(self) -> str:
        return self.server.uri(self.name, self.prefix)

    def put(self, path: str, content: bytes) -> None:
        """Write (or overwrite) ``path`` under the repository's root."""
        self.client.put_object(Bucket=self.name, Key=f"{self.prefix}/{path}", Body=content)
        self.files[path] = content

    def put_key(self, key: str, content: bytes = b"") -> None:
        """Write an object by its full key (outside the repository, or a strange name)."""
        self.client.put_object(Bucket=self.name, Key=key, Body=content)

    def delete(self, path: str) -> None:
        self.client.delete_object(Bucket=self.name, Key=f"{self.prefix}/{path}")
        self.files.pop(path, None)


def new_bucket_name() -> str:
    return f"naiad-{uuid.uuid4().hex[:16]}"

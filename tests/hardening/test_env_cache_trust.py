"""Issue 32, item 8: an environment-cache entry another user planted is not used. Before
the fix, in a cache directory others could write to, a finished-looking entry (a folder and
its ``.ready`` record) made by another user was reused: its ``bin/python`` ran as the
server's user. Now an entry is used only when it, its ``bin`` folder and its record are
owned by the server's user, are no symbolic links and no one else can write to them; the
model is UNAVAILABLE naming the entry and the rule, and nothing is run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from naiad.errors import InferenceServerError, Status

cache = pytest.importorskip("naiad_backend_python.environment.cache",
                            reason="naiad-backend-python is not installed")


def planted(root: Path) -> Path:
    """A finished-looking entry: a folder with bin/python and its .ready record."""
    entry = root / "envs" / "entry"
    (entry / "bin").mkdir(parents=True)
    (entry / "bin" / "python").write_text("#!/bin/sh\necho planted\n")
    entry.with_name("entry.ready").write_text(json.dumps({"python": "bin/python"}))
    return entry


def never_build(lock_fd: int) -> dict[str, str]:
    raise AssertionError("a planted entry must not be rebuilt over either")


def reuse(entry: Path) -> dict[str, str]:
    return cache.prepared_entry("m", entry, "requirements.txt", never_build)


def test_an_entry_of_this_user_is_reused(tmp_path: Path):
    assert reuse(planted(tmp_path)) == {"python": "bin/python"}


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user owns needs root")
def test_an_entry_another_user_owns_is_refused(tmp_path: Path):
    entry = planted(tmp_path)
    os.chown(entry / "bin", 12345, 12345)
    with pytest.raises(InferenceServerError) as refused:
        reuse(entry)
    assert refused.value.status is Status.UNAVAILABLE
    assert "is owned by user 12345" in refused.value.message
    assert str(entry) in refused.value.message


@pytest.mark.parametrize("part", ["entry", "bin", "ready"])
def test_an_entry_others_can_write_to_is_refused(tmp_path: Path, part: str):
    entry = planted(tmp_path)
    path = {"entry": entry, "bin": entry / "bin",
            "ready": entry.with_name("entry.ready")}[part]
    os.chmod(path, 0o777 if path.is_dir() else 0o666)
    with pytest.raises(InferenceServerError) as refused:
        reuse(entry)
    assert "is writable by other users" in refused.value.message


def test_a_built_entry_is_made_private_so_it_is_reused(tmp_path: Path):
    entry = tmp_path / "envs" / "built"

    def build(lock_fd: int) -> dict[str, str]:
        (entry / "bin").mkdir(parents=True)
        os.chmod(entry / "bin", 0o777)  # an archive may bring any mode
        return {"python": "bin/python"}

    assert cache.prepared_entry("m", entry, "x", build) == {"python": "bin/python"}
    assert reuse(entry) == {"python": "bin/python"}

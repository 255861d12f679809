"""Issue 32, item 5: ``EXECUTION_ENV_PATH`` tarballs are unpacked by naiad's own checked
extraction. Before the fix, the symlink chain of CVE-2025-4517 (paths longer than
PATH_MAX, which ``os.path.realpath`` stops resolving) passed naiad's check and Python's
``data`` filter: files were written outside the environment cache and an existing file
was overwritten through a hard link. Now every member's final path, links included, is
resolved in a model of the archive before anything is written, and the files' unpacked
size is bounded (``env-max-unpacked-bytes``)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("naiad_backend_python", reason="the Python backend plugin is not installed")

from naiad.errors import InferenceServerError
from naiad_backend_python.environment.extract import UnsafeArchive, extract
from naiad_backend_python.settings import PythonBackendSettings


def _tar(path: Path, members: list[tuple[str, str, object]]) -> Path:
    """A tarball of ``(kind, name, data or link target)`` members, in order."""
    with tarfile.open(path, "w:gz") as archive:
        for kind, name, value in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
            elif kind == "file":
                data = value if isinstance(value, bytes) else b"x"
                info.size, info.mode = len(data), 0o6777  # setuid etc. must not survive
                archive.addfile(info, io.BytesIO(data))
            else:
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = str(value)
                archive.addfile(info)
    return path


def _cve_2025_4517_members(outside: Path) -> list[tuple[str, str, object]]:
    """The public proof of concept's chain: directories with 247-character names, each
    reached through a one-letter link, then a link whose resolved path is past PATH_MAX
    climbing back up, then a link through it to ``outside`` and writes through that."""
    comp = "d" * 247
    steps = "abcdefghijklmnop"
    members: list[tuple[str, str, object]] = []
    path = ""
    for step in steps:
        members.append(("dir", os.path.join(path, comp), None))
        members.append(("sym", os.path.join(path, step), comp))
        path = os.path.join(path, comp)
    long_link = os.path.join(*steps, "l" * 254)
    members.append(("sym", long_link, "../" * len(steps)))
    members.append(("sym", "escape", f"{long_link}/" + "../" * 8 + str(outside).lstrip("/")))
    members.append(("file", "escape/written", b"pwned"))
    members.append(("lnk", "escape/victim", "escape/victim"))
    return members


def _unpack(tarball: Path, dest: Path, max_bytes: int = 1 << 30) -> None:
    dest.mkdir()
    with tarfile.open(tarball) as archive:
        extract(archive, dest, max_bytes)


def test_the_cve_2025_4517_chain_is_refused_before_anything_is_written(tmp_path: Path
                                                                      ) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("untouched")
    tarball = _tar(tmp_path / "evil.tar.gz", _cve_2025_4517_members(outside))
    dest = tmp_path / "env"
    with pytest.raises(UnsafeArchive, match=r"through|outside"):
        _unpack(tarball, dest)
    assert list(dest.iterdir()) == []  # refused before any write
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").read_text() == "untouched"


@pytest.mark.parametrize("members, why", [
    # textually inside ('s/a/..' is 's'), but 's/a' -> '..' takes the kernel to the root
    # first, so '..' then leaves it
    ([("dir", "s", None), ("sym", "s/a", ".."), ("sym", "x", "s/a/..")], "outside"),
    ([("sym", "up", "../outside")], "outside"),
    ([("sym", "abs", "/etc/passwd")], "absolute"),
    ([("lnk", "h", "../outside/victim")], "'..'"),
    ([("sym", "l", "f"), ("file", "f", b"1"), ("lnk", "h", "l")], "does not name a file"),
    ([("file", "f", b"1"), ("file", "f", b"2")], "more than once"),
    ([("dir", "d", None), ("sym", "d", "..")], "more than once"),
    ([("file", "/abs", b"1")], "absolute"),
])
def test_links_that_lead_out_are_refused(tmp_path: Path, members, why: str) -> None:
    tarball = _tar(tmp_path / "evil.tar.gz", members)
    dest = tmp_path / "env"
    with pytest.raises(UnsafeArchive, match=why):
        _unpack(tarball, dest)
    assert list(dest.iterdir()) == []


def test_the_unpacked_size_is_bounded(tmp_path: Path) -> None:
    tarball = _tar(tmp_path / "big.tar.gz", [("file", "a", b"\0" * 600),
                                             ("file", "b", b"\0" * 600)])
    with pytest.raises(UnsafeArchive, match=r"more than 1000 bytes.*env-max-unpacked-bytes"):
        _unpack(tarball, tmp_path / "env", max_bytes=1000)
    assert PythonBackendSettings.parse(
        {"env-max-unpacked-bytes": "1000"}).env_max_unpacked_bytes == 1000
    with pytest.raises(InferenceServerError, match="env-max-unpacked-bytes"):
        PythonBackendSettings.parse({"env-max-unpacked-bytes": "lots"})


def test_an_environment_unpacks_with_its_inside_links(tmp_path: Path) -> None:
    tarball = _tar(tmp_path / "env.tar.gz", [
        ("dir", "bin", None), ("file", "bin/python3.11", b"#!interp"),
        ("sym", "bin/python", "python3.11"), ("sym", "lib64", "lib"),
        ("file", "lib/site.py", b"site"), ("lnk", "lib/same.py", "lib/site.py"),
        ("sym", "lib/up", "../bin/python")])
    dest = tmp_path / "env"
    _unpack(tarball, dest)
    assert (dest / "bin" / "python").read_bytes() == b"#!interp"
    assert os.readlink(dest / "lib64") == "lib" and (dest / "lib64" / "site.py").exists()
    assert (dest / "lib" / "same.py").stat().st_ino == (dest / "lib" / "site.py").stat().st_ino
    assert (dest / "lib" / "up").read_bytes() == b"#!interp"
    assert (dest / "bin" / "python3.11").stat().st_mode & 0o7777 == 0o755

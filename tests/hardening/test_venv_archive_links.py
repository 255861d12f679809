"""Issue 32, item 8: a plain ``python -m venv`` archive unpacks. Its ``bin/python3`` is a
symbolic link to the absolute path of the Python it was made with, and naiad's checked
extraction refused every absolute link, although nothing is written through it. Now a
virtual environment's interpreter links (``bin/python*``) may be absolute; every other
absolute link is still refused, and so is anything written, hard-linked or resolved
through an interpreter link."""

from __future__ import annotations

import io
import os
import sys
import tarfile
from pathlib import Path

import pytest

extract_module = pytest.importorskip("naiad_backend_python.environment.extract",
                                     reason="the Python backend plugin is not installed")


def _tar(path: Path, members: list[tuple[str, str, str]]) -> Path:
    """A tarball of ``(kind, name, link target or data)`` members, in order."""
    with tarfile.open(path, "w:gz") as archive:
        for kind, name, value in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
            elif kind == "file":
                info.size, info.mode = len(value), 0o644
                archive.addfile(info, io.BytesIO(value.encode()))
            else:
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = value
                archive.addfile(info)
    return path


def _unpack(tarball: Path, dest: Path) -> None:
    dest.mkdir()
    with tarfile.open(tarball) as archive:
        extract_module.extract(archive, dest, 1 << 30)


VENV = [("dir", "bin", ""), ("sym", "bin/python3", sys.executable),
        ("sym", "bin/python", "python3"), ("sym", "bin/python3.11", "python3"),
        ("file", "pyvenv.cfg", "home = /usr/bin\n")]


def test_a_venv_archive_with_absolute_interpreter_links_unpacks(tmp_path: Path) -> None:
    dest = tmp_path / "env"
    _unpack(_tar(tmp_path / "venv.tar.gz", VENV), dest)
    assert os.readlink(dest / "bin" / "python3") == sys.executable
    assert os.path.samefile(dest / "bin" / "python", sys.executable)


@pytest.mark.parametrize("members, why", [
    ([("sym", "lib/libc", "/usr/lib")], "absolute"),  # not an interpreter link
    ([("sym", "bin/pip", "/usr/bin/pip")], "absolute"),
    ([("sym", "python3", "/usr/bin/python3")], "absolute"),  # not under bin/
    ([("file", "bin/python3/evil", "x")], "not a directory"),  # written through it
    ([("lnk", "h", "bin/python3")], "does not name a file"),
    ([("sym", "l", "bin/python3/../../etc")], "absolute"),  # resolved through it
])
def test_nothing_goes_through_an_interpreter_link(tmp_path: Path, members, why) -> None:
    tarball = _tar(tmp_path / "evil.tar.gz", [*VENV, *members])
    dest = tmp_path / "env"
    with pytest.raises(extract_module.UnsafeArchive, match=why):
        _unpack(tarball, dest)
    assert list(dest.iterdir()) == []

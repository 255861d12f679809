"""naiad's own checked extraction of an environment tarball, whatever Python's ``tarfile``
filters do (CVE-2025-4517 passed both naiad's former check and the standard ``data``
filter: a chain of links whose resolved path is longer than ``PATH_MAX`` made
``os.path.realpath`` stop resolving and report a path inside the destination, while the
kernel followed the links out of it).

So nothing here asks the file system where a path leads. Every member is read first and
the archive's final tree is modelled in memory; each member's final path, links included,
is resolved in that model (the destination is a new, empty folder, so the model is the
whole truth), and the archive is refused, before anything is written, unless:

- every member's name is relative, without ``..``, and names each path once;
- no member is written through a link: each parent is a directory of the archive;
- every symbolic link, followed through the archive's other links, stays inside, except
  a virtual environment's interpreter links (``bin/python``, ``bin/python3``,
  ``bin/python3.11``: ``python -m venv`` points them at the absolute path of the Python it
  was made with), which may be absolute: nothing is written, linked or resolved through
  them (every parent must be a directory of the archive, every hard link a file of it, and
  a link that leads through another absolute one is refused);
- every hard link names a regular file of the archive that comes before it;
- only files, directories and links (no devices, FIFOs);
- the regular files' sizes add up to at most ``max_bytes`` (a bound on unpacked size).

Then members are written with ``O_NOFOLLOW | O_EXCL``, links made as links, modes kept
without setuid, setgid, sticky or group/other write bits."""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path

#: How many links one path may pass through before it is refused (Linux's own limit).
MAX_LINK_HOPS = 40
COPY_CHUNK_BYTES = 1024 * 1024

_DIR, _FILE, _LINK = "dir", "file", "link"
_INTERPRETER = re.compile(r"python[0-9.]*")


class UnsafeArchive(Exception):
    """The archive may not be unpacked; the message says which member and why."""


def _parts(name: str) -> list[str]:
    """The components of a member's name, or raise when it is absolute or climbs."""
    if name.startswith("/") or os.path.isabs(name):
        raise UnsafeArchive(f"the member '{name}' has an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"the member '{name}' has '..' in its path")
    return parts


class _Tree:
    """The archive's final tree: relative path -> (kind, symbolic link target)."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[str, ...], tuple[str, str]] = {(): (_DIR, "")}

    def add(self, parts: list[str], kind: str, target: str, name: str) -> None:
        for depth in range(1, len(parts)):  # a parent must be a directory, never a link
            parent = tuple(parts[:depth])
            known = self.nodes.get(parent)
            if known is None:
                self.nodes[parent] = (_DIR, "")  # implied by the member, as tar makes it
            elif known[0] != _DIR:
                if known[0] == _LINK:  # say where it leads when that is outside
                    self.resolve(parent[:-1], known[1], "/".join(parent))
                raise UnsafeArchive(f"the member '{name}' would be written through "
                                    f"'{'/'.join(parent)}', which is not a directory")
        key = tuple(parts)
        known = self.nodes.get(key)
        if known is not None and not (known[0] == _DIR and kind == _DIR):
            raise UnsafeArchive(f"the member '{name}' appears more than once in the archive")
        self.nodes[key] = (kind, target)

    def resolve(self, start: tuple[str, ...], target: str, name: str) -> None:
        """Follow ``target`` from folder ``start`` through the tree's links; raise if it
        leaves the root at any step (as the kernel walks it: '..' after a link goes up
        from where the link led)."""
        pending = [part for part in target.split("/") if part not in ("", ".")]
        where = list(start)
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                if not where:
                    raise UnsafeArchive(f"the symbolic link '{name}' -> '{target}' points "
                                        f"outside the environment")
                where.pop()
                continue
            node = self.nodes.get((*where, part))
            if node is not None and node[0] == _LINK:
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise UnsafeArchive(f"the symbolic link '{name}' -> '{target}' passes "
                                        f"through more than {MAX_LINK_HOPS} links")
                if node[1].startswith("/"):
                    if not pending and _interpreter_link([*where, part]):
                        return  # ends at the interpreter (bin/python -> python3 -> /usr/...)
                    raise UnsafeArchive(f"the symbolic link '{name}' -> '{target}' leads "
                                        f"to the absolute path '{node[1]}'")
                pending[:0] = [p for p in node[1].split("/") if p not in ("", ".")]
                continue
            where.append(part)


def check_members(members: list[tarfile.TarInfo], max_bytes: int) -> None:
    """Raise :class:`UnsafeArchive` unless ``members`` may be unpacked (see the module)."""
    tree = _Tree()
    total = 0
    for member in members:
        parts = _parts(member.name)
        if not parts:
            if member.isdir():
                continue  # the archive's own root ('.')
            raise UnsafeArchive(f"the member '{member.name}' has no name")
        if member.isdir():
            tree.add(parts, _DIR, "", member.name)
        elif member.isfile():
            total += member.size
            if total > max_bytes:
                raise UnsafeArchive(f"its files hold more than {max_bytes} bytes unpacked "
                                    f"(env-max-unpacked-bytes)")
            tree.add(parts, _FILE, "", member.name)
        elif member.issym():
            target = member.linkname
            absolute = target.startswith("/") or os.path.isabs(target)
            if not target or (absolute and not _interpreter_link(parts)):
                raise UnsafeArchive(f"the symbolic link '{member.name}' points to the "
                                    f"absolute path '{target}'")
            tree.add(parts, _LINK, target, member.name)
        elif member.islnk():
            source = tuple(_parts(member.linkname))
            if tree.nodes.get(source, ("",))[0] != _FILE:
                raise UnsafeArchive(f"the hard link '{member.name}' -> '{member.linkname}' "
                                    f"does not name a file of the archive before it")
            tree.add(parts, _FILE, "", member.name)
        else:
            raise UnsafeArchive(f"the member '{member.name}' is a device or a FIFO")
    for key, (kind, target) in tree.nodes.items():
        if kind == _LINK and not target.startswith("/"):  # absolute: interpreter links only
            tree.resolve(key[:-1], target, "/".join(key))


def _interpreter_link(parts: list[str]) -> bool:
    """Whether a member is a virtual environment's interpreter (``bin/python3``)."""
    return len(parts) == 2 and parts[0] == "bin" and bool(_INTERPRETER.fullmatch(parts[1]))


def _mode(member: tarfile.TarInfo) -> int:
    """The member's permissions without setuid/setgid/sticky and group/other write; the
    owner may always read (and enter a directory) so that the cache can be removed."""
    mode = member.mode & 0o755
    return mode | (0o700 if member.isdir() else 0o600)


def extract(archive: tarfile.TarFile, dest: Path, max_bytes: int) -> None:
    """Check every member of ``archive`` (:func:`check_members`), then unpack them into
    the new, empty folder ``dest``. Raises :class:`UnsafeArchive` before writing anything
    when the archive may not be unpacked."""
    members = archive.getmembers()
    check_members(members, max_bytes)
    root = str(dest)
    directories: list[tuple[str, int]] = []
    for member in members:
        parts = _parts(member.name)
        if not parts:
            continue
        path = os.path.join(root, *parts)
        parent = os.path.dirname(path)
        os.makedirs(parent, mode=0o755, exist_ok=True)  # only real folders lie on the way
        if member.isdir():
            if not os.path.isdir(path):
                os.mkdir(path, 0o700)
            directories.append((path, _mode(member)))
        elif member.issym():
            os.symlink(member.linkname, path)
        elif member.islnk():
            os.link(os.path.join(root, *_parts(member.linkname)), path,
                    follow_symlinks=False)
        else:
            source = archive.extractfile(member)
            assert source is not None  # a regular file always has data
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(path, flags, 0o600)
            with os.fdopen(fd, "wb") as out, source:
                while chunk := source.read(COPY_CHUNK_BYTES):
                    out.write(chunk)
            os.chmod(path, _mode(member))
            os.utime(path, (member.mtime, member.mtime))
    for path, mode in reversed(directories):  # last: a read-only folder is filled first
        os.chmod(path, mode)

"""The shared memory regions a server's process tree has mapped, read from /proc.

test.sh checks ``shm-default-byte-size`` by listing ``/dev/shm/triton_python_backend_shm*``:
Triton's stubs keep their region's file there while they live. naiad's workers unlink a
region's file as soon as it is made (nothing is left behind whatever happens to either
process) and make it at the first batch that needs one, so on naiad the same property is
read where the region still shows: the ``/dev/shm/...`` (deleted) mappings in
``/proc/PID/maps`` of the server and its workers, after one batch that used the region.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (children, their children...)."""
    parents: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, []))
    return found


def mapped_regions(pid: int, directory: str = "/dev/shm") -> dict[int, list[tuple[str, int]]]:
    """For each process of ``pid``'s tree that maps files of ``directory``: (file, bytes
    mapped) per mapping. A region mapped in one piece shows as one mapping of its size."""
    regions: dict[int, list[tuple[str, int]]] = {}
    prefix = directory.rstrip("/") + "/"
    for proc in descendants(pid):
        try:
            lines = (PROC / str(proc) / "maps").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or not fields[5].startswith(prefix):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            regions.setdefault(proc, []).append((fields[5], end - start))
    return regions


def region_sizes(pid: int, name_prefix: str, directory: str = "/dev/shm") -> list[int]:
    """The sizes of the regions named ``name_prefix*`` that ``pid``'s tree maps."""
    return [size for maps in mapped_regions(pid, directory).values() for path, size in maps
            if os.path.basename(path.removesuffix(" (deleted)")).startswith(name_prefix)]

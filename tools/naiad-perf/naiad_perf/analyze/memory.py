"""The server's memory: resident set size of its process and every process below it (Python
models' worker processes), read from /proc (Linux), sampled while a candidate is measured.

A server analyze starts itself is known by its process id. For one given by URL, the process
is found through the listening socket when the URL is a loopback address of this machine and
/proc lets this user read that process's file descriptors (same user, or root); otherwise the
memory is unknown and ``--max-memory`` and the memory objective need local mode (or
``--server-pid``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

PROC = Path("/proc")
MIB = 1024 * 1024
SAMPLE_INTERVAL_S = 0.25  # default of --memory-sample-interval (seconds)


def _children(proc: Path) -> dict[int, list[int]]:
    """Parent id -> child ids, for every process /proc shows."""
    tree: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2:].split()
        tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def _rss_bytes(proc: Path, pid: int) -> int:
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def process_tree_rss_mb(pid: int, proc: Path = PROC) -> float:
    """The resident memory (MiB) of ``pid`` and all its descendants."""
    tree = _children(proc)
    total, pending, seen = 0, [pid], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        total += _rss_bytes(proc, current)
        pending.extend(tree.get(current, []))
    return total / MIB


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(inode)
    return inodes


def pid_listening_on(port: int, proc: Path = PROC) -> int | None:
    """The process that listens on TCP ``port`` on this machine, if /proc lets us see it."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return int(entry.name)
        except OSError:
            continue  # not ours to read, or gone
    return None


class PeakMemory:
    """Samples a process tree's resident memory on a thread until stopped; keeps the peak."""

    def __init__(self, pid: int, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="analyze-memory", daemon=True)

    def _run(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, process_tree_rss_mb(self.pid))
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, process_tree_rss_mb(self.pid))

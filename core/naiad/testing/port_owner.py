"""Which processes listen on a loopback TCP port (Linux ``/proc``).

``free_port()`` can only say that nothing listens on a port *now*: between that answer and the
server's bind, another test process (a second pytest-xdist worker, another suite on the host)
may be given the same port and bind it first. A server started on it then fails to bind and
exits, but the health check that polls the port meanwhile gets the *other* server's 200, and
the tests talk to a stranger until it stops ("connection refused" mid-module).
``ServerProcess.start`` asks this module whether the listener that answered is its own.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
#: the state column of /proc/net/tcp{,6} for a listening socket
TCP_LISTEN = "0A"


def listening_socket_inodes(port: int) -> set[str]:
    """The inodes of the sockets listening on TCP ``port`` (any address, IPv4 or IPv6);
    empty where ``/proc/net`` cannot be read."""
    inodes: set[str] = set()
    for table in (PROC / "net" / "tcp", PROC / "net" / "tcp6"):
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != TCP_LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _group_pids(pgid: int) -> list[int]:
    """The processes whose process group is ``pgid`` (a server and every child it started)."""
    pids = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def _socket_inodes_of(pid: int) -> set[str]:
    inodes = set()
    try:
        fds = list((PROC / str(pid) / "fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def port_listener_is_foreign(port: int, pgid: int) -> bool:
    """True when something listens on ``port`` and no process of the group ``pgid`` holds
    that listening socket: the port went to another process. False when the group holds it,
    and when it cannot be told (no ``/proc``, nothing listening)."""
    listeners = listening_socket_inodes(port)
    if not listeners:
        return False
    held: set[str] = set()
    for pid in _group_pids(pgid):
        held |= _socket_inodes_of(pid)
    return not listeners & held

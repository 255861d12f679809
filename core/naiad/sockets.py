"""Listening sockets for naiad's HTTP listeners and for frontend plugins: one public helper
(a plugin may import it, see docs/plugin-author-guide.md), so that every port naiad opens
behaves alike: a port another process holds is an error naming the address and the flag that
lets processes share it, never a silent share."""

from __future__ import annotations

import errno
import socket


def bind_listening_sockets(host: str, port: int, *, reuse_port: bool = False,
                           reuse_flag: str, service: str = "") -> list[socket.socket]:
    """TCP sockets bound (not yet listening) to every address of ``host`` at ``port``.

    With ``reuse_port`` (the operator's ``reuse_flag``, such as ``--reuse-http-port``),
    SO_REUSEPORT: processes that all set it may listen on one port and the kernel spreads
    new connections among them. Without it a port another process listens on is refused,
    so two servers on one host never share a port by accident.

    Raises OSError naming ``service`` (a prefix such as ``"OpenAI frontend: "``), the
    address, and ``reuse_flag`` when the port is in use; the caller binds before its HTTP
    server starts, so a taken port stops start-up with that message.
    """
    if reuse_port and not hasattr(socket, "SO_REUSEPORT"):
        raise OSError(f"{service}{reuse_flag} needs SO_REUSEPORT, which this system lacks")
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise OSError(f"{service}cannot resolve {host}: {exc}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            # As asyncio's create_server does: restart on a port in TIME_WAIT, and keep an
            # IPv6 socket off the IPv4 addresses another of these sockets binds.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            # Accepted connections inherit it, as hypercorn sets it on sockets of its own.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind(address)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        how = " with SO_REUSEPORT" if reuse_port else ""
        hint = (f" (processes share a port only when each sets {reuse_flag}=true)"
                if exc.errno == errno.EADDRINUSE else "")
        raise OSError(f"{service}cannot listen on {host}:{port}{how}: "
                      f"{exc.strerror or exc}{hint}") from None
    return sockets

"""naiad.sockets.bind_listening_sockets: a held port is refused naming the address and the
flag that shares it; processes that all ask for SO_REUSEPORT share it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from naiad.sockets import bind_listening_sockets
from naiad.testing import free_port


@contextmanager
def listening(port: int, reuse_port: bool) -> Iterator[list[socket.socket]]:
    sockets = bind_listening_sockets("127.0.0.1", port, reuse_port=reuse_port,
                                     reuse_flag="--reuse-test-port")
    try:
        for sock in sockets:
            sock.listen()
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("reuse", [False, True], ids=["neither", "only-the-second"])
def test_a_port_another_socket_listens_on_is_refused_naming_the_flag(reuse: bool) -> None:
    port = free_port()
    with listening(port, reuse_port=False), pytest.raises(OSError) as refused:
        bind_listening_sockets("127.0.0.1", port, reuse_port=reuse,
                               reuse_flag="--reuse-test-port", service="Test API: ")
    how = " with SO_REUSEPORT" if reuse else ""
    assert str(refused.value) == (
        f"Test API: cannot listen on 127.0.0.1:{port}{how}: Address already in use "
        "(processes share a port only when each sets --reuse-test-port=true)")


def test_sockets_that_all_ask_for_reuse_share_the_port() -> None:
    port = free_port()
    with listening(port, reuse_port=True) as first, listening(port, reuse_port=True) as second:
        assert first[0].getsockname() == second[0].getsockname() == ("127.0.0.1", port)
        assert first[0].getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1


def test_an_unknown_host_is_refused_by_name() -> None:
    with pytest.raises(OSError, match=r"^API: cannot resolve no-such-host\.invalid: "):
        bind_listening_sockets("no-such-host.invalid", 0, reuse_flag="--x", service="API: ")

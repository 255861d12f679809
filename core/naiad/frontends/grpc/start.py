"""Starting the gRPC frontend with the server ``--grpc-server`` names: naiad's own HTTP/2
server (:mod:`.naiad_server`, the default) or grpc's thread-pool server (:mod:`.listener`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from naiad.frontends.grpc.listener import start_grpcio_server
from naiad.frontends.grpc.naiad_server import start_naiad_grpc_server
from naiad.frontends.grpc.options import GRPCOptions

if TYPE_CHECKING:
    from naiad.server import InferenceServer


async def start_grpc_server(server: InferenceServer, address: str, port: int,
                            options: GRPCOptions | None = None) -> Any:
    """Serve ``server`` over gRPC on ``address:port`` as ``options`` (the ``--grpc-*``
    flags) say; started on return: a listener with ``await stop(grace)``. Raises OSError
    when the port cannot be bound or a TLS file cannot be used."""
    options = options or GRPCOptions()
    if options.server == "grpcio":
        return await start_grpcio_server(server, address, port, options)
    return await start_naiad_grpc_server(server, address, port, options)


__all__ = ["start_grpc_server"]

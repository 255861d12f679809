"""PyTriton's clients (``pytriton.client``)."""

from naiad.pytriton.client.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
)

__all__ = ["AsyncioDecoupledModelClient", "AsyncioModelClient", "DecoupledModelClient",
           "FuturesModelClient", "ModelClient"]

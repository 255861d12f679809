"""naiad.metadata: what the server says about itself and its models."""

from __future__ import annotations

import pytest

from naiad import __version__
from naiad.errors import InferenceServerError, Status
from naiad.metadata import EXTENSIONS
from naiad.server import InferenceServer
from naiad.server_options import ServerOptions


def test_server_metadata_and_unknown_models(tmp_path):
    server = InferenceServer(ServerOptions(model_repositories=[str(tmp_path)],
                                           server_id="triton"))
    assert server.server_metadata() == {"name": "triton", "version": __version__,
                                        "extensions": EXTENSIONS}
    assert server.statistics() == []
    with pytest.raises(InferenceServerError, match="requested model 'x' is not available") as e:
        server.statistics("x")
    assert e.value.status is Status.INVALID_ARG
    with pytest.raises(InferenceServerError, match="Request for unknown model : x"):
        server.trace_settings("x", {})
    assert ["trace_level", ["OFF"]] in [list(row) for row in server.trace_settings("", {})]

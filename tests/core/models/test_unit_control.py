"""naiad.models.control: loading and unloading on request, in explicit model control only,
with Triton's refusal otherwise."""

from __future__ import annotations

import pytest

from naiad.errors import InferenceServerError, Status
from naiad.models.control import CONTROL_REFUSED
from naiad.server import InferenceServer
from naiad.server_options import ServerOptions


@pytest.mark.parametrize("mode", ["none", "poll"])
async def test_load_and_unload_are_refused_unless_explicit(tmp_path, mode):
    server = InferenceServer(ServerOptions(model_repositories=[str(tmp_path)],
                                           model_control_mode=mode))
    for call in (server.load_model("m"), server.unload_model("m")):
        with pytest.raises(InferenceServerError) as refused:
            await call
        assert refused.value.status is Status.UNAVAILABLE
        assert CONTROL_REFUSED in refused.value.message and f"'{mode}'" in refused.value.message


async def test_files_need_a_config_and_an_unknown_model_is_not_found(tmp_path):
    server = InferenceServer(ServerOptions(model_repositories=[str(tmp_path)],
                                           model_control_mode="explicit"))
    with pytest.raises(InferenceServerError, match="'config' parameter is required") as bad:
        await server.load_model("m", files={"file:1/model.py": b""})
    assert bad.value.status is Status.INVALID_ARG
    with pytest.raises(InferenceServerError) as missing:
        await server.load_model("missing")
    assert missing.value.status is Status.NOT_FOUND

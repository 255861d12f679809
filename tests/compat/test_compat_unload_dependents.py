"""``unload_dependents`` (the model_repository extension's parameter), both servers.

The repository's ``pipeline`` ensemble calls ``add_sub`` and ``mul``. Unloading it plainly
leaves them serving; with ``unload_dependents`` over HTTP or gRPC they go with it. The
repository index is compared after each step, and both servers advertise the extension.
Tests depend on their order (file order).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from compat_helpers import compare_index, grpc_call, http_request, on_both

pytestmark = pytest.mark.compat

COMPAT_SERVER_ARGS = ["--model-control-mode", "explicit", "--load-model", "pipeline"]
COMPAT_EXPECT_READY = ("pipeline", "add_sub", "mul")
ENSEMBLE_PARTS = ("pipeline", "add_sub", "mul")


def settled_index(server: Any, timeout: float = 20.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        doc = http_request(server.http_port, "POST", "/v2/repository/index", {}).json()
        if not any(m.get("state") in ("LOADING", "UNLOADING") for m in doc) \
                or time.monotonic() > deadline:
            return [m for m in doc if m["name"] in ENSEMBLE_PARTS]
        time.sleep(0.1)


def states(index: list[dict[str, Any]]) -> dict[str, str]:
    return {m["name"]: m.get("state", "") for m in index}


def post_both(servers: Any, path: str, body: Any) -> None:
    t, n = on_both(lambda s: http_request(s.http_port, "POST", path, body, timeout=120),
                   servers.triton, servers.naiad)
    assert (t.status, n.status) == (200, 200), (t, n)


def compare(servers: Any, strict: bool) -> dict[str, str]:
    t, n = on_both(settled_index, servers.triton, servers.naiad)
    compare_index(t, n, strict)
    return states(n)


def test_extension_is_advertised(servers: Any) -> None:
    t, n = on_both(lambda s: http_request(s.http_port, "GET", "/v2").json()["extensions"],
                   servers.triton, servers.naiad)
    assert "model_repository(unload_dependents)" in t
    assert "model_repository(unload_dependents)" in n


def test_plain_unload_keeps_the_composing_models(servers: Any, strict: bool) -> None:
    assert compare(servers, strict) == dict.fromkeys(ENSEMBLE_PARTS, "READY")
    post_both(servers, "/v2/repository/models/pipeline/unload", {})
    assert compare(servers, strict) == {"pipeline": "UNAVAILABLE", "add_sub": "READY",
                                        "mul": "READY"}


def test_http_unload_dependents_unloads_them(servers: Any, strict: bool) -> None:
    post_both(servers, "/v2/repository/models/pipeline/load", {})
    post_both(servers, "/v2/repository/models/pipeline/unload",
              {"parameters": {"unload_dependents": True}})
    assert compare(servers, strict) == dict.fromkeys(ENSEMBLE_PARTS, "UNAVAILABLE")


def test_grpc_unload_dependents_unloads_them(servers: Any, strict: bool) -> None:
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as pbg

    post_both(servers, "/v2/repository/models/pipeline/load", {})
    assert compare(servers, strict) == dict.fromkeys(ENSEMBLE_PARTS, "READY")
    request = pb.RepositoryModelUnloadRequest(model_name="pipeline")
    request.parameters["unload_dependents"].bool_param = True

    def unload(server: Any) -> Any:
        with grpc.insecure_channel(server.grpc_url) as channel:
            return grpc_call(pbg.GRPCInferenceServiceStub(channel), "RepositoryModelUnload",
                             request, timeout=120)

    t, n = on_both(unload, servers.triton, servers.naiad)
    assert (t.code, n.code) == ("OK", "OK"), (t, n)
    assert compare(servers, strict) == dict.fromkeys(ENSEMBLE_PARTS, "UNAVAILABLE")


def test_a_wrong_typed_unload_dependents_is_refused_by_naiad(servers: Any, strict: bool) -> None:
    if not strict:
        pytest.skip("a naiad-only check")
    res = http_request(servers.naiad.http_port, "POST", "/v2/repository/models/add_sub/unload",
                       {"parameters": {"unload_dependents": "yes"}})
    assert res.status == 400 and "unload_dependents" in res.body.decode()

"""Explicit model control (``--model-control-mode explicit --load-model add_sub``), both servers.

Load, failed load, unload, reload over HTTP and gRPC, with the repository index, server and model
readiness, and requests to an unloaded model compared after each step. Tests depend on their
order (file order). Deliberate difference (off in the self-test): loading a model that does not
exist or whose config.pbtxt does not parse is answered 500 / INTERNAL by Triton; naiad answers
a 4xx / client-error code.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from compat_helpers import (
    Case,
    both,
    check_error,
    check_infer,
    compare_index,
    grpc_call,
    http_request,
    on_both,
)

pytestmark = pytest.mark.compat

COMPAT_SERVER_ARGS = ["--model-control-mode", "explicit", "--load-model", "add_sub"]
COMPAT_EXPECT_READY = ("add_sub",)

GRPC_CLIENT_ERRORS = {"INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION"}
INFER = {
    "inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [5, 6, 7, 8]},
    ]
}


def settled_index(server: Any, timeout: float = 15.0) -> list[dict[str, Any]]:
    """The repository index once no model is LOADING/UNLOADING (Triton unloads in background)."""
    deadline = time.monotonic() + timeout
    while True:
        res = http_request(server.http_port, "POST", "/v2/repository/index", {})
        assert res.status == 200, res
        doc = res.json()
        if (
            not any(m.get("state") in ("LOADING", "UNLOADING") for m in doc)
            or time.monotonic() > deadline
        ):
            return doc
        time.sleep(0.1)


def compare_settled_index(servers: Any, strict: bool) -> None:
    compare_index(*on_both(settled_index, servers.triton, servers.naiad), strict)


def test_index_at_start(servers: Any, strict: bool) -> None:
    compare_settled_index(servers, strict)
    case = Case("index-ready", "POST", "/v2/repository/index", {"ready": True})
    t, n = both(servers, case)
    compare_index(t.json(), n.json(), strict)


def test_not_loaded_model(servers: Any, strict: bool) -> None:
    for case in [
        Case("metadata", "GET", "/v2/models/strings", model="strings"),
        Case("ready", "GET", "/v2/models/strings/ready", model="strings"),
        Case(
            "infer",
            "POST",
            "/v2/models/strings/infer",
            {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES", "data": ["a"]}]},
            model="strings",
        ),
    ]:
        t, n = both(servers, case)
        check_error(case, t, n, strict)


@pytest.mark.parametrize("body", [pytest.param({}, id="json"), pytest.param(b"", id="no-body")])
def test_load(servers: Any, body: Any) -> None:
    t, n = both(servers, Case("load", "POST", "/v2/repository/models/strings/load", body))
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    assert n.body in (b"", b"{}"), f"naiad's load answer: {n!r} (Triton's body is empty)"
    t, n = both(servers, Case("ready", "GET", "/v2/models/strings/ready"))
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"


@pytest.mark.parametrize(
    "case",
    [
        Case(
            "initialize-raises",
            "POST",
            "/v2/repository/models/broken_init/load",
            {},
            model="broken_init",
            must_contain="deliberate failure in initialize",
        ).param(),
        Case(
            "unparseable-config",
            "POST",
            "/v2/repository/models/broken/load",
            {},
            model="broken",
            triton_500=True,
        ).param(),
        Case(
            "unknown-model",
            "POST",
            "/v2/repository/models/nope/load",
            {},
            model="nope",
            triton_500=True,
        ).param(),
    ],
)
def test_load_failure(servers: Any, strict: bool, case: Case) -> None:
    t, n = both(servers, case)
    check_error(case, t, n, strict)


def test_ready_after_failed_load(servers: Any, strict: bool) -> None:
    """Strict readiness: a model whose load failed makes the server not ready (Triton: 400)."""
    t, n = both(servers, Case("ready", "GET", "/v2/health/ready"))
    assert n.status == t.status, f"triton {t!r}, naiad {n!r}"
    compare_settled_index(servers, strict)


@pytest.mark.parametrize(
    "model", ["add_sub", "nope", "add_sub"], ids=["loaded", "unknown", "again"]
)
def test_unload(servers: Any, model: str) -> None:
    t, n = both(servers, Case("unload", "POST", f"/v2/repository/models/{model}/unload", {}))
    assert n.status == t.status == 200, f"triton {t!r}, naiad {n!r}"


def test_unloaded_model(servers: Any, strict: bool) -> None:
    compare_settled_index(servers, strict)
    for case in [
        Case("metadata", "GET", "/v2/models/add_sub", model="add_sub"),
        Case("config", "GET", "/v2/models/add_sub/config", model="add_sub"),
        Case("ready", "GET", "/v2/models/add_sub/ready", model="add_sub"),
        Case("stats", "GET", "/v2/models/add_sub/stats", model="add_sub"),
        Case("infer", "POST", "/v2/models/add_sub/infer", INFER, model="add_sub"),
    ]:
        t, n = both(servers, case)
        check_error(case, t, n, strict)


def test_reload(servers: Any, strict: bool) -> None:
    t, n = both(servers, Case("load", "POST", "/v2/repository/models/add_sub/load", {}))
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    t, n = both(servers, Case("infer", "POST", "/v2/models/add_sub/infer", INFER))
    check_infer(t, n)
    compare_settled_index(servers, strict)


# --------------------------------------------------------------------------------------------
# the same over gRPC


@pytest.fixture(scope="module")
def stubs(servers: Any) -> Any:
    grpc = pytest.importorskip("grpc")
    from tritonclient.grpc import service_pb2_grpc as pbg

    channels = [grpc.insecure_channel(s.grpc_url) for s in (servers.triton, servers.naiad)]
    yield [pbg.GRPCInferenceServiceStub(ch) for ch in channels]
    for ch in channels:
        ch.close()


def _grpc_both(stubs: Any, method: str, request: Any) -> tuple[Any, Any]:
    return on_both(lambda stub: grpc_call(stub, method, request), stubs[0], stubs[1])


def test_grpc_load_unload(servers: Any, stubs: Any, strict: bool) -> None:
    from tritonclient.grpc import service_pb2 as pb

    steps = [
        (
            "RepositoryModelLoad",
            pb.RepositoryModelLoadRequest(model_name="identity_batch"),
            None,
            False,
        ),
        (
            "RepositoryModelLoad",
            pb.RepositoryModelLoadRequest(model_name="broken_init"),
            "broken_init",
            False,
        ),
        ("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="nope"), "nope", True),
        ("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="broken"), "broken", True),
        (
            "RepositoryModelUnload",
            pb.RepositoryModelUnloadRequest(model_name="identity_batch"),
            None,
            False,
        ),
        ("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="nope"), None, False),
    ]
    for method, request, model, triton_internal in steps:
        t, n = _grpc_both(stubs, method, request)
        where = f"{method}({request.model_name})"
        if triton_internal and strict:
            assert t.code == "INTERNAL", f"{where}: Triton no longer answers INTERNAL ({t!r})"
            assert n.code in GRPC_CLIENT_ERRORS, (
                f"{where}: naiad must answer a client error, got {n!r}"
            )
        else:
            assert n.code == t.code, f"{where}: triton {t!r}, naiad {n!r}"
        if n.code != "OK":
            assert n.details.strip(), f"{where}: empty details"
            if strict and model:
                assert model in n.details, f"{where}: details do not name {model!r}: {n.details!r}"
    compare_settled_index(servers, strict)
    for method, request in [
        ("ServerReady", pb.ServerReadyRequest()),
        ("ModelReady", pb.ModelReadyRequest(name="identity_batch")),
        ("ModelMetadata", pb.ModelMetadataRequest(name="identity_batch")),
        ("ModelConfig", pb.ModelConfigRequest(name="identity_batch")),
        ("ModelStatistics", pb.ModelStatisticsRequest(name="identity_batch")),
        ("RepositoryIndex", pb.RepositoryIndexRequest(ready=True)),
    ]:
        t, n = _grpc_both(stubs, method, request)
        assert n.code == t.code, f"{method}: triton {t!r}, naiad {n!r}"
        if t.code == "OK" and method == "RepositoryIndex":
            compare_index(t.as_dict().get("models", []), n.as_dict().get("models", []), strict)
        elif t.code == "OK":
            assert t.as_dict() == n.as_dict(), (
                f"{method}: triton {t.as_dict()}, naiad {n.as_dict()}"
            )
        elif strict:
            assert "identity_batch" in n.details, (
                f"{method}: details do not name the model: {n.details!r}"
            )


# --------------------------------------------------------------------------------------------
# an ensemble and its composing models


def _load_or_unload(servers: Any, action: str, model: str) -> None:
    t, n = both(servers, Case(action, "POST", f"/v2/repository/models/{model}/{action}", {}))
    assert (t.status, n.status) == (200, 200), f"{action} {model}: triton {t!r}, naiad {n!r}"


def test_unloading_a_composing_model_unloads_the_ensemble(servers: Any, strict: bool) -> None:
    # pipeline is add_sub -> mul. Loading it loads mul; unloading mul takes it down too.
    _load_or_unload(servers, "load", "pipeline")
    compare_settled_index(servers, strict)
    _load_or_unload(servers, "unload", "mul")
    compare_settled_index(servers, strict)
    for case in [
        Case("ready", "GET", "/v2/models/pipeline/ready", model="pipeline"),
        Case("infer", "POST", "/v2/models/pipeline/infer", INFER, model="pipeline"),
    ]:
        t, n = both(servers, case)
        check_error(case, t, n, strict)


def test_loading_the_composing_model_again_brings_the_ensemble_back(servers: Any,
                                                                    strict: bool) -> None:
    _load_or_unload(servers, "load", "mul")
    compare_settled_index(servers, strict)
    t, n = both(servers, Case("infer", "POST", "/v2/models/pipeline/infer", INFER))
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    # Compared by value: Triton echoes sequence parameters in an ensemble's answer and naiad
    # does not (docs/compatibility.md).
    a, b = INFER["inputs"][0]["data"], INFER["inputs"][1]["data"]
    expected = [(x + y) * (x - y) for x, y in zip(a, b, strict=True)]
    for result in (t, n):
        assert result.json()["outputs"][0]["data"] == expected


def test_an_ensemble_unloaded_on_purpose_stays_unloaded(servers: Any, strict: bool) -> None:
    _load_or_unload(servers, "unload", "pipeline")
    _load_or_unload(servers, "unload", "mul")
    _load_or_unload(servers, "load", "mul")
    compare_settled_index(servers, strict)
    t, n = both(servers, Case("ready", "GET", "/v2/models/pipeline/ready", model="pipeline"))
    assert (t.status, n.status) == (400, 400), f"triton {t!r}, naiad {n!r}"

"""gRPC differential tests: the same GRPCInferenceService calls to Triton and to naiad.

Compared: the status code of every call, and on success the whole response message as a dict
(``json_format.MessageToDict``; statistics with durations/timestamps removed, index and
statistics lists sorted by name). Error details are free text: naiad's must be non-empty and
name the model. Deliberate differences (off in the Triton-vs-Triton self-test): server metadata
``name``/``version``/``extensions`` as in test_compat_http; a failed model's repository index
entry may carry state UNAVAILABLE and a reason.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from compat_helpers import (
    GOOD_MODELS,
    GrpcResult,
    assert_same,
    client_call,
    compare_index,
    eventually,
    grpc_call,
    infer_result_data,
    normalize_stats,
    on_both,
    serialize_bytes,
)

pytestmark = pytest.mark.compat

grpc = pytest.importorskip("grpc")
from tritonclient.grpc import service_pb2 as pb  # noqa: E402
from tritonclient.grpc import service_pb2_grpc as pbg  # noqa: E402

CORE_EXTENSIONS = {
    "binary_tensor_data",
    "model_repository",
    "model_configuration",
    "statistics",
    "parameters",
}

A = np.array([1, 2, 3, 4], np.float32)
B = np.array([10, 20, 30, 40], np.float32)


@dataclass
class Stubs:
    triton: Any
    naiad: Any


@pytest.fixture(scope="module")
def stubs(servers: Any) -> Any:
    tch = grpc.insecure_channel(servers.triton.grpc_url)
    nch = grpc.insecure_channel(servers.naiad.grpc_url)
    yield Stubs(pbg.GRPCInferenceServiceStub(tch), pbg.GRPCInferenceServiceStub(nch))
    tch.close()
    nch.close()


@dataclass
class Call:
    id: str
    method: str
    request: Any
    model: str | None = None  # the model naiad's error details must name
    must_contain: str | None = None
    # A deliberate difference (docs/compatibility.md): the status naiad answers instead of
    # Triton's. None means "the same as Triton".
    naiad_code: str | None = None

    def param(self) -> Any:
        return pytest.param(self, id=self.id)


def both(stubs: Stubs, call: Call) -> tuple[GrpcResult, GrpcResult]:
    return on_both(
        lambda stub: grpc_call(stub, call.method, call.request), stubs.triton, stubs.naiad
    )


def normalized(call: Call, res: GrpcResult) -> Any:
    doc = res.as_dict()
    if call.method == "ModelStatistics":
        doc = normalize_stats(doc)
        doc.get("model_stats", []).sort(key=lambda s: (s.get("name", ""), s.get("version", "")))
    return doc


def check(call: Call, t: GrpcResult, n: GrpcResult, strict: bool) -> None:
    if strict and call.naiad_code is not None:
        assert t.code != call.naiad_code, f"Triton now answers {t!r}: update the allow-list"
        assert n.code == call.naiad_code, f"{call.method}: naiad {n!r}"
    else:
        assert n.code == t.code, f"{call.method}: triton {t!r}, naiad {n!r}"
    if t.code == "OK":
        if call.method == "RepositoryIndex":
            compare_index(t.as_dict().get("models", []), n.as_dict().get("models", []), strict)
        else:
            assert_same(normalized(call, t), normalized(call, n), f"{call.method} {call.id}")
        return
    assert n.details.strip(), f"naiad's {n.code} has empty details"
    if strict and call.model:
        assert call.model in n.details, f"naiad's details do not name {call.model!r}: {n.details!r}"
    if strict and call.must_contain:
        assert call.must_contain in n.details, (
            f"naiad's details lack {call.must_contain!r}: {n.details!r}"
        )


# --------------------------------------------------------------------------------------------


def test_statistics_before_any_inference(stubs: Stubs) -> None:
    for req in [
        pb.ModelStatisticsRequest(),
        pb.ModelStatisticsRequest(name="add_sub"),
        pb.ModelStatisticsRequest(name="add_sub", version="1"),
    ]:
        call = Call("stats", "ModelStatistics", req)
        t, n = both(stubs, call)
        assert (t.code, n.code) == ("OK", "OK"), (t, n)
        assert_same(t.as_dict(), n.as_dict(), "ModelStatistics before any inference (exact)")


def test_server_metadata(stubs: Stubs, strict: bool) -> None:
    t, n = both(stubs, Call("meta", "ServerMetadata", pb.ServerMetadataRequest()))
    assert (t.code, n.code) == ("OK", "OK"), (t, n)
    td, nd = t.as_dict(), n.as_dict()
    if not strict:
        assert_same(td, nd, "ServerMetadata")
        return
    assert nd.get("name") and nd.get("version"), nd
    assert set(nd.get("extensions", [])) <= set(td["extensions"]), nd
    assert set(nd.get("extensions", [])) >= CORE_EXTENSIONS, nd


CALLS = [
    Call("live", "ServerLive", pb.ServerLiveRequest()),
    Call("ready", "ServerReady", pb.ServerReadyRequest()),
    Call("model-ready", "ModelReady", pb.ModelReadyRequest(name="add_sub")),
    Call("model-ready-v1", "ModelReady", pb.ModelReadyRequest(name="add_sub", version="1")),
    Call("model-ready-v2", "ModelReady", pb.ModelReadyRequest(name="add_sub", version="2")),
    Call("model-ready-unknown", "ModelReady", pb.ModelReadyRequest(name="nope")),
    Call("model-ready-broken-init", "ModelReady", pb.ModelReadyRequest(name="broken_init")),
    *[
        Call(f"metadata-{m}", "ModelMetadata", pb.ModelMetadataRequest(name=m), m)
        for m in ("add_sub", "identity_batch", "strings")
    ],
    Call(
        "metadata-v1",
        "ModelMetadata",
        pb.ModelMetadataRequest(name="add_sub", version="1"),
        "add_sub",
    ),
    Call(
        "metadata-v2",
        "ModelMetadata",
        pb.ModelMetadataRequest(name="add_sub", version="2"),
        "add_sub",
    ),
    Call("metadata-unknown", "ModelMetadata", pb.ModelMetadataRequest(name="nope"), "nope"),
    Call("metadata-broken", "ModelMetadata", pb.ModelMetadataRequest(name="broken"), "broken"),
    Call(
        "metadata-broken-init",
        "ModelMetadata",
        pb.ModelMetadataRequest(name="broken_init"),
        "broken_init",
    ),
    *[Call(f"config-{m}", "ModelConfig", pb.ModelConfigRequest(name=m), m) for m in GOOD_MODELS],
    Call("config-v1", "ModelConfig", pb.ModelConfigRequest(name="add_sub", version="1"), "add_sub"),
    Call("config-unknown", "ModelConfig", pb.ModelConfigRequest(name="nope"), "nope"),
    Call("config-broken", "ModelConfig", pb.ModelConfigRequest(name="broken"), "broken"),
    Call("index", "RepositoryIndex", pb.RepositoryIndexRequest()),
    Call("index-ready", "RepositoryIndex", pb.RepositoryIndexRequest(ready=True)),
    Call("stats-unknown", "ModelStatistics", pb.ModelStatisticsRequest(name="nope"), "nope"),
    Call(
        "stats-broken-init",
        "ModelStatistics",
        pb.ModelStatisticsRequest(name="broken_init"),
        "broken_init",
    ),
    Call(
        "load-refused", "RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="add_sub")
    ),
    Call(
        "unload-refused",
        "RepositoryModelUnload",
        pb.RepositoryModelUnloadRequest(model_name="add_sub"),
    ),
]


@pytest.mark.parametrize("call", [c.param() for c in CALLS])
def test_call(stubs: Stubs, strict: bool, call: Call) -> None:
    t, n = both(stubs, call)
    check(call, t, n, strict)


# --------------------------------------------------------------------------------------------
# inference


def _tensor(
    name: str, datatype: str, shape: list[int], contents: dict[str, list[Any]] | None = None
) -> Any:
    x = pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
    for key, values in (contents or {}).items():
        getattr(x.contents, key).extend(values)
    return x


def infer(
    model: str = "add_sub",
    inputs: list[Any] | None = None,
    raw: list[bytes] | None = None,
    outputs: tuple[str, ...] = (),
    version: str = "",
    id: str = "req-1",
    parameters: dict[str, str] | None = None,
) -> Any:
    req = pb.ModelInferRequest(model_name=model, model_version=version, id=id)
    if inputs is None:
        inputs = [_tensor("INPUT0", "FP32", [4]), _tensor("INPUT1", "FP32", [4])]
        raw = [A.tobytes(), B.tobytes()]
    req.inputs.extend(inputs)
    if raw is not None:
        req.raw_input_contents.extend(raw)
    for name in outputs:
        req.outputs.add(name=name)
    for key, value in (parameters or {}).items():
        req.parameters[key].string_param = value
    return req


def _in0(shape: list[int] | None = None, datatype: str = "FP32") -> list[Any]:
    return [_tensor("INPUT0", datatype, shape or [4])]


def _strings(*items: bytes) -> bytes:
    return serialize_bytes(items)


INFER_GOOD = [
    Call("raw", "ModelInfer", infer()),
    Call("no-id", "ModelInfer", infer(id="")),
    Call("version-1", "ModelInfer", infer(version="1")),
    Call(
        "contents",
        "ModelInfer",
        infer(
            inputs=[
                _tensor("INPUT0", "FP32", [4], {"fp32_contents": A.tolist()}),
                _tensor("INPUT1", "FP32", [4], {"fp32_contents": B.tolist()}),
            ]
        ),
    ),
    Call("request-parameters", "ModelInfer", infer(parameters={"foo": "bar"})),
    Call("output-subset", "ModelInfer", infer(outputs=("OUTPUT1",))),
    Call("outputs-reordered", "ModelInfer", infer(outputs=("OUTPUT1", "OUTPUT0"))),
    Call(
        "batch-2x3",
        "ModelInfer",
        infer(
            "identity_batch",
            [_tensor("INPUT0", "FP32", [2, 3])],
            [np.arange(6, dtype=np.float32).tobytes()],
        ),
    ),
    Call(
        "strings-raw",
        "ModelInfer",
        infer(
            "strings",
            [_tensor("INPUT0", "BYTES", [3])],
            [_strings(b"hello", "wörld".encode(), b"")],
        ),
    ),
    Call(
        "strings-contents",
        "ModelInfer",
        infer("strings", [_tensor("INPUT0", "BYTES", [2], {"bytes_contents": [b"hello", b"x"]})]),
    ),
]


@pytest.mark.parametrize("call", [c.param() for c in INFER_GOOD])
def test_inference(stubs: Stubs, strict: bool, call: Call) -> None:
    t, n = both(stubs, call)
    assert t.code == "OK", f"Triton failed a good request: {t!r}"
    check(call, t, n, strict)


def test_statistics_after_inference(stubs: Stubs) -> None:
    def compare() -> None:
        for req in [
            pb.ModelStatisticsRequest(name="add_sub"),
            pb.ModelStatisticsRequest(name="identity_batch"),
        ]:
            call = Call("stats", "ModelStatistics", req)
            t, n = both(stubs, call)
            assert (t.code, n.code) == ("OK", "OK"), (t, n)
            assert_same(normalized(call, t), normalized(call, n), f"ModelStatistics {req.name}")

    eventually(compare)


INFER_ERRORS = [
    Call("unknown-model", "ModelInfer", infer("nope"), "nope"),
    Call("unknown-version", "ModelInfer", infer(version="7"), "add_sub"),
    Call("broken-model", "ModelInfer", infer("broken", _in0(), [A.tobytes()]), "broken"),
    Call("broken-init-model", "ModelInfer", infer("broken_init"), "broken_init"),
    Call(
        "wrong-datatype",
        "ModelInfer",
        infer(
            inputs=[_tensor("INPUT0", "INT32", [4]), _tensor("INPUT1", "FP32", [4])],
            raw=[A.astype(np.int32).tobytes(), B.tobytes()],
        ),
        "add_sub",
    ),
    Call(
        "wrong-shape",
        "ModelInfer",
        infer(
            inputs=[_tensor("INPUT0", "FP32", [3]), _tensor("INPUT1", "FP32", [4])],
            raw=[A[:3].tobytes(), B.tobytes()],
        ),
        "add_sub",
    ),
    Call(
        "raw-too-few-bytes",
        "ModelInfer",
        infer(
            inputs=[_tensor("INPUT0", "FP32", [4]), _tensor("INPUT1", "FP32", [4])],
            raw=[A[:3].tobytes(), B.tobytes()],
        ),
        "add_sub",
    ),
    Call(
        "contents-too-few",
        "ModelInfer",
        infer(
            inputs=[
                _tensor("INPUT0", "FP32", [4], {"fp32_contents": [1, 2, 3]}),
                _tensor("INPUT1", "FP32", [4], {"fp32_contents": B.tolist()}),
            ]
        ),
        "add_sub",
    ),
    Call(
        "raw-contents-missing",
        "ModelInfer",
        infer(
            inputs=[_tensor("INPUT0", "FP32", [4]), _tensor("INPUT1", "FP32", [4])],
            raw=[A.tobytes()],
        ),
        "add_sub",
    ),
    Call(
        "batch-without-batch-dim",
        "ModelInfer",
        infer("identity_batch", [_tensor("INPUT0", "FP32", [3])], [A[:3].tobytes()]),
        "identity_batch",
    ),
    Call(
        "batch-too-large",
        "ModelInfer",
        infer(
            "identity_batch",
            [_tensor("INPUT0", "FP32", [9, 1])],
            [np.zeros(9, np.float32).tobytes()],
        ),
        "identity_batch",
    ),
    Call("missing-input", "ModelInfer", infer(inputs=_in0(), raw=[A.tobytes()]), "add_sub"),
    Call(
        "extra-unknown-input",
        "ModelInfer",
        infer(
            inputs=[
                _tensor("INPUT0", "FP32", [4]),
                _tensor("INPUT1", "FP32", [4]),
                _tensor("INPUT9", "FP32", [4]),
            ],
            raw=[A.tobytes(), B.tobytes(), A.tobytes()],
        ),
        "add_sub",
    ),
    Call("unknown-requested-output", "ModelInfer", infer(outputs=("OUTPUT9",)), "add_sub"),
    Call(
        "model-raises",
        "ModelInfer",
        infer("raises", _in0(), [A.tobytes()]),
        "raises",
        must_contain="deliberate failure in execute",
        naiad_code="INVALID_ARGUMENT",  # Triton: INTERNAL
    ),
    Call(
        "model-error-response",
        "ModelInfer",
        infer("error_response", _in0(), [A.tobytes()]),
        "error_response",
        must_contain="error_response: deliberate error",
    ),
]


@pytest.mark.parametrize("call", [c.param() for c in INFER_ERRORS])
def test_inference_error(stubs: Stubs, strict: bool, call: Call) -> None:
    t, n = both(stubs, call)
    assert t.code != "OK", f"Triton accepted a bad request: {t!r}"
    check(call, t, n, strict)


# --------------------------------------------------------------------------------------------
# tritonclient.grpc's view


def _inputs(arrays: dict[str, np.ndarray]) -> list[Any]:
    import tritonclient.grpc as grpcclient

    out = []
    for name, arr in arrays.items():
        dt = (
            "BYTES"
            if arr.dtype == np.object_
            else {np.float32: "FP32", np.int32: "INT32"}[arr.dtype.type]
        )
        x = grpcclient.InferInput(name, list(arr.shape), dt)
        x.set_data_from_numpy(arr)
        out.append(x)
    return out


def _infer(c: Any, model: str, arrays: dict[str, np.ndarray], names: list[str], **kw: Any) -> Any:
    res = c.infer(model, _inputs(arrays), **kw)
    return {"response": res.get_response(as_json=True), "data": infer_result_data(res, names)}


# Deliberate differences (docs/compatibility.md): naiad's status where it differs from Triton.
NAIAD_CLIENT_STATUS = {"infer-raises": "StatusCode.INVALID_ARGUMENT"}

CLIENT_CALLS: dict[str, Any] = {
    "is_server_live": lambda c, m: c.is_server_live(),
    "is_server_ready": lambda c, m: c.is_server_ready(),
    "is_model_ready": lambda c, m: c.is_model_ready("add_sub"),
    "is_model_ready-unknown": lambda c, m: c.is_model_ready("nope"),
    "get_model_metadata": lambda c, m: c.get_model_metadata("identity_batch", as_json=True),
    "get_model_metadata-unknown": lambda c, m: c.get_model_metadata("nope"),
    "get_model_config": lambda c, m: c.get_model_config("add_sub", as_json=True),
    "get_inference_statistics-unknown": lambda c, m: c.get_inference_statistics("nope"),
    "unload_model-refused": lambda c, m: c.unload_model("add_sub"),
    "infer": lambda c, m: _infer(
        c, "add_sub", {"INPUT0": A, "INPUT1": B}, ["OUTPUT0", "OUTPUT1"], request_id="c1"
    ),
    "infer-subset": lambda c, m: _infer(
        c,
        "add_sub",
        {"INPUT0": A, "INPUT1": B},
        ["OUTPUT0", "OUTPUT1"],
        outputs=[m.InferRequestedOutput("OUTPUT0")],
    ),
    "infer-strings": lambda c, m: _infer(
        c, "strings", {"INPUT0": np.array([b"a", "wörld".encode()], dtype=np.object_)}, ["OUTPUT0"]
    ),
    "infer-batch": lambda c, m: _infer(
        c, "identity_batch", {"INPUT0": np.ones((3, 2), np.float32)}, ["OUTPUT0"]
    ),
    "infer-unknown-model": lambda c, m: c.infer("nope", _inputs({"INPUT0": A, "INPUT1": B})),
    "infer-wrong-dtype": lambda c, m: c.infer(
        "add_sub", _inputs({"INPUT0": A.astype(np.int32), "INPUT1": B})
    ),
    "infer-wrong-shape": lambda c, m: c.infer("add_sub", _inputs({"INPUT0": A[:3], "INPUT1": B})),
    "infer-missing-input": lambda c, m: c.infer("add_sub", _inputs({"INPUT0": A})),
    "infer-raises": lambda c, m: c.infer("raises", _inputs({"INPUT0": A})),
    "infer-error-response": lambda c, m: c.infer("error_response", _inputs({"INPUT0": A})),
}


@pytest.mark.parametrize("name", list(CLIENT_CALLS))
def test_tritonclient_grpc(servers: Any, strict: bool, name: str) -> None:
    import tritonclient.grpc as grpcclient

    tc = grpcclient.InferenceServerClient(servers.triton.grpc_url)
    nc = grpcclient.InferenceServerClient(servers.naiad.grpc_url)
    try:
        t = client_call(lambda: CLIENT_CALLS[name](tc, grpcclient))
        n = client_call(lambda: CLIENT_CALLS[name](nc, grpcclient))
    finally:
        tc.close()
        nc.close()
    assert n.ok == t.ok, f"triton {t}, naiad {n}"
    if t.ok:
        assert_same(t.value, n.value, f"tritonclient.grpc {name}")
    else:
        expected = NAIAD_CLIENT_STATUS.get(name, t.status) if strict else t.status
        assert n.status == expected, f"InferenceServerException.status(): triton {t}, naiad {n}"
        assert n.message, f"naiad's exception has no message: {n}"


def test_statistics_after_sequence(stubs: Stubs) -> None:
    def compare() -> None:
        call = Call("stats", "ModelStatistics", pb.ModelStatisticsRequest())
        t, n = both(stubs, call)
        assert (t.code, n.code) == ("OK", "OK"), (t, n)
        assert_same(
            normalized(call, t),
            normalized(call, n),
            "ModelStatistics (all models, durations ignored)",
        )

    eventually(compare)


def test_raw_bytes_helper() -> None:
    assert _strings(b"ab", b"") == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)

"""HTTP/REST differential tests: the same requests to Triton and to naiad, answers compared.

Compared field by field: status codes, JSON bodies (metadata, config, repository index,
inference responses including binary-tensor framing, statistics counts), tritonclient.http's view
and the Prometheus metric families. Not compared: free-text error messages (naiad's must be
non-empty, in the ``{"error": "..."}`` form, and name the model), durations and timestamps.

Deliberate differences (``strict`` checks, off in the Triton-vs-Triton self-test):
  * cases with ``triton_500=True``: Triton answers 500 to these malformed requests, naiad must
    answer 4xx;
  * server metadata: ``name``/``version`` are naiad's own; ``extensions`` must be a subset of
    Triton's list containing CORE_EXTENSIONS;
  * repository index: a model whose config.pbtxt does not parse may carry state UNAVAILABLE and
    a reason in naiad where Triton lists just its name (``reason`` texts are never compared);
  * metrics: the series of models that failed to load are not compared;
  * metrics: METRICS_NAIAD_MAY_OMIT (pinned-memory pool, a CUDA concept) may be absent.

Tests run in file order and every test sends the same requests to both servers, so the
statistics and metrics compared at the end were built by the same request sequence.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
from compat_helpers import (
    BROKEN_MODELS,
    GOOD_MODELS,
    Case,
    HttpResult,
    assert_same,
    binary_request,
    both,
    check_error,
    check_infer,
    client_call,
    compare_index,
    eventually,
    http_request,
    infer_result_data,
    json_diff,
    normalize_stats,
    parse_metrics,
    serialize_bytes,
)

pytestmark = pytest.mark.compat

CORE_EXTENSIONS = {
    "binary_tensor_data",
    "model_repository",
    "model_configuration",
    "statistics",
    "parameters",
}
METRICS_NAIAD_MAY_OMIT = {"nv_pinned_memory_pool_total_bytes", "nv_pinned_memory_pool_used_bytes"}

A = [1.0, 2.0, 3.0, 4.0]
B = [10.0, 20.0, 30.0, 40.0]


def _in(
    name: str, data: Any, shape: list[int] | None = None, datatype: str = "FP32"
) -> dict[str, Any]:
    return {
        "name": name,
        "shape": shape if shape is not None else [len(data)],
        "datatype": datatype,
        "data": data,
    }


GOOD = {"id": "req-1", "inputs": [_in("INPUT0", A), _in("INPUT1", B)]}


def _good(**over: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(GOOD))
    doc.update(over)
    return doc


def _f32(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


# --------------------------------------------------------------------------------------------
# statistics before anything ran (must stay the first test of the module)


def test_statistics_before_any_inference(servers: Any) -> None:
    for path in [
        "/v2/models/stats",
        "/v2/models/add_sub/stats",
        "/v2/models/add_sub/versions/1/stats",
    ]:
        t, n = both(servers, Case(path, "GET", path))
        assert (t.status, n.status) == (200, 200), f"{path}: triton {t!r}, naiad {n!r}"
        assert_same(t.json(), n.json(), f"GET {path} (exact, all zero)")


# --------------------------------------------------------------------------------------------
# health, metadata, config


HEALTH_CASES = [
    Case("live", "GET", "/v2/health/live"),
    Case("ready", "GET", "/v2/health/ready"),
    Case("model-ready", "GET", "/v2/models/add_sub/ready"),
    Case("model-version-ready", "GET", "/v2/models/add_sub/versions/1/ready"),
    Case(
        "model-ready-unknown-version", "GET", "/v2/models/add_sub/versions/2/ready", model="add_sub"
    ),
    Case("model-ready-unknown-model", "GET", "/v2/models/nope/ready", model="nope"),
    Case("model-ready-broken", "GET", "/v2/models/broken/ready", model="broken"),
    Case("model-ready-broken-init", "GET", "/v2/models/broken_init/ready", model="broken_init"),
]


@pytest.mark.parametrize("case", [c.param() for c in HEALTH_CASES])
def test_health(servers: Any, strict: bool, case: Case) -> None:
    t, n = both(servers, case)
    if t.status == 200:
        assert n.status == 200, f"triton {t!r}, naiad {n!r}"
        assert n.body == b"", f"naiad's 200 health answer has a body: {n!r} (Triton's is empty)"
    elif t.body:  # model not ready: 400 {"error": ...}
        check_error(case, t, n, strict)
    else:  # server not ready: bare 400
        assert n.status == t.status, f"triton {t!r}, naiad {n!r}"


def test_server_metadata(servers: Any, strict: bool) -> None:
    t, n = both(servers, Case("v2", "GET", "/v2"))
    assert (t.status, n.status) == (200, 200)
    td, nd = t.json(), n.json()
    assert set(nd) == set(td), f"keys: triton {sorted(td)}, naiad {sorted(nd)}"
    if not strict:
        assert_same(td, nd, "server metadata")
        return
    assert isinstance(nd["name"], str) and nd["name"], nd
    assert isinstance(nd["version"], str) and nd["version"], nd
    assert isinstance(nd["extensions"], list) and all(isinstance(e, str) for e in nd["extensions"])
    assert set(nd["extensions"]) <= set(td["extensions"]), (
        f"extensions Triton does not know: {set(nd['extensions']) - set(td['extensions'])}"
    )
    assert set(nd["extensions"]) >= CORE_EXTENSIONS, (
        f"missing: {CORE_EXTENSIONS - set(nd['extensions'])}"
    )


METADATA_CASES = (
    [
        Case(f"metadata-{m}", "GET", f"/v2/models/{m}", model=m)
        for m in ("add_sub", "identity_batch", "strings")
    ]
    + [
        Case("metadata-version-1", "GET", "/v2/models/add_sub/versions/1", model="add_sub"),
        Case("metadata-unknown-version", "GET", "/v2/models/add_sub/versions/2", model="add_sub"),
        Case("metadata-unknown-model", "GET", "/v2/models/nope", model="nope"),
        Case("metadata-broken", "GET", "/v2/models/broken", model="broken"),
        Case("metadata-broken-init", "GET", "/v2/models/broken_init", model="broken_init"),
    ]
    + [
        Case(f"config-{m}", "GET", f"/v2/models/{m}/config", model=m)
        for m in ("add_sub", "identity_batch", "strings", "raises", "error_response", "mul",
                  "pipeline")
    ]
    + [Case("metadata-ensemble", "GET", "/v2/models/pipeline", model="pipeline")]
    + [
        Case("config-version-1", "GET", "/v2/models/add_sub/versions/1/config", model="add_sub"),
        Case("config-unknown-model", "GET", "/v2/models/nope/config", model="nope"),
        Case("config-broken", "GET", "/v2/models/broken/config", model="broken"),
        Case("config-broken-init", "GET", "/v2/models/broken_init/config", model="broken_init"),
        Case("stats-unknown-model", "GET", "/v2/models/nope/stats", model="nope"),
        Case("stats-broken-init", "GET", "/v2/models/broken_init/stats", model="broken_init"),
        Case("unknown-path", "GET", "/v2/foo"),
        Case("get-on-infer", "GET", "/v2/models/add_sub/infer", model=None),
    ]
)


@pytest.mark.parametrize("case", [c.param() for c in METADATA_CASES])
def test_metadata_and_config(servers: Any, strict: bool, case: Case) -> None:
    """Model metadata and the full model config JSON (all Triton defaults) must be identical."""
    t, n = both(servers, case)
    if t.status == 200:
        assert n.status == 200, f"triton {t!r}, naiad {n!r}"
        assert n.content_type == "application/json", f"naiad Content-Type {n.content_type!r}"
        assert_same(t.json(), n.json(), f"GET {case.path}")
    else:
        check_error(case, t, n, strict)


# --------------------------------------------------------------------------------------------
# repository


def _index(res: HttpResult) -> list[dict[str, Any]]:
    doc = res.json()
    assert isinstance(doc, list), f"repository index is not a JSON array: {doc!r}"
    return sorted(doc, key=lambda m: (m.get("name", ""), m.get("version", "")))


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({}, id="all"),
        pytest.param({"ready": True}, id="ready"),
        pytest.param({"ready": False}, id="not-ready-flag"),
        pytest.param(b"", id="no-body"),
    ],
)
def test_repository_index(servers: Any, strict: bool, body: Any) -> None:
    case = Case("index", "POST", "/v2/repository/index", body)
    t, n = both(servers, case)
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    compare_index(_index(t), _index(n), strict)


@pytest.mark.parametrize(
    "case",
    [
        Case("load", "POST", "/v2/repository/models/add_sub/load", {}, model=None).param(),
        Case("unload", "POST", "/v2/repository/models/add_sub/unload", {}, model=None).param(),
        Case("load-unknown", "POST", "/v2/repository/models/nope/load", {}, model=None).param(),
    ],
)
def test_model_control_refused_in_none_mode(servers: Any, strict: bool, case: Case) -> None:
    """Without --model-control-mode explicit, Triton refuses load/unload with 503."""
    t, n = both(servers, case)
    check_error(case, t, n, strict)
    assert t.status == 503


# --------------------------------------------------------------------------------------------
# one inference, then the statistics


def test_statistics_after_one_inference(servers: Any) -> None:
    t, n = both(servers, Case("infer", "POST", "/v2/models/add_sub/infer", GOOD))
    check_infer(t, n)

    def check() -> None:
        for path in ["/v2/models/add_sub/stats", "/v2/models/add_sub/versions/1/stats"]:
            ts, ns = both(servers, Case(path, "GET", path))
            assert (ts.status, ns.status) == (200, 200)
            assert_same(normalize_stats(ts.json()), normalize_stats(ns.json()), f"GET {path}")

    eventually(check)


def test_ensemble_statistics_after_one_inference(servers: Any) -> None:
    """An ensemble counts like Triton: its queue and compute times are its steps' sums."""
    t, n = both(servers, Case("infer", "POST", "/v2/models/pipeline/infer", GOOD))
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    expected = [(a + b) * (a - b) for a, b in zip(A, B, strict=True)]
    for result in (t, n):
        assert result.json()["outputs"][0]["data"] == expected

    def check() -> None:
        for path in ["/v2/models/pipeline/stats", "/v2/models/mul/stats"]:
            ts, ns = both(servers, Case(path, "GET", path))
            assert (ts.status, ns.status) == (200, 200)
            assert_same(normalize_stats(ts.json()), normalize_stats(ns.json()), f"GET {path}")

    eventually(check)


# --------------------------------------------------------------------------------------------
# inference: good requests


_bin_header = {
    "id": "bin",
    "inputs": [
        {
            "name": "INPUT0",
            "shape": [4],
            "datatype": "FP32",
            "parameters": {"binary_data_size": 16},
        },
        {
            "name": "INPUT1",
            "shape": [4],
            "datatype": "FP32",
            "parameters": {"binary_data_size": 16},
        },
    ],
    "outputs": [
        {"name": "OUTPUT0", "parameters": {"binary_data": True}},
        {"name": "OUTPUT1", "parameters": {"binary_data": False}},
    ],
}
_BIN_BODY, _BIN_HEADERS = binary_request(_bin_header, [_f32(A), _f32(B)])
_str_header = {
    "inputs": [
        {"name": "INPUT0", "shape": [3], "datatype": "BYTES", "parameters": {"binary_data_size": 0}}
    ]
}
_STR_RAW = serialize_bytes([b"hello", "wörld".encode(), b""])
_str_header["inputs"][0]["parameters"]["binary_data_size"] = len(_STR_RAW)
_STR_BODY, _STR_HEADERS = binary_request(_str_header, [_STR_RAW])

GOOD_CASES = [
    Case("json", "POST", "/v2/models/add_sub/infer", GOOD),
    Case("json-no-id", "POST", "/v2/models/add_sub/infer", {"inputs": GOOD["inputs"]}),
    Case("json-empty-id", "POST", "/v2/models/add_sub/infer", _good(id="")),
    Case("json-version-1", "POST", "/v2/models/add_sub/versions/1/infer", GOOD),
    Case(
        "json-nested-data",
        "POST",
        "/v2/models/add_sub/infer",
        _good(inputs=[_in("INPUT0", [[1, 2], [3, 4]], [4]), _in("INPUT1", B)]),
    ),
    Case(
        "json-int-and-float-data",
        "POST",
        "/v2/models/add_sub/infer",
        _good(inputs=[_in("INPUT0", [0.5, 1.25, -2, 3e10]), _in("INPUT1", [0.1, 0.2, 0.3, 0.4])]),
    ),
    Case(
        "json-request-parameters",
        "POST",
        "/v2/models/add_sub/infer",
        _good(parameters={"foo": "bar"}),
    ),
    Case(
        "requested-output-subset",
        "POST",
        "/v2/models/add_sub/infer",
        _good(outputs=[{"name": "OUTPUT1"}]),
    ),
    Case(
        "requested-outputs-reordered",
        "POST",
        "/v2/models/add_sub/infer",
        _good(outputs=[{"name": "OUTPUT1"}, {"name": "OUTPUT0"}]),
    ),
    Case(
        "binary-data-output",
        "POST",
        "/v2/models/add_sub/infer",
        _good(parameters={"binary_data_output": True}),
    ),
    Case(
        "per-output-binary-data",
        "POST",
        "/v2/models/add_sub/infer",
        _good(
            outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}, {"name": "OUTPUT1"}]
        ),
    ),
    Case("binary-request", "POST", "/v2/models/add_sub/infer", _BIN_BODY, _BIN_HEADERS),
    Case(
        "batch-2x3",
        "POST",
        "/v2/models/identity_batch/infer",
        {"inputs": [_in("INPUT0", [1, 2, 3, 4, 5, 6], [2, 3])]},
    ),
    Case(
        "batch-8x1",
        "POST",
        "/v2/models/identity_batch/infer",
        {"inputs": [_in("INPUT0", list(range(8)), [8, 1])]},
    ),
    Case(
        "strings-json",
        "POST",
        "/v2/models/strings/infer",
        {"inputs": [_in("INPUT0", ["hello", "wörld"], datatype="BYTES")]},
    ),
    Case(
        "strings-binary-output",
        "POST",
        "/v2/models/strings/infer",
        {
            "inputs": [_in("INPUT0", ["hello", "wörld"], datatype="BYTES")],
            "parameters": {"binary_data_output": True},
        },
    ),
    Case("strings-binary-input", "POST", "/v2/models/strings/infer", _STR_BODY, _STR_HEADERS),
]


@pytest.mark.parametrize("case", [c.param() for c in GOOD_CASES])
def test_inference(servers: Any, case: Case) -> None:
    t, n = both(servers, case)
    check_infer(t, n)


# --------------------------------------------------------------------------------------------
# inference: bad requests


def _wrong(**inputs: Any) -> dict[str, Any]:
    return _good(inputs=list(inputs.values()))


ERROR_CASES = [
    Case("unknown-model", "POST", "/v2/models/nope/infer", GOOD, model="nope"),
    Case("unknown-version", "POST", "/v2/models/add_sub/versions/7/infer", GOOD, model="add_sub"),
    Case(
        "broken-model",
        "POST",
        "/v2/models/broken/infer",
        {"inputs": [_in("INPUT0", A)]},
        model="broken",
    ),
    Case("broken-init-model", "POST", "/v2/models/broken_init/infer", GOOD, model="broken_init"),
    Case(
        "wrong-datatype",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a=_in("INPUT0", [1, 2, 3, 4], datatype="INT32"), b=_in("INPUT1", B)),
        model="add_sub",
    ),
    Case(
        "float-data-for-int32",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a=_in("INPUT0", [1.5, 2, 3, 4], datatype="INT32"), b=_in("INPUT1", B)),
        model="add_sub",
        triton_500=True,
    ),
    Case(
        "invalid-datatype-name",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a=_in("INPUT0", A, datatype="FLOAT"), b=_in("INPUT1", B)),
        model="add_sub",
    ),
    Case(
        "wrong-shape",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a=_in("INPUT0", A[:3]), b=_in("INPUT1", B)),
        model="add_sub",
    ),
    Case(
        "wrong-rank",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a=_in("INPUT0", A, [2, 2]), b=_in("INPUT1", B)),
        model="add_sub",
    ),
    Case(
        "too-few-elements",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a=_in("INPUT0", A[:3], [4]), b=_in("INPUT1", B)),
        model="add_sub",
        triton_500=True,
    ),
    Case(
        "too-many-elements",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a=_in("INPUT0", [*A, 5.0], [4]), b=_in("INPUT1", B)),
        model="add_sub",
        triton_500=True,
    ),
    Case(
        "batch-without-batch-dim",
        "POST",
        "/v2/models/identity_batch/infer",
        {"inputs": [_in("INPUT0", [1, 2, 3], [3])]},
        model="identity_batch",
    ),
    Case(
        "batch-too-large",
        "POST",
        "/v2/models/identity_batch/infer",
        {"inputs": [_in("INPUT0", list(range(9)), [9, 1])]},
        model="identity_batch",
    ),
    Case(
        "missing-input",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a=_in("INPUT0", A)),
        model="add_sub",
    ),
    Case(
        "extra-unknown-input",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a=_in("INPUT0", A), b=_in("INPUT1", B), c=_in("INPUT9", A)),
        model="add_sub",
    ),
    Case(
        "input-without-data",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a={"name": "INPUT0", "shape": [4], "datatype": "FP32"}, b=_in("INPUT1", B)),
        model="add_sub",
    ),
    Case(
        "string-in-fp32-data",
        "POST",
        "/v2/models/add_sub/infer",
        _wrong(a=_in("INPUT0", ["a", 2, 3, 4]), b=_in("INPUT1", B)),
        model="add_sub",
        triton_500=True,
    ),
    Case(
        "number-in-bytes-data",
        "POST",
        "/v2/models/strings/infer",
        {"inputs": [_in("INPUT0", [5], datatype="BYTES")]},
        model="strings",
        triton_500=True,
    ),
    Case(
        "malformed-json",
        "POST",
        "/v2/models/add_sub/infer",
        b'{"inputs": [',
        {"Content-Type": "application/json"},
        model="add_sub",
        triton_500=True,
    ),
    Case(
        "no-inputs-key",
        "POST",
        "/v2/models/add_sub/infer",
        {"id": "x"},
        model="add_sub",
        triton_500=True,
    ),
    Case(
        "binary-header-length-past-body",
        "POST",
        "/v2/models/add_sub/infer",
        _BIN_BODY,
        {"Inference-Header-Content-Length": str(len(_BIN_BODY) + 10)},
        model="add_sub",
    ),
    Case(
        "binary-data-size-past-body",
        "POST",
        "/v2/models/add_sub/infer",
        _BIN_BODY[:-16],
        {"Inference-Header-Content-Length": _BIN_HEADERS["Inference-Header-Content-Length"]},
        model="add_sub",
    ),
    Case(
        "unknown-requested-output",
        "POST",
        "/v2/models/add_sub/infer",
        _good(outputs=[{"name": "OUTPUT9"}]),
        model="add_sub",
    ),
    Case(
        "model-raises",
        "POST",
        "/v2/models/raises/infer",
        {"inputs": [_in("INPUT0", A)]},
        model="raises",
        must_contain="deliberate failure in execute",
        triton_500=True,  # naiad: 400, see docs/compatibility.md
    ),
    Case(
        "model-error-response",
        "POST",
        "/v2/models/error_response/infer",
        {"inputs": [_in("INPUT0", A)]},
        model="error_response",
        must_contain="error_response: deliberate error",
    ),
]


@pytest.mark.parametrize("case", [c.param() for c in ERROR_CASES])
def test_inference_error(servers: Any, strict: bool, case: Case) -> None:
    t, n = both(servers, case)
    assert t.status >= 400, f"Triton accepted a bad request: {t!r}"
    check_error(case, t, n, strict)


# --------------------------------------------------------------------------------------------
# tritonclient.http's view


def _clients(servers: Any) -> tuple[Any, Any]:
    import tritonclient.http as httpclient

    return (
        httpclient.InferenceServerClient(servers.triton.http_url),
        httpclient.InferenceServerClient(servers.naiad.http_url),
    )


def _client_inputs(arrays: dict[str, np.ndarray], binary: bool = True) -> list[Any]:
    import tritonclient.http as httpclient

    out = []
    for name, arr in arrays.items():
        dt = (
            "BYTES"
            if arr.dtype == np.object_
            else {np.float32: "FP32", np.int32: "INT32"}[arr.dtype.type]
        )
        x = httpclient.InferInput(name, list(arr.shape), dt)
        x.set_data_from_numpy(arr, binary_data=binary)
        out.append(x)
    return out


_a, _b = np.array(A, np.float32), np.array(B, np.float32)

# Deliberate differences (docs/compatibility.md): naiad's status where it differs from Triton.
NAIAD_CLIENT_STATUS = {"infer-raises": "400"}

CLIENT_CALLS: dict[str, Any] = {
    "is_server_live": lambda c, m: c.is_server_live(),
    "is_server_ready": lambda c, m: c.is_server_ready(),
    "is_model_ready": lambda c, m: c.is_model_ready("add_sub"),
    "is_model_ready-unknown": lambda c, m: c.is_model_ready("nope"),
    "get_model_metadata": lambda c, m: c.get_model_metadata("add_sub"),
    "get_model_metadata-unknown": lambda c, m: c.get_model_metadata("nope"),
    "get_model_config": lambda c, m: c.get_model_config("identity_batch"),
    "get_model_config-unknown": lambda c, m: c.get_model_config("nope"),
    "get_inference_statistics-unknown": lambda c, m: c.get_inference_statistics("nope"),
    "load_model-refused": lambda c, m: c.load_model("add_sub"),
    "infer-binary": lambda c, m: infer_result_data(
        c.infer("add_sub", _client_inputs({"INPUT0": _a, "INPUT1": _b}), request_id="c1"),
        ["OUTPUT0", "OUTPUT1"],
    ),
    "infer-json-tensors": lambda c, m: infer_result_data(
        c.infer(
            "add_sub",
            _client_inputs({"INPUT0": _a, "INPUT1": _b}, binary=False),
            outputs=[m.InferRequestedOutput("OUTPUT0", binary_data=False)],
        ),
        ["OUTPUT0", "OUTPUT1"],
    ),
    "infer-subset": lambda c, m: infer_result_data(
        c.infer(
            "add_sub",
            _client_inputs({"INPUT0": _a, "INPUT1": _b}),
            outputs=[m.InferRequestedOutput("OUTPUT1")],
        ),
        ["OUTPUT0", "OUTPUT1"],
    ),
    "infer-strings": lambda c, m: infer_result_data(
        c.infer(
            "strings",
            _client_inputs({"INPUT0": np.array([b"a", "wörld".encode()], dtype=np.object_)}),
        ),
        ["OUTPUT0"],
    ),
    "infer-batch": lambda c, m: infer_result_data(
        c.infer("identity_batch", _client_inputs({"INPUT0": np.ones((3, 2), np.float32)})),
        ["OUTPUT0"],
    ),
    "infer-unknown-model": lambda c, m: c.infer(
        "nope", _client_inputs({"INPUT0": _a, "INPUT1": _b})
    ),
    "infer-wrong-dtype": lambda c, m: c.infer(
        "add_sub", _client_inputs({"INPUT0": _a.astype(np.int32), "INPUT1": _b})
    ),
    "infer-wrong-shape": lambda c, m: c.infer(
        "add_sub", _client_inputs({"INPUT0": _a[:3], "INPUT1": _b})
    ),
    "infer-missing-input": lambda c, m: c.infer("add_sub", _client_inputs({"INPUT0": _a})),
    "infer-raises": lambda c, m: c.infer("raises", _client_inputs({"INPUT0": _a})),
    "infer-error-response": lambda c, m: c.infer("error_response", _client_inputs({"INPUT0": _a})),
}


@pytest.mark.parametrize("name", list(CLIENT_CALLS))
def test_tritonclient_http(servers: Any, strict: bool, name: str) -> None:
    import tritonclient.http as httpclient

    tc, nc = _clients(servers)
    try:
        t = client_call(lambda: CLIENT_CALLS[name](tc, httpclient))
        n = client_call(lambda: CLIENT_CALLS[name](nc, httpclient))
    finally:
        tc.close()
        nc.close()
    assert n.ok == t.ok, f"triton {t}, naiad {n}"
    if t.ok:
        assert_same(t.value, n.value, f"tritonclient.http {name}")
    else:
        expected = NAIAD_CLIENT_STATUS.get(name, t.status) if strict else t.status
        assert n.status == expected, f"InferenceServerException.status(): triton {t}, naiad {n}"
        assert n.message, f"naiad's exception has no message: {n}"


# --------------------------------------------------------------------------------------------
# after the same sequence: statistics and metrics


def test_statistics_after_sequence(servers: Any) -> None:
    def check() -> None:
        paths = ["/v2/models/stats"] + [f"/v2/models/{m}/stats" for m in GOOD_MODELS]
        for path in paths:
            t, n = both(servers, Case(path, "GET", path))
            assert (t.status, n.status) == (200, 200), f"{path}: triton {t!r}, naiad {n!r}"
            td, nd = normalize_stats(t.json()), normalize_stats(n.json())
            for doc in (td, nd):
                doc["model_stats"].sort(key=lambda s: (s["name"], s["version"]))
            assert_same(td, nd, f"GET {path} (durations ignored)")

    eventually(check)


def test_metrics(servers: Any, strict: bool) -> None:
    def fetch(server: Any) -> dict[str, Any]:
        res = http_request(server.metrics_port, "GET", "/metrics")
        assert res.status == 200, res
        assert res.content_type == "text/plain", f"/metrics Content-Type {res.content_type!r}"
        return parse_metrics(res.body.decode())

    def check() -> None:
        tf, nf = fetch(servers.triton), fetch(servers.naiad)
        missing = set(tf) - set(nf) - (METRICS_NAIAD_MAY_OMIT if strict else set())
        assert not missing, f"metric families missing in naiad: {sorted(missing)}"
        problems = []
        for name, fam in tf.items():
            if name not in nf:
                continue
            other = nf[name]
            if (other.help, other.type) != (fam.help, fam.type):
                problems.append(
                    f"{name}: HELP/TYPE triton {(fam.help, fam.type)} "
                    f"naiad {(other.help, other.type)}"
                )
            if not name.startswith("nv_inference_"):
                continue
            # Triton keeps the failure series of a model whose initialize() failed; not compared
            tl = {k for k in fam.samples if dict(k).get("model") not in BROKEN_MODELS}
            nl = {k for k in other.samples if dict(k).get("model") not in BROKEN_MODELS}
            if tl != nl:
                problems.append(
                    f"{name}: label sets only in triton {sorted(tl - nl)}, "
                    f"only in naiad {sorted(nl - tl)}"
                )
            if fam.type == "counter" and not name.endswith("_us"):
                for labels, value in fam.samples.items():
                    if labels in other.samples and other.samples[labels] != value:
                        problems.append(
                            f"{name}{dict(labels)}: triton {value} naiad {other.samples[labels]}"
                        )
        assert not problems, "metrics differ:\n  " + "\n  ".join(problems)

    eventually(check, timeout=4.0, interval=0.5)


def test_json_diff_self_check() -> None:
    """The comparison helper itself: equal values give no lines, every difference one line."""
    assert json_diff({"a": [1, 2.0], "b": "x"}, {"b": "x", "a": [1.0, 2]}) == []
    assert len(json_diff({"a": 1, "b": [1]}, {"a": 2, "c": 0, "b": [1, 2]})) == 3
    assert json_diff(True, 1) != []


# --------------------------------------------------------------------------------------------
# the logging and trace extensions


@pytest.mark.parametrize("case", [
    Case("log-settings", "GET", "/v2/logging").param(),
    Case("log-settings-post-nothing", "POST", "/v2/logging", {}).param(),
    Case("trace-settings", "GET", "/v2/trace/setting").param(),
    Case("trace-settings-model", "GET", "/v2/models/add_sub/trace/setting").param(),
])
def test_log_and_trace_settings_read_the_same(servers: Any, case: Case) -> None:
    t, n = both(servers, case)
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    assert_same(t.json(), n.json(), f"{case.method} {case.path}")

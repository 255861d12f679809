"""Requests and comparisons shared by the Triton differential suite (tests/compat).

Two views of every server:

* raw HTTP through ``http.client`` (``http_request``) so the exact status code, headers and body
  bytes are seen, and raw gRPC through the generated stub (``grpc_call``) so the exact status code,
  details and response message are seen;
* the official ``tritonclient`` (``client_call``), as a user sees it.

Comparison helpers turn both answers into plain data and list their differences
(``json_diff``), with normalisers for the parts that legitimately vary between two runs
(statistics durations, timestamps) and decoders for the binary tensor extension.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import re
import shutil
import struct
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
MODEL_REPOSITORY = HERE / "model_repository"

# Models of MODEL_REPOSITORY that load; `broken` (unknown config field) and `broken_init`
# (initialize() raises) do not.
GOOD_MODELS = ("add_sub", "error_response", "identity_batch", "mul", "pipeline", "raises",
               "strings")
BROKEN_MODELS = ("broken", "broken_init")

NP_DTYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}


# --------------------------------------------------------------------------------------------
# raw HTTP


@dataclass
class HttpResult:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def __repr__(self) -> str:
        body = self.body if len(self.body) < 600 else self.body[:600] + b"..."
        return f"HttpResult({self.status}, {body!r})"


def http_request(
    port: int,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    *,
    timeout: float = 30.0,
) -> HttpResult:
    """One request on a fresh connection; ``body`` may be bytes, str or JSON-able data."""
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        return HttpResult(resp.status, hdrs, data)
    finally:
        conn.close()


def binary_request(header: dict[str, Any], blobs: Iterable[bytes]) -> tuple[bytes, dict[str, str]]:
    """Body and headers of a binary-tensor-extension request (JSON header, then raw tensors)."""
    head = json.dumps(header).encode()
    return head + b"".join(blobs), {
        "Inference-Header-Content-Length": str(len(head)),
        "Content-Type": "application/octet-stream",
    }


def serialize_bytes(items: Iterable[bytes | str]) -> bytes:
    """BYTES tensor wire form: 4-byte little-endian length, then the bytes, per element."""
    out = b""
    for item in items:
        raw = item.encode() if isinstance(item, str) else item
        out += struct.pack("<I", len(raw)) + raw
    return out


def deserialize_bytes(raw: bytes) -> list[str]:
    out, pos = [], 0
    while pos < len(raw):
        (n,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        item = raw[pos : pos + n]
        pos += n
        try:
            out.append(item.decode())
        except UnicodeDecodeError:
            out.append(repr(item))
    return out


def decode_tensor(datatype: str, raw: bytes) -> list[Any]:
    if datatype == "BYTES":
        return deserialize_bytes(raw)
    return np.frombuffer(raw, dtype=NP_DTYPES[datatype]).tolist()


def decode_infer_response(result: HttpResult) -> dict[str, Any]:
    """An inference response as plain data: binary outputs decoded into ``data``.

    A binary output gets ``"data"`` (decoded values) and ``"binary_data_size"`` (its size) in
    place of ``parameters.binary_data_size``; ``parameters: {}`` is dropped (the same as absent).
    Raises AssertionError when the binary framing is inconsistent.
    """
    header_len = result.headers.get("inference-header-content-length")
    if header_len is None:
        doc = json.loads(result.body)
        rest = b""
    else:
        n = int(header_len)
        assert 0 < n <= len(result.body), (
            f"Inference-Header-Content-Length {n} vs body {len(result.body)}"
        )
        doc = json.loads(result.body[:n])
        rest = result.body[n:]
    pos = 0
    for out in doc.get("outputs", []):
        params = dict(out.get("parameters") or {})
        size = params.pop("binary_data_size", None)
        if size is not None:
            assert "data" not in out, f"output {out['name']} has both data and binary_data_size"
            assert pos + size <= len(rest), f"output {out['name']}: binary data runs past the body"
            out["data"] = decode_tensor(out["datatype"], rest[pos : pos + size])
            out["binary_data_size"] = size
            pos += size
        if params:
            out["parameters"] = params
        else:
            out.pop("parameters", None)
    assert pos == len(rest), f"{len(rest) - pos} unused bytes after the binary outputs"
    if doc.get("parameters") == {}:
        del doc["parameters"]
    return doc


# --------------------------------------------------------------------------------------------
# comparison


def json_diff(triton: Any, naiad: Any, path: str = "$") -> list[str]:
    """Differences between two JSON-like values, one line each (empty list: equal).

    Numbers compare by value (``11`` equals ``11.0``; NaN equals NaN); bool is not a number.
    """
    if isinstance(triton, dict) and isinstance(naiad, dict):
        out = []
        for key in sorted(set(triton) | set(naiad), key=str):
            if key not in naiad:
                out.append(f"{path}.{key}: missing in naiad (triton: {_short(triton[key])})")
            elif key not in triton:
                out.append(f"{path}.{key}: only in naiad ({_short(naiad[key])})")
            else:
                out.extend(json_diff(triton[key], naiad[key], f"{path}.{key}"))
        return out
    if isinstance(triton, list) and isinstance(naiad, list):
        if len(triton) != len(naiad):
            return [
                f"{path}: {len(triton)} items in triton, {len(naiad)} in naiad: "
                f"triton {_short(triton)} naiad {_short(naiad)}"
            ]
        out = []
        for i, (a, b) in enumerate(zip(triton, naiad, strict=False)):
            out.extend(json_diff(a, b, f"{path}[{i}]"))
        return out
    if _is_number(triton) and _is_number(naiad):
        if triton == naiad or (math.isnan(triton) and math.isnan(naiad)):
            return []
        return [f"{path}: triton {triton!r} naiad {naiad!r}"]
    if type(triton) is not type(naiad) or triton != naiad:
        return [f"{path}: triton {_short(triton)} naiad {_short(naiad)}"]
    return []


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _short(x: Any, limit: int = 300) -> str:
    text = json.dumps(x, default=str) if not isinstance(x, str) else repr(x)
    return text if len(text) <= limit else text[:limit] + "..."


def assert_same(triton: Any, naiad: Any, what: str) -> None:
    diff = json_diff(triton, naiad)
    assert not diff, f"{what}: naiad differs from Triton:\n  " + "\n  ".join(diff)


def normalize_stats(doc: dict[str, Any]) -> dict[str, Any]:
    """Statistics with timing removed: every ``ns`` dropped, ``last_inference`` -> 0 or 1.

    Counts (inference_count, execution_count, every ``count``, batch sizes) stay.
    Works on both the HTTP JSON and the gRPC message as a dict (where int64 are strings and
    zero fields are omitted).
    """

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                if k == "ns":
                    continue
                if k == "last_inference":
                    out[k] = 1 if int(v) else 0
                    continue
                out[k] = walk(v)
            return out
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(doc)


def compare_index(t: list[dict[str, Any]], n: list[dict[str, Any]], strict: bool) -> None:
    """Repository index entries (sorted by name) must match. ``reason`` is free text: compared
    only for "unloaded", otherwise naiad's must be non-empty where Triton's is. With ``strict``,
    a model whose config.pbtxt does not parse (Triton: just ``{"name": ...}``) may carry
    state UNAVAILABLE and a reason (and a version) in naiad."""

    def key(m: dict[str, Any]) -> tuple[str, str]:
        return (m.get("name", ""), m.get("version", ""))

    t = sorted((dict(entry) for entry in t), key=key)
    n = sorted((dict(entry) for entry in n), key=key)
    tn = {m.get("name"): m for m in t}
    for entry in n:
        name = entry.get("name")
        if strict and tn.get(name) == {"name": name} and entry != {"name": name}:
            assert entry.get("state") == "UNAVAILABLE" and entry.get("reason"), (
                f"naiad's index entry for a model Triton cannot even read: {entry!r}"
            )
            entry.clear()
            entry["name"] = name
    for triton_entry, naiad_entry in zip(t, n, strict=False):
        reason = triton_entry.get("reason")
        if reason and reason != "unloaded" and naiad_entry.get("reason"):
            naiad_entry["reason"] = reason  # free text: present on both sides is enough
    assert_same(t, n, "repository index")


def error_message(result: HttpResult) -> str:
    """The ``error`` of a Triton-style error body ``{"error": "..."}`` (AssertionError if not)."""
    try:
        doc = json.loads(result.body)
    except ValueError as exc:
        raise AssertionError(f"error body is not JSON: {result.body[:300]!r}") from exc
    assert isinstance(doc, dict) and set(doc) == {"error"}, (
        f"error body is not {{'error': ...}}: {doc!r}"
    )
    assert isinstance(doc["error"], str), f"error is not a string: {doc!r}"
    return doc["error"]


def eventually(check: Callable[[], None], timeout: float = 3.0, interval: float = 0.1) -> None:
    """Run ``check`` until it stops raising AssertionError (statistics land a moment late)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(interval)


# --------------------------------------------------------------------------------------------
# Prometheus text


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class MetricFamily:
    name: str
    help: str = ""
    type: str = ""
    samples: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)


def parse_metrics(text: str) -> dict[str, MetricFamily]:
    fams: dict[str, MetricFamily] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _, kind, name, *rest = line.split(" ", 3)
            fam = fams.setdefault(name, MetricFamily(name))
            setattr(fam, "help" if kind == "HELP" else "type", rest[0] if rest else "")
            continue
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"unparseable metrics line: {line!r}"
        name, _, labels, value = m.group(1), m.group(2), m.group(3), m.group(4)
        key = tuple(sorted(_LABEL.findall(labels or "")))
        fams.setdefault(name, MetricFamily(name)).samples[key] = float(value)
    return fams


# --------------------------------------------------------------------------------------------
# raw gRPC


@dataclass
class GrpcResult:
    code: str  # grpc.StatusCode name, "OK" on success
    details: str
    message: Any  # the response message, None on error

    def as_dict(self) -> dict[str, Any]:
        from google.protobuf import json_format

        return json_format.MessageToDict(self.message, preserving_proto_field_name=True)

    def __repr__(self) -> str:
        return f"GrpcResult({self.code}, {self.details!r})"


def grpc_call(stub: Any, method: str, request: Any, timeout: float = 30.0) -> GrpcResult:
    import grpc

    try:
        resp = getattr(stub, method)(request, timeout=timeout)
        return GrpcResult("OK", "", resp)
    except grpc.RpcError as exc:
        return GrpcResult(exc.code().name, exc.details() or "", None)


# --------------------------------------------------------------------------------------------
# tritonclient


@dataclass
class ClientResult:
    ok: bool
    value: Any = None  # plain data on success
    status: str | None = None  # InferenceServerException.status() on failure
    message: str | None = None


def client_call(fn: Callable[[], Any]) -> ClientResult:
    from tritonclient.utils import InferenceServerException

    try:
        return ClientResult(True, fn())
    except InferenceServerException as exc:
        return ClientResult(False, status=str(exc.status()), message=exc.message() or "")


def infer_result_data(result: Any, names: Iterable[str]) -> dict[str, Any]:
    """``as_numpy`` of every named output as (dtype, shape, values), None when absent."""
    out: dict[str, Any] = {}
    for name in names:
        arr = result.as_numpy(name)
        if arr is None:
            out[name] = None
        elif arr.dtype == np.object_:
            out[name] = [
                "object",
                list(arr.shape),
                [bytes(x).decode(errors="replace") for x in arr.ravel()],
            ]
        else:
            out[name] = [str(arr.dtype), list(arr.shape), arr.ravel().tolist()]
    return out


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# --------------------------------------------------------------------------------------------
# one HTTP request to both servers, and the two standard checks


@dataclass
class Case:
    id: str
    method: str
    path: str
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    model: str | None = None  # the model naiad's error message must name
    triton_500: bool = False  # Triton answers 500 to this bad input; naiad must answer 4xx
    must_contain: str | None = None  # text naiad's error must carry (the model's own message)

    def param(self) -> Any:
        return pytest.param(self, id=self.id)


def on_both(fn: Callable[[Any], Any], triton: Any, naiad: Any) -> tuple[Any, Any]:
    """``fn(triton)`` and ``fn(naiad)`` at the same time (two independent servers; saves the
    wait on slow calls such as model loads)."""
    t = _POOL.submit(fn, triton)
    n = _POOL.submit(fn, naiad)
    return t.result(), n.result()


_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="compat")


def both(servers: Any, case: Case) -> tuple[HttpResult, HttpResult]:
    """The request of ``case`` sent to Triton and to naiad."""
    return on_both(
        lambda s: http_request(s.http_port, case.method, case.path, case.body, case.headers),
        servers.triton,
        servers.naiad,
    )


def check_error(case: Case, t: HttpResult, n: HttpResult, strict: bool) -> None:
    """Both sides failed: same status (naiad: 4xx where ``case.triton_500``), error bodies."""
    error_message(t)  # Triton's own form, documents it
    if case.triton_500 and strict:
        assert t.status == 500, f"Triton no longer answers 500 here ({t!r}): update the allow-list"
        assert 400 <= n.status < 500, f"naiad must answer 4xx where Triton answers 500, got {n!r}"
    else:
        assert n.status == t.status, f"status: triton {t!r}, naiad {n!r}"
    msg = error_message(n)
    assert msg.strip(), "naiad's error message is empty"
    if strict and case.model:
        assert case.model in msg, f"naiad's error does not name the model {case.model!r}: {msg!r}"
    if strict and case.must_contain:
        assert case.must_contain in msg, f"naiad's error lacks {case.must_contain!r}: {msg!r}"


IHCL = "inference-header-content-length"


def check_infer(t: HttpResult, n: HttpResult) -> None:
    assert t.status == 200, f"Triton failed a good request: {t!r}"
    assert n.status == 200, f"naiad failed a good request: {n!r}"
    binary = "inference-header-content-length" in t.headers
    assert ("inference-header-content-length" in n.headers) == binary, (
        f"Inference-Header-Content-Length: triton {t.headers.get(IHCL)}, "
        f"naiad {n.headers.get(IHCL)}"
    )
    assert n.content_type == t.content_type, (
        f"Content-Type: triton {t.content_type!r}, naiad {n.content_type!r}"
    )
    assert_same(decode_infer_response(t), decode_infer_response(n), "inference response")


def model_subset(repository: Path, models: tuple[str, ...], folder: Path) -> Path:
    """A copy of ``models`` of ``repository`` in ``folder``: each model of the repository is
    a Python stub or worker process in both servers (about a second of CPU per model in
    all), so a module that uses a few serves only those (``COMPAT_MODELS``)."""
    for name in models:
        shutil.copytree(repository / name, folder / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return folder

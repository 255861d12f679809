"""``--trace-config mode=opentelemetry``: Triton's spans, exported over OTLP/HTTP to a
receiver this test runs on loopback (the protobuf decoded with opentelemetry-proto), with
the caller's W3C ``traceparent`` (HTTP header, gRPC metadata) as the parent; the SDK
imported only in this mode, and a clear start-up error without it."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from naiad.testing import naiad_server
from naiad.tracing.exchange import Exchange
from naiad.tracing.manager import TraceManager
from naiad.tracing.otel import OpenTelemetryExporter
from naiad.tracing.settings import parse_trace_config
from naiad.types import InferenceRequest, InferenceResponse

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
HTTP_PARENT = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
GRPC_PARENT = ("1af7651916cd43dd8448eb211c80319c", "c7ad6b7169203331")
ENSEMBLE_PARENT = ("2af7651916cd43dd8448eb211c80319c", "d7ad6b7169203331")
COMPUTE_EVENTS = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]


def traceparent(parent: tuple[str, str]) -> str:
    return f"00-{parent[0]}-{parent[1]}-01"


class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: every span posted to /v1/traces, with its resource and
    scope."""

    def __init__(self) -> None:
        self.spans: list[SimpleNamespace] = []
        self.content_types: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        export = ExportTraceServiceRequest.FromString(body)
        self.server.content_types.append(self.headers["Content-Type"])
        for resource_spans in export.resource_spans:
            resource = {a.key: a.value.string_value
                        for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.server.spans.append(SimpleNamespace(
                        name=span.name, kind=span.kind, trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(), parent=span.parent_span_id.hex(),
                        start=span.start_time_unix_nano, end=span.end_time_unix_nano,
                        attributes={a.key: (a.value.string_value or a.value.int_value)
                                    for a in span.attributes},
                        events=[(e.name, e.time_unix_nano) for e in span.events],
                        resource=resource, scope=scope_spans.scope.name))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def inputs(module):
    tensors = [module.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
    return tensors


@pytest.fixture(scope="module")
def spans(receiver) -> list[SimpleNamespace]:
    """rate=0: only requests that carry a trace context are traced, as in Triton."""
    with naiad_server("--model-repository", str(EXAMPLES),
                      "--trace-config", "mode=opentelemetry",
                      "--trace-config", f"opentelemetry,url={receiver.url}",
                      "--trace-config", "opentelemetry,resource=deployment=test",
                      "--trace-config", "opentelemetry,bsp_schedule_delay=50",
                      "--trace-config", "level=TIMESTAMPS",
                      "--trace-config", "rate=0") as server:
        with httpclient.InferenceServerClient(server.http_url) as client:
            client.infer("add_sub", inputs(httpclient), request_id="untraced")
            client.infer("add_sub", inputs(httpclient), request_id="over-http",
                         headers={"traceparent": traceparent(HTTP_PARENT)})
            client.infer("pipeline", inputs(httpclient), request_id="ensemble",
                         headers={"traceparent": traceparent(ENSEMBLE_PARENT)})
            settings = client.get_trace_settings()
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.infer("add_sub", inputs(grpcclient), request_id="over-grpc",
                         headers={"traceparent": traceparent(GRPC_PARENT)})
        assert server.stop() == 0  # exports what the batch processor still holds
    assert settings == {"trace_level": ["TIMESTAMPS"], "trace_rate": "0", "trace_count": "-1",
                        "trace_mode": "opentelemetry", "url": receiver.url,
                        "resource": "deployment=test", "bsp_schedule_delay": "50",
                        "bsp_max_export_batch_size": "512", "bsp_max_queue_size": "2048"}
    return receiver.spans


def in_trace(spans, trace_id: str) -> dict[str, list[SimpleNamespace]]:
    found: dict[str, list[SimpleNamespace]] = {}
    for span in spans:
        if span.trace_id == trace_id:
            found.setdefault(span.name, []).append(span)
    return found


def test_only_requests_with_a_trace_context_are_traced_at_rate_0(spans):
    assert {span.trace_id for span in spans} == {
        HTTP_PARENT[0], GRPC_PARENT[0], ENSEMBLE_PARENT[0]}
    assert all(span.attributes.get("triton.request_id") != "untraced" for span in spans)


@pytest.mark.parametrize(("parent", "protocol", "request_id"), [
    (HTTP_PARENT, "HTTP", "over-http"), (GRPC_PARENT, "GRPC", "over-grpc")])
def test_a_request_is_three_spans_under_the_callers(spans, parent, protocol, request_id):
    found = in_trace(spans, parent[0])
    [root], [model], [compute] = found["InferRequest"], found["add_sub"], found["compute"]
    assert root.parent == parent[1]  # the traceparent's span
    assert (model.parent, compute.parent) == (root.span_id, model.span_id)
    assert {root.kind, model.kind, compute.kind} == {2}  # SPAN_KIND_SERVER
    received = "WAITREAD" if protocol == "GRPC" else "RECV"
    assert [name for name, _ in root.events] == [
        f"{protocol}_{received}_START", f"{protocol}_{received}_END",
        f"{protocol}_SEND_START", f"{protocol}_SEND_END", "INFER_RESPONSE_COMPLETE"]
    assert model.attributes == {
        "triton.model_name": "add_sub", "triton.model_version": 1,
        "triton.trace_id": model.attributes["triton.trace_id"],
        "triton.trace_parent_id": 0, "triton.request_id": request_id}
    assert [name for name, _ in model.events] == ["REQUEST_START", "QUEUE_START",
                                                  "REQUEST_END"]
    assert [name for name, _ in compute.events] == COMPUTE_EVENTS
    times = [ns for _, ns in model.events]
    assert times == sorted(times)
    assert model.start <= compute.start <= compute.end <= model.end
    assert root.start <= model.start and model.end <= root.end
    assert (root.resource["service.name"], root.resource["deployment"]) == \
        ("triton-inference-server", "test")
    assert root.scope == "triton-server"


def test_ensemble_steps_are_child_spans_of_the_ensembles(spans):
    found = in_trace(spans, ENSEMBLE_PARENT[0])
    [root], [ensemble] = found["InferRequest"], found["pipeline"]
    [add_sub], [mul] = found["add_sub"], found["mul"]
    assert ensemble.parent == root.span_id
    assert add_sub.parent == mul.parent == ensemble.span_id
    ensemble_id = ensemble.attributes["triton.trace_id"]
    assert add_sub.attributes["triton.trace_parent_id"] == ensemble_id
    assert mul.attributes["triton.trace_parent_id"] == ensemble_id
    # one compute span per step, none for the ensemble itself
    assert sorted(c.parent for c in found["compute"]) == sorted([add_sub.span_id, mul.span_id])


def test_spans_are_exported_as_otlp_protobuf(receiver, spans):
    assert set(receiver.content_types) == {"application/x-protobuf"}


def test_spans_from_recorded_timestamps_in_process():
    """The exporter alone, with the SDK's in-memory exporter: wall-clock span times from the
    steady-clock timestamps, the caller's context from the exchange."""
    memory = InMemorySpanExporter()
    config, _ = parse_trace_config(["mode=opentelemetry", "level=TIMESTAMPS", "rate=1"])
    exporter = OpenTelemetryExporter(config.opentelemetry, span_exporter=memory)
    tracer = TraceManager(config, sink=exporter)
    model = SimpleNamespace(name="m", version=3, config=SimpleNamespace(platform=""))
    exchange = Exchange("HTTP", [(b"traceparent", traceparent(HTTP_PARENT).encode())])
    exchange.enter()
    try:
        request = InferenceRequest("m", 3, {}, arrival_ns=time.perf_counter_ns())
        trace = tracer.admit(model, request, internal=False)
    finally:
        exchange.leave()
    future: Future = Future()
    trace.watch(request, future)
    request.durations = (0, 0, 1000, 0)
    future.set_result(InferenceResponse())
    exchange.end()
    tracer.close()
    finished = {span.name: span for span in memory.get_finished_spans()}
    assert set(finished) == {"InferRequest", "m", "compute"}
    root, model_span = finished["InferRequest"], finished["m"]
    assert f"{root.context.trace_id:032x}" == HTTP_PARENT[0]
    assert f"{root.parent.span_id:016x}" == HTTP_PARENT[1]
    assert "triton.request_id" not in model_span.attributes  # no id, no attribute
    # Span times are the wall clock's (nanoseconds since 1970), not the steady clock's.
    assert 10**18 < model_span.start_time <= model_span.end_time <= time.time_ns()


def test_the_sdk_is_imported_only_in_opentelemetry_mode():
    code = ("import sys; from naiad.server import InferenceServer, ServerOptions; "
            "import naiad.cli; from naiad.tracing import TraceManager, TraceConfig; "
            "TraceManager(TraceConfig()); "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == "[]"


def test_without_the_sdk_start_up_says_what_to_install(tmp_path):
    hidden = tmp_path / "no-otel" / "opentelemetry"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('not installed (test)')\n")
    result = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--model-repository", str(EXAMPLES),
         "--trace-config", "mode=opentelemetry"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(hidden.parent)})
    assert result.returncode == 2, result.stderr
    assert "pip install 'naiad[tracing]'" in result.stderr
    assert "Traceback" not in result.stderr

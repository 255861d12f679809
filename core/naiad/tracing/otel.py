"""``--trace-config mode=opentelemetry``: spans exported over OTLP/HTTP.

The OpenTelemetry SDK is an optional extra (``pip install 'naiad[tracing]'``): this module
imports it when the server starts in this mode, and says so when it is missing. Spans are
Triton's: per client request an ``InferRequest`` span (kind SERVER; events for the protocol
timestamps; its parent the caller's span when the request carried a W3C ``traceparent``,
HTTP header or gRPC metadata), under it one span per traced model request named after the
model (attributes ``triton.model_name``, ``triton.model_version``, ``triton.trace_id``,
``triton.trace_parent_id``, ``triton.request_id``; events REQUEST_START, QUEUE_START,
REQUEST_END; an ensemble step's or BLS call's span is a child of its caller's), and under
each a ``compute`` span (COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START,
COMPUTE_END). Scope ``triton-server``; resource ``service.name=triton-inference-server``
unless ``resource=service.name=...`` says otherwise.

Spans are made from the recorded timestamps when a request's traces are complete, on the
tracing thread; the SDK's batch span processor (``bsp_*`` settings) exports them on its
own thread. One difference from tritonserver: the Python SDK's exporter posts protobuf
(``application/x-protobuf``), opentelemetry-cpp's JSON; collectors take both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from naiad.errors import InferenceServerError, Status
from naiad.tracing.sampler import SettingState
from naiad.tracing.settings import DEFAULT_SERVICE_NAME, OpenTelemetryConfig
from naiad.tracing.trace import RequestTrace, TraceFamily

log = logging.getLogger("naiad.tracing")

#: Triton's instrumentation scope name.
SCOPE = "triton-server"
MISSING_SDK = ("--trace-config mode=opentelemetry needs the OpenTelemetry SDK and its "
               "OTLP/HTTP exporter: pip install 'naiad[tracing]' (opentelemetry-sdk, "
               "opentelemetry-exporter-otlp-proto-http)")
_MODEL_EVENTS = ("REQUEST_START", "QUEUE_START", "REQUEST_END")
_COMPUTE_EVENTS = ("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
                   "COMPUTE_END")


def check_installed() -> None:
    """Raise :class:`InferenceServerError` (UNAVAILABLE) saying what to install, unless the
    SDK and the OTLP/HTTP exporter can be imported."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401 - imported to see that it can be
    except ImportError as exc:
        raise InferenceServerError(f"{MISSING_SDK} ({exc})", Status.UNAVAILABLE) from None


class OpenTelemetryExporter:
    """Turns families of traces into spans. ``span_exporter``: where spans go instead of
    OTLP/HTTP (a test's in-memory exporter; then each span is exported as it ends)."""

    def __init__(self, config: OpenTelemetryConfig, span_exporter: Any = None) -> None:
        check_installed()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.trace import SpanKind, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._kind = SpanKind.SERVER
        self._in_context = set_span_in_context
        self._propagator = TraceContextTextMapPropagator()
        resource = Resource.create({"service.name": DEFAULT_SERVICE_NAME,
                                    **dict(config.resource)})
        self.provider = TracerProvider(resource=resource)
        if span_exporter is not None:
            self.provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        else:
            self.provider.add_span_processor(BatchSpanProcessor(
                OTLPSpanExporter(endpoint=config.url),
                max_queue_size=config.bsp_max_queue_size,
                schedule_delay_millis=config.bsp_schedule_delay_ms,
                max_export_batch_size=config.bsp_max_export_batch_size))
        self.tracer = self.provider.get_tracer(SCOPE)
        # Steady-clock nanoseconds to the wall clock's (Triton's time_offset_).
        self._offset = time.time_ns() - time.perf_counter_ns()

    def write(self, family: TraceFamily) -> None:
        exchange = family.exchange
        frontend = exchange.timestamps if exchange is not None else []
        carrier = exchange.context_carrier() if exchange is not None else {}
        parent = self._propagator.extract(carrier) if carrier else None
        every = [ns for _, ns in frontend] + [ns for t in family.traces for _, ns in t.timestamps]
        if not every:
            return
        epoch = self._offset
        root = self.tracer.start_span("InferRequest", context=parent, kind=self._kind,
                                      start_time=min(every) + epoch)
        for name, ns in frontend:
            root.add_event(name, timestamp=ns + epoch)
        spans: dict[int, Any] = {}
        for trace in sorted(family.traces, key=lambda t: t.id):
            caller = spans.get(trace.parent_id, root)
            spans[trace.id] = self._model_span(trace, caller)
            for name, ns in trace.timestamps:  # the top trace's own, as Triton's frontend
                if name == "INFER_RESPONSE_COMPLETE":
                    root.add_event(name, timestamp=ns + epoch)
        root.end(end_time=max(every) + epoch)

    def _model_span(self, trace: RequestTrace, caller: Any) -> Any:
        epoch = self._offset
        stamps = dict(trace.timestamps)
        attributes: dict[str, Any] = {
            "triton.model_name": trace.model_name,
            "triton.model_version": trace.model_version,
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": trace.parent_id,
        }
        if trace.request_id:
            attributes["triton.request_id"] = trace.request_id
        start = stamps.get("REQUEST_START", min(ns for _, ns in trace.timestamps))
        span = self.tracer.start_span(trace.model_name, context=self._in_context(caller),
                                      kind=self._kind, start_time=start + epoch,
                                      attributes=attributes)
        for name in _MODEL_EVENTS:
            if name in stamps:
                span.add_event(name, timestamp=stamps[name] + epoch)
        if "COMPUTE_START" in stamps:
            compute = self.tracer.start_span("compute", context=self._in_context(span),
                                             kind=self._kind,
                                             start_time=stamps["COMPUTE_START"] + epoch)
            for name in _COMPUTE_EVENTS:
                compute.add_event(name, timestamp=stamps[name] + epoch)
            compute.end(end_time=stamps["COMPUTE_END"] + epoch)
        span.end(end_time=stamps.get("REQUEST_END", start) + epoch)
        return span

    def retire(self, state: SettingState) -> None:
        """Nothing is held per setting: spans leave as they are made."""

    def idle(self) -> None:
        """The batch span processor exports on its own schedule."""

    def close(self, states: Iterable[SettingState]) -> None:
        """Export what the batch processor still holds, then stop it."""
        try:
            self.provider.shutdown()
        except Exception as exc:  # an unreachable collector must not fail shutdown
            log.error("exporting the last spans failed: %s", exc)

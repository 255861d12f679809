"""PyTriton's OpenTelemetry hooks (``pytriton.proxy.telemetry``) on naiad.

PyTriton traces a request across its ZeroMQ proxy into the program's process and hands the
callable ``Request.span``. naiad.pytriton has no such proxy: the callable runs in naiad's
worker, ``Request.span`` is always None, and server-side tracing is naiad's
(``TritonConfig.trace_config``, docs/tracing.md). So setting a tracer for the callables
raises, naming it, and ``traced_span`` does what PyTriton's does for a request without a
span: runs the block untraced.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

from naiad.pytriton.exceptions import not_supported

_WHY = ("naiad.pytriton's callables run in naiad's workers, which take no OpenTelemetry "
        "tracer from the program; trace on the server (TritonConfig.trace_config, "
        "docs/tracing.md)")


def set_telemetry_tracer(tracer: Any) -> None:
    """PyTriton's global tracer for the callables' spans: not supported (raises)."""
    raise not_supported("set_telemetry_tracer", _WHY)


def get_telemetry_tracer() -> None:
    """The tracer set by set_telemetry_tracer: always None (it cannot be set)."""
    return None


def build_proxy_tracer_from_triton_config(trace_config: Any) -> Any:
    """PyTriton's tracer for its proxy from ``trace_config``: not supported (raises)."""
    raise not_supported("build_proxy_tracer_from_triton_config", _WHY)


@contextmanager
def traced_span(request: Any, span_name: str, **kwargs: Any) -> Generator[None, None, None]:
    """PyTriton's span for a block of the callable's work on ``request``. Its span is always
    None here (see the module's docstring), so the block runs untraced, as it does in
    PyTriton for a request without a span."""
    if getattr(request, "span", None) is not None:
        raise not_supported(f"traced_span({span_name!r}) on a request with a span", _WHY)
    yield

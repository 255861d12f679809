"""Request tracing: Triton's ``--trace-config``, its trace file and OpenTelemetry spans.

- :mod:`.settings`: the command line's trace settings and the trace extension's updates;
- :mod:`.sampler`: which requests a setting traces (rate, count);
- :mod:`.trace`: the traces of one request (timestamps, tensors) and their family;
- :mod:`.exchange`: the frontend's part of a call (protocol timestamps, ``traceparent``);
- :mod:`.manager`: the server's tracing (settings per model, sampling, the writer thread);
- :mod:`.triton_file`: Triton's JSON trace file (``mode=triton``);
- :mod:`.otel`: OTLP/HTTP export through the OpenTelemetry SDK (``mode=opentelemetry``,
  an optional extra: imported only in that mode).

docs/tracing.md is the user's guide.
"""

from naiad.tracing.manager import TraceManager
from naiad.tracing.settings import DeprecatedFlags, TraceConfig, parse_trace_config

__all__ = ["DeprecatedFlags", "TraceConfig", "TraceManager", "parse_trace_config"]

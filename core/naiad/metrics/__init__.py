"""Statistics and metrics: what the server counts per model version, and how it shows them.

- recording (the request path appends a tuple, folded into integers in batches):
  :mod:`.stats` (counts and cumulative durations), :mod:`.latency_histograms` (naiad's
  histograms and Triton's summaries per version), :mod:`.histogram` (the one Prometheus
  histogram type), :mod:`.quantiles` (the sliding-window quantiles behind the summaries),
  :mod:`.custom_metrics` (metric families models define; public);
- configuring: :mod:`.config` (``--metrics-config``);
- showing, on the metrics port: :mod:`.endpoint` (``GET /metrics``), :mod:`.latency_lines`,
  :mod:`.cache_lines`, :mod:`.gpu_lines` (NVML) and :mod:`.prometheus_text` (the text
  format, as Triton writes it).

The statistics extension (HTTP and gRPC) reads :mod:`.stats` too, so the views agree.
"""

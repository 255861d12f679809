"""How latencies and batches are spread, on the metrics port: naiad's histograms, Triton's
summaries, and why the dynamic batcher cut each batch.

naiad's own families carry the ``naiad_`` prefix (Triton has no such series), and, like
Triton's only histogram (``nv_inference_first_response_histogram_ms``), give durations in
milliseconds: ``histogram_quantile()`` over their buckets reads directly in ms. Triton's
counters and summaries keep their microseconds. docs/metrics.md lists every family.
"""

from __future__ import annotations

from collections.abc import Sequence

from naiad.metrics import prometheus_text
from naiad.metrics.latency_histograms import DistributionsSnapshot
from naiad.models.records import ModelVersion
from naiad.scheduling.batch_policy import CutReason

# key in DistributionsSnapshot.histograms -> (family, HELP text)
HISTOGRAMS = {
    "request": ("naiad_inference_request_duration_ms",
                "Inference request duration in milliseconds, from arrival to response, of "
                "successful requests (includes cached requests)"),
    "queue": ("naiad_inference_queue_duration_ms",
              "Inference queuing duration in milliseconds of successful requests (includes "
              "cached requests)"),
    "compute_infer": ("naiad_inference_compute_infer_duration_ms",
                      "Compute inference duration in milliseconds of successful requests "
                      "(does not include cached requests)"),
    "batch_size": ("naiad_inference_exec_batch_size",
                   "Number of inferences in each model execution (does not include cached "
                   "requests)"),
}

# key in DistributionsSnapshot.summaries -> (family, HELP text): Triton 2.51's words (its
# compute summaries repeat the counters' HELP text)
SUMMARIES = {
    "request": ("nv_inference_request_summary_us",
                "Summary of inference request duration in microseconds (includes cached "
                "requests)"),
    "queue": ("nv_inference_queue_summary_us",
              "Summary of inference queuing duration in microseconds (includes cached "
              "requests)"),
    "compute_input": ("nv_inference_compute_input_summary_us",
                      "Cumulative compute input duration in microseconds (does not include "
                      "cached requests)"),
    "compute_infer": ("nv_inference_compute_infer_summary_us",
                      "Cumulative compute inference duration in microseconds (does not "
                      "include cached requests)"),
    "compute_output": ("nv_inference_compute_output_summary_us",
                       "Cumulative inference compute output duration in microseconds (does "
                       "not include cached requests)"),
    "cache_hit": ("nv_cache_hit_summary_per_model",
                  "Summary of cache hit counts/durations per model, in microseconds."),
    "cache_miss": ("nv_cache_miss_summary_per_model",
                   "Summary of cache miss counts/durations per model, in microseconds."),
}

BATCH_CUTS = "naiad_batch_cut_total"
BATCH_CUTS_HELP = ("Number of dynamic batches sent to the model, by the reason the batcher "
                   "cut them")

#: Every family name this module can print (the dashboard test checks against it).
FAMILIES = (*(name for name, _ in HISTOGRAMS.values()),
            *(name for name, _ in SUMMARIES.values()), BATCH_CUTS)

Snapshots = Sequence[tuple[ModelVersion, DistributionsSnapshot]]


def _labels(version: ModelVersion) -> list[tuple[str, str]]:
    return [("model", version.name), ("version", str(version.version))]


def render_histograms(lines: list[str], snapshots: Snapshots) -> None:
    """naiad's histograms of every version that records them."""
    for key, (name, help_text) in HISTOGRAMS.items():
        series = [(version, snapshot.histograms[key]) for version, snapshot in snapshots
                  if key in snapshot.histograms]
        if not series:
            continue
        prometheus_text.family_header(lines, name, help_text, "histogram")
        for version, histogram in series:
            prometheus_text.histogram(lines, name, _labels(version), histogram)


def render_summaries(lines: list[str], snapshots: Snapshots) -> None:
    """Triton's summaries (``summary_latencies=true``), quantiles over the window."""
    for key, (name, help_text) in SUMMARIES.items():
        series = [(version, snapshot.summaries[key]) for version, snapshot in snapshots
                  if key in snapshot.summaries]
        if not series:
            continue
        prometheus_text.family_header(lines, name, help_text, "summary")
        for version, sample in series:
            quantiles = version.stats.distributions.quantiles  # type: ignore[union-attr]
            prometheus_text.summary(lines, name, _labels(version), quantiles,
                                    sample.quantiles(quantiles), sample.count, sample.sum)


def batches_dynamically(version: ModelVersion) -> bool:
    """True for a version the dynamic batcher serves (it counts its cuts)."""
    config = version.config
    return config.HasField("dynamic_batching") and not config.HasField("sequence_batching")


def render_batch_cuts(lines: list[str], versions: Sequence[ModelVersion]) -> None:
    """``naiad_batch_cut_total``: every reason of every dynamically batched version, zeros
    included, so that ``rate()`` sees each series from the version's load on."""
    batched = [v for v in versions if batches_dynamically(v)]
    if not batched:
        return
    prometheus_text.family_header(lines, BATCH_CUTS, BATCH_CUTS_HELP, "counter")
    for version in batched:
        cuts = version.stats.batch_cuts  # one dict read per reason: no lock needed
        for reason in CutReason:
            prometheus_text.sample(lines, BATCH_CUTS, (
                ("model", version.name), ("reason", reason.label),
                ("version", str(version.version))), cuts.get(reason.label, 0))

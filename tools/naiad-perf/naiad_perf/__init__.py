"""naiad perf: a perf_analyzer-compatible load generator for KServe V2 servers (naiad, Triton)."""

from naiad_perf.api import LoadSpec, Measurement, measure

__all__ = ["LoadSpec", "Measurement", "measure"]
__version__ = "0.1.0"

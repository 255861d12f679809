"""naiad perf: a perf_analyzer-compatible load generator for KServe V2 servers (naiad, Triton)."""

from naiad_perf.api import LoadSpec, Measurement, measure
from naiad_perf.model import PerfError

__all__ = ["LoadSpec", "Measurement", "PerfError", "measure"]
__version__ = "0.1.0"

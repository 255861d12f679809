"""The response cache's lines on the metrics port, as Triton 2.51 prints them.

Per model version (counters, for versions with ``response_cache { enable: true }``, whether
or not the server has a cache, as Triton; ``--metrics-config counter_latencies=false``
removes them with the other latency counters): ``nv_cache_num_hits_per_model``,
``nv_cache_hit_duration_per_model``, ``nv_cache_num_misses_per_model`` and
``nv_cache_miss_duration_per_model`` (µs; a miss's time is its lookup and its insert).

Server-wide (gauges, only while the server has a cache, from what the cache plugin reports
through :meth:`naiad.types.ResponseCache.usage`; a figure it does not report is left out):
``nv_cache_util``, ``nv_cache_num_entries``, ``nv_cache_num_hits``, ``nv_cache_num_misses``,
``nv_cache_num_lookups``, ``nv_cache_num_evictions``, ``nv_cache_lookup_duration`` and
``nv_cache_insertion_duration`` (µs).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from naiad.metrics import prometheus_text
from naiad.metrics.stats import ModelStats
from naiad.types import CacheUsage, ResponseCache

log = logging.getLogger("naiad.metrics")

NS_PER_US = 1000

# (name, HELP text, what it counts): Triton 2.51's words and order
PER_MODEL = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model",
     lambda s: s.cache_hit.count),
    ("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds",
     lambda s: s.cache_hit.ns // NS_PER_US),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model",
     lambda s: s.cache_miss.count),
    ("nv_cache_miss_duration_per_model",
     "Total cache miss (insert+lookup) duration per model, in microseconds",
     lambda s: s.cache_miss.ns // NS_PER_US),
)

SERVER_WIDE = (
    ("nv_cache_util", "Cache utilization [0.0 - 1.0]",
     lambda u: u.bytes_used / u.bytes_total
     if u.bytes_used is not None and u.bytes_total else None),
    ("nv_cache_num_entries", "Number of responses stored in response cache",
     lambda u: u.entries),
    ("nv_cache_num_hits", "Number of cache hits in response cache", lambda u: u.hits),
    ("nv_cache_num_misses", "Number of cache misses in response cache", lambda u: u.misses),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache", lambda u: u.lookups),
    ("nv_cache_num_evictions", "Number of cache evictions in response cache",
     lambda u: u.evictions),
    ("nv_cache_lookup_duration", "Total cache lookup duration (hit and miss), in microseconds",
     lambda u: None if u.lookup_ns is None else u.lookup_ns // NS_PER_US),
    ("nv_cache_insertion_duration", "Total cache insertion duration, in microseconds",
     lambda u: None if u.insertion_ns is None else u.insertion_ns // NS_PER_US),
)

#: Every family name this module can print (the dashboard test checks against it).
FAMILIES = tuple(name for name, _, _ in PER_MODEL + SERVER_WIDE)


def render_per_model(lines: list[str], cached: Sequence[ModelStats]) -> None:
    """The per-model counters of the versions with ``response_cache { enable: true }``."""
    if not cached:
        return
    for name, help_text, value in PER_MODEL:
        prometheus_text.family_header(lines, name, help_text, "counter")
        for stats in cached:
            prometheus_text.sample(lines, name, (("model", stats.name),
                                                 ("version", str(stats.version))), value(stats))


def render_server_wide(lines: list[str], cache: ResponseCache | None) -> None:
    """The cache's own gauges, as far as its :meth:`~ResponseCache.usage` reports them."""
    if cache is None:
        return
    try:
        usage = cache.usage()
    except Exception as exc:  # a plugin's bug must not take the whole scrape down
        log.warning("response cache usage() failed, its nv_cache_* gauges are left out: %s",
                    exc)
        return
    if usage is None:
        return
    if not isinstance(usage, CacheUsage):
        log.warning("response cache usage() returned %s, not a CacheUsage; its nv_cache_* "
                    "gauges are left out", type(usage).__name__)
        return
    for name, help_text, read in SERVER_WIDE:
        value = read(usage)
        if value is None:
            continue
        prometheus_text.family_header(lines, name, help_text, "gauge")
        prometheus_text.sample(lines, name, (), value)

"""Which requests are traced: one :class:`SettingState` per effective setting.

Triton samples 1 request of every ``rate`` (the rate-th, the 2·rate-th...: ``++seen % rate
== 0``), and while ``count`` is not -1 it counts down the traces left; at 0 no more are
made. A setting (the global one, or one model's) is replaced, never changed, when the
trace extension updates it, so a new setting counts from zero again, as in Triton. The
file writer's bookkeeping for the setting (traces waiting for ``log_frequency``) lives here
too, touched only by the writer's thread.
"""

from __future__ import annotations

import threading

from naiad.tracing.settings import OFF, TraceValues


class SettingState:
    """One effective trace setting and what it sampled so far."""

    __slots__ = ("_lock", "active", "buffer", "collected", "created", "remaining", "retired",
                 "seen", "specified", "values")

    def __init__(self, values: TraceValues, specified: frozenset[str] = frozenset()) -> None:
        self.values = values
        #: the settings given for this model (or globally) rather than copied from the
        #: fallback (Triton's ``*_specified``); a model setting without any is dropped
        self.specified = specified
        self.active = values.level != OFF
        #: traces still to make (-1: no limit); the trace extension shows it as trace_count
        self.remaining = values.count
        self.seen = 0
        self.created = 0
        self._lock = threading.Lock()
        # --- the trace file writer's part (its thread only) ---
        #: rendered traces not written yet
        self.buffer: list[bytes] = []
        self.collected = 0
        #: replaced by an update: what it still holds is written at once
        self.retired = False

    def sample(self) -> bool:
        """Whether the request that just arrived is traced (thread-safe)."""
        if not self.active:
            return False
        rate = self.values.rate
        with self._lock:
            if self.remaining == 0 or rate == 0:
                return False
            self.seen += 1
            if self.seen % rate:
                return False
            if self.remaining > 0:
                self.remaining -= 1
            self.created += 1
            return True

    def force(self) -> bool:
        """Trace a request whatever the rate and count (a propagated OpenTelemetry
        context, as in Triton), unless tracing is off."""
        if not self.active:
            return False
        with self._lock:
            self.created += 1
        return True

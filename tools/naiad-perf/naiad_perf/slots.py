"""A concurrency slot: which data step it sends next, the sequence it is in, its prepared
requests, and (with --shared-memory system) the worker's registered regions."""

from __future__ import annotations

import os
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from naiad_perf.api import LoadSpec
from naiad_perf.inputs import Step
from naiad_perf.model import ModelInfo, control_client
from naiad_perf.wire import Sequence, ShmLayout, ShmRef, grpc_request, http_request_bytes

# perf_analyzer's default --sequence-id-range starts at 1 and has no end of its own.
DEFAULT_SEQUENCE_IDS = (1, 2**31)


class SequenceIds:
    """Correlation ids for one worker: its share of the range (every workers-th id), fresh
    ones first, then those of ended sequences, least recently used first; an id is never
    given to two live sequences (the runner checks the share covers the worker's slots)."""

    def __init__(self, spec: LoadSpec, worker: int, workers: int) -> None:
        start, self.end = spec.sequence_id_range or DEFAULT_SEQUENCE_IDS
        self.step = workers
        self.fresh = start + worker
        self.released: deque[int] = deque()
        self.lock = threading.Lock()

    def acquire(self) -> int:
        with self.lock:
            if self.fresh < self.end:
                self.fresh += self.step
                return self.fresh - self.step
            return self.released.popleft()

    def release(self, sequence_id: int) -> None:
        with self.lock:
            self.released.append(sequence_id)


@dataclass
class SharedMemory:
    """The worker's system shared memory regions: one per input holding every step, one per
    output and slot (the server writes outputs there)."""

    spec: LoadSpec
    model: ModelInfo
    prefix: str
    client: Any = None
    handles: dict[str, Any] = field(default_factory=dict)
    inputs: dict[tuple[int, int, str], ShmRef] = field(default_factory=dict)
    outputs: dict[int, dict[str, ShmRef]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _region(self, name: str, size: int, blobs: list[bytes]) -> None:
        import tritonclient.utils.shared_memory as shm

        key = f"/{name}"
        handle = shm.create_shared_memory_region(name, key, size)
        self.handles[name] = handle
        offset = 0
        for blob in blobs:
            if blob:
                shm.set_shared_memory_region(handle, [np.frombuffer(blob, np.uint8)], offset)
            offset += len(blob)
        self.client.register_system_shared_memory(name, key, size)

    def set_up(self, streams: list[list[Step]]) -> None:
        self.client = control_client(self.spec)
        for info in self.model.inputs:
            blobs, offset = [], 0
            for s, stream in enumerate(streams):
                for i, step in enumerate(stream):
                    raw = next(t.raw for t in step if t.name == info.name)
                    self.inputs[(s, i, info.name)] = ShmRef(f"{self.prefix}_in_{info.name}",
                                                            offset, len(raw))
                    blobs.append(raw)
                    offset += len(raw)
            self._region(f"{self.prefix}_in_{info.name}", max(offset, 1), blobs)

    def for_slot(self, slot: int) -> ShmLayout:
        with self.lock:
            if slot not in self.outputs:
                size = self.spec.output_shared_memory_size
                refs = {}
                for info in self.model.outputs:
                    name = f"{self.prefix}_out{slot}_{info.name}"
                    self._region(name, size, [])
                    refs[info.name] = ShmRef(name, 0, size)
                self.outputs[slot] = refs
            return ShmLayout(self.inputs, self.outputs)

    def close(self) -> None:
        import tritonclient.utils.shared_memory as shm

        if self.client is None:
            return
        for name, handle in self.handles.items():
            try:
                self.client.unregister_system_shared_memory(name)
            except Exception:  # best effort at exit; the region goes anyway
                pass
            shm.destroy_shared_memory_region(handle)
        self.handles.clear()
        self.client.close()
        self.client = None


class Slot:
    """One outstanding request at a time: walks the data and, for a sequence model, its
    sequences (start on the first request, end on the last)."""

    def __init__(self, slot: int, spec: LoadSpec, model: ModelInfo, streams: list[list[Step]],
                 ids: SequenceIds, shm: SharedMemory | None) -> None:
        self.slot, self.spec, self.model, self.streams = slot, spec, model, streams
        self.ids = ids
        self.shm = shm.for_slot(slot) if shm is not None else None
        self.outputs = [t.name for t in model.outputs]
        self.host = spec.url
        # non-sequence models walk every step of every stream, each slot from its own place
        self.flat = [(s, i) for s, stream in enumerate(streams) for i in range(len(stream))]
        self.position = slot % len(self.flat)
        self.cache: dict[tuple[int, int], Any] = {}
        self.sequence: tuple[int, int, int] | None = None   # (id, stream, steps left)
        self.sequences_started = 0
        self.step_in_stream = 0
        self.ended: int | None = None   # the id of the sequence the last request ended

    def _next_place(self) -> tuple[tuple[int, int], Sequence | None]:
        if not self.model.sequence:
            place = self.flat[self.position]
            self.position = (self.position + 1) % len(self.flat)
            return place, None
        generated = self.spec.input_data in ("zero", "random")
        if self.ended is not None:  # its last request has been answered: the id is free
            self.ids.release(self.ended)
            self.ended = None
        if self.sequence is None:
            stream = (self.slot + self.sequences_started) % len(self.streams)
            length = self.spec.sequence_length if generated else len(self.streams[stream])
            self.sequence = (self.ids.acquire(), stream, max(length, 1))
            self.sequences_started += 1
            self.step_in_stream = 0
        seq_id, stream, left = self.sequence
        length = len(self.streams[stream])
        step = self.step_in_stream % length
        start = self.step_in_stream == 0
        self.step_in_stream += 1
        left -= 1
        self.sequence = (seq_id, stream, left) if left > 0 else None
        if left == 0:
            self.ended = seq_id
        return (stream, step), Sequence(seq_id, start, left == 0)

    def http(self) -> bytes:
        place, seq = self._next_place()
        if seq is None and place in self.cache:
            return self.cache[place]
        s, i = place
        request = http_request_bytes(self.host, self.model.name, self.model.version,
                                     self.streams[s][i], self.outputs, place, seq, self.shm,
                                     self.slot)
        if seq is None:
            self.cache[place] = request
        return request

    def grpc(self) -> Any:
        place, seq = self._next_place()
        if seq is None and place in self.cache:
            return self.cache[place]
        s, i = place
        request = grpc_request(self.model.name, self.model.version, self.streams[s][i],
                               self.outputs, place, seq, self.shm, self.slot,
                               final_response=self.model.decoupled)
        if seq is None:
            self.cache[place] = request
        return request

    @property
    def in_sequence(self) -> bool:
        return self.sequence is not None


def shm_prefix(worker: int) -> str:
    return f"naiadperf_{os.getpid()}_{worker}"

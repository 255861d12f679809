"""The response cache's call site: request keys, stored responses, and the scheduler that
looks a request up before its model runs.

A model version with ``response_cache { enable: true }`` on a server started with a cache
(``--cache-config NAME,KEY=VALUE``, a :class:`naiad.types.ResponseCache` from a plugin) gets
its scheduler wrapped in a :class:`CachedScheduler` at load. Every way a request reaches a
model (both frontends, ensemble steps, models calling models) goes through its scheduler,
so every one of them is looked up. A hit skips the scheduler; a successful execution is
inserted after it ran. Statistics count as Triton counts them: a hit is a success (and a
queue entry) with its lookup time as ``cache_hit``, but no inference and no execution; a
miss adds its lookup and insert time to ``cache_miss``.

The key is a digest of the model name, version, the version's generation (a digest of its
configuration and of its files' paths, sizes and modification times, taken at load:
:mod:`naiad.models.cache_generation`), every input's name, datatype, shape and bytes, the
outputs the request asks for, and the request parameters a model can read
(:data:`SERVING_PARAMETERS` steer the serving only, and are left out). A request that names
every output of the model asks for what one that names none asks for: the two share a key,
as in Triton. Triton leaves the requested outputs (and the parameters) out of its key
altogether and answers a hit with the outputs of the first response, whatever the second
asked for (``tests/compat/test_compat_cache_key.py`` shows each case against Triton 2.51);
naiad keys a subset of the outputs, so a hit is never missing an output it was asked for
nor carries one it was not.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import time
from concurrent.futures import Future, ThreadPoolExecutor

from naiad.errors import InferenceServerError, Status
from naiad.futures import LightFuture
from naiad.metrics.stats import ModelStats
from naiad.scheduling.base import Scheduler
from naiad.types import InferenceRequest, InferenceResponse, ResponseCache
from naiad.wire_tensors import from_raw, to_raw

log = logging.getLogger("naiad.cache")

#: Request parameters that change how a request is served, never what a model computes.
SERVING_PARAMETERS = frozenset({
    "priority", "timeout", "binary_data_output", "sequence_id", "sequence_start",
    "sequence_end", "triton_enable_empty_final_response",
})
#: Threads that wait on a blocking (remote) cache, so no request path waits on its I/O.
BLOCKING_CACHE_THREADS = 4
# A stored response starts with this tag (the format's version) and the header's length.
_TAG = b"naiad-response-1\n"
_HEADER_LENGTH = struct.Struct("<I")
_DIGEST_BYTES = 32


def request_key(request: InferenceRequest, version: int,
                model_outputs: frozenset[str] = frozenset(), generation: bytes = b"") -> bytes:
    """The cache key of ``request`` to version ``version`` of its model, whose
    configuration lists ``model_outputs`` (naming all of them is naming none).
    ``generation``: what the version was loaded from (its configuration and files, see
    :mod:`naiad.models.cache_generation`), so that a reload with new code or weights never
    answers from the entries of the old ones."""
    digest = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    update = digest.update
    update(f"{request.model_name}\0{version}\0".encode())
    update(generation)
    for name in sorted(request.inputs):
        tensor = request.inputs[name]
        update(f"{name}\0{tensor.datatype}\0{tensor.shape}\0".encode())
        raw = to_raw(tensor)
        update(struct.pack("<Q", len(raw)))
        update(raw)
    wanted = (None if request.requested_outputs is None
              else {output.name for output in request.requested_outputs})
    if wanted is None or (model_outputs and wanted == model_outputs):
        update(b"*")
    else:
        update(repr(sorted(wanted)).encode())
    readable = sorted((k, v) for k, v in request.parameters.items()
                      if k not in SERVING_PARAMETERS)
    if readable:
        update(repr(readable).encode())
    return digest.digest()


def encode_response(response: InferenceResponse) -> bytes | None:
    """``response`` as the bytes a cache stores; None when it cannot be stored (parameters
    that JSON cannot hold)."""
    raws = [to_raw(tensor) for tensor in response.outputs]
    header = {
        "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape),
                     "bytes": len(raw), "parameters": t.parameters}
                    for t, raw in zip(response.outputs, raws, strict=True)],
        "parameters": response.parameters,
    }
    try:
        encoded = json.dumps(header, separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return None
    return b"".join([_TAG, _HEADER_LENGTH.pack(len(encoded)), encoded, *raws])


def decode_response(model: str, value: bytes) -> InferenceResponse:
    """A response from stored bytes; its arrays are read-only views of ``value``. Raises
    ValueError for bytes this format did not write (another program's, a truncated value)."""
    view = memoryview(value)
    if bytes(view[:len(_TAG)]) != _TAG:
        raise ValueError("not a response stored by this version of naiad")
    try:
        return _decode_body(model, view, len(_TAG))
    except (struct.error, KeyError, TypeError, ValueError, InferenceServerError) as exc:
        raise ValueError(f"unreadable stored response: {exc}") from None


def _decode_body(model: str, view: memoryview, offset: int) -> InferenceResponse:
    (length,) = _HEADER_LENGTH.unpack_from(view, offset)
    offset += _HEADER_LENGTH.size
    header = json.loads(bytes(view[offset:offset + length]))
    offset += length
    outputs = []
    for item in header["outputs"]:
        end = offset + item["bytes"]
        if end > len(view):
            raise ValueError("stored response is truncated")
        tensor = from_raw(model, item["name"], item["datatype"], tuple(item["shape"]),
                          view[offset:end])
        tensor.parameters = item["parameters"]
        outputs.append(tensor)
        offset = end
    return InferenceResponse(outputs=outputs, parameters=header["parameters"])


class ServerCache:
    """The server's response cache (one per server, from ``--cache-config``) and the
    threads that wait on it when it blocks."""

    def __init__(self, name: str, cache: ResponseCache) -> None:
        self.name = name
        self.cache = cache
        self._io_threads = (ThreadPoolExecutor(BLOCKING_CACHE_THREADS,
                                               thread_name_prefix="naiad-cache")
                            if cache.blocking else None)

    def wrap(self, scheduler: Scheduler, version: int, stats: ModelStats,
             outputs: frozenset[str] = frozenset(), generation: bytes = b"") -> Scheduler:
        """``scheduler`` of a model version with ``response_cache { enable: true }`` (and
        the output names of its configuration, and the generation it was loaded from),
        behind the cache."""
        return CachedScheduler(scheduler, self.cache, version, stats, self._io_threads,
                               outputs, generation)

    def close(self) -> None:
        """At shutdown, once no request runs: finish pending inserts, then close the cache."""
        if self._io_threads is not None:
            self._io_threads.shutdown(wait=True)
        try:
            self.cache.close()
        except Exception as exc:
            log.warning("response cache '%s' failed to close: %s", self.name, exc)


class CachedScheduler(Scheduler):
    """A model version's scheduler behind the server's response cache.

    An in-memory cache is asked inline, on the thread that submits; a blocking one
    (:attr:`ResponseCache.blocking`) on ``io_threads``, so a slow remote cache delays only
    the requests it answers, and its inserts never delay a response. A cache that fails
    is a miss: the request runs.
    """

    def __init__(self, inner: Scheduler, cache: ResponseCache, version: int,
                 stats: ModelStats, io_threads: ThreadPoolExecutor | None,
                 outputs: frozenset[str] = frozenset(), generation: bytes = b"") -> None:
        self.inner = inner
        self.outputs = outputs
        self.generation = generation
        self.cache = cache
        self.version = version
        self.stats = stats
        self.io_threads = io_threads if cache.blocking else None
        self.holds_requests = inner.holds_requests

    def submit(self, request: InferenceRequest) -> Future[InferenceResponse]:
        start = time.perf_counter_ns()
        key = request_key(request, self.version, self.outputs, self.generation)
        if self.io_threads is None:
            hit = self._lookup(request, key, start)
            if hit is not None:
                return hit
            return self._run(request, key, time.perf_counter_ns() - start)
        # A blocking cache: the lookup waits on a thread of ours, then the request runs
        # from there. Until it is scheduled the request cannot be withdrawn (cancel() is
        # False); a cancellation reaches it once it is.
        outer: LightFuture[InferenceResponse] = LightFuture(running=True)
        self.io_threads.submit(self._lookup_then_run, request, key, start, outer)
        return outer

    def _lookup_then_run(self, request: InferenceRequest, key: bytes, start: int,
                         outer: LightFuture[InferenceResponse]) -> None:
        try:
            hit = self._lookup(request, key, start)
            if hit is not None:
                outer.set_result(hit.result())
                return
            inner = self._run(request, key, time.perf_counter_ns() - start)
        except InferenceServerError as exc:  # refused at once (a full queue)
            outer.set_exception(exc)
            return
        except Exception as exc:  # a scheduler bug must still answer the request
            outer.set_exception(exc)
            return
        if request.cancellation is not None:
            request.cancellation.on_cancel(inner.cancel)
        inner.add_done_callback(lambda done: _copy_outcome(done, outer))

    def _lookup(self, request: InferenceRequest, key: bytes, start: int
                ) -> Future[InferenceResponse] | None:
        """A finished future of the cached response, or None on a miss."""
        try:
            value = self.cache.lookup(key)
            response = None if value is None else decode_response(request.model_name, value)
        except Exception as exc:  # a cache must not fail an inference: run the model
            log.warning("model '%s': response cache lookup failed (%s: %s); running the "
                        "model", request.model_name, type(exc).__name__, exc)
            return None
        if response is None:
            return None
        end = time.perf_counter_ns()
        arrival = request.arrival_ns or start
        queued = max(start - arrival, 0)
        self.stats.record_cache_hit(end - arrival, queued, end - start)
        request.durations = (queued, 0, 0, 0)
        future: LightFuture[InferenceResponse] = LightFuture(running=True)
        future.set_result(response)
        return future

    def _run(self, request: InferenceRequest, key: bytes, lookup_ns: int
             ) -> Future[InferenceResponse]:
        future = self.inner.submit(request)
        future.add_done_callback(lambda done: self._finished(request, key, lookup_ns, done))
        return future

    def _finished(self, request: InferenceRequest, key: bytes, lookup_ns: int,
                  done: Future[InferenceResponse]) -> None:
        """After the model ran (on the thread that finished it): store a success."""
        if done.cancelled() or done.exception() is not None:
            self.stats.record_cache_miss(lookup_ns)
            return
        response = done.result()
        if response.error is not None:
            self.stats.record_cache_miss(lookup_ns)
            return
        if self.io_threads is None:
            self._insert(request, key, response, lookup_ns)
        else:
            self.io_threads.submit(self._insert, request, key, response, lookup_ns)

    def _insert(self, request: InferenceRequest, key: bytes, response: InferenceResponse,
                lookup_ns: int) -> None:
        start = time.perf_counter_ns()
        try:
            value = encode_response(response)
            if value is not None:
                self.cache.insert(key, value)
            else:
                log.debug("model '%s': response not cached (its parameters are not JSON)",
                          request.model_name)
        except Exception as exc:
            log.warning("model '%s': response cache insert failed (%s: %s)",
                        request.model_name, type(exc).__name__, exc)
        self.stats.record_cache_miss(lookup_ns + time.perf_counter_ns() - start)

    async def drain(self) -> None:
        await self.inner.drain()

    def pending(self) -> int:
        return self.inner.pending()


def _copy_outcome(done: Future[InferenceResponse], outer: Future[InferenceResponse]) -> None:
    """The scheduler's outcome onto the future the caller holds (which cannot be marked
    cancelled once running: a withdrawn request is a CANCELLED error there)."""
    if done.cancelled():
        outer.set_exception(InferenceServerError("the request was cancelled",
                                                 Status.CANCELLED))
        return
    error = done.exception()
    if error is not None:
        outer.set_exception(error)
    else:
        outer.set_result(done.result())

"""A load-generating process: runs its share of the concurrency (or request rate) until told
to stop, and hands its records over whenever the runner closes a measurement window.

Two engines: threads with blocking sockets/stubs (one per slot; the default) and asyncio
(``--async``: one coroutine per slot on one event loop, grpc.aio for gRPC). Each request gives
a record (start ns, end ns, client send/recv ns, responses, ok).
"""

from __future__ import annotations

import asyncio
import random
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from naiad_perf.api import LoadSpec
from naiad_perf.inputs import build_streams
from naiad_perf.model import ModelInfo
from naiad_perf.slots import SequenceIds, SharedMemory, Slot, shm_prefix
from naiad_perf.wire import HttpConnection, HttpResponseError, error_text, is_final

# One request's guard: a server that stops answering ends the run, it does not hang it.
REQUEST_TIMEOUT_S = 60.0
# Threads (or coroutines) per worker that carry a request-rate schedule.
RATE_SLOTS_PER_WORKER = 16
# Error messages a worker keeps per window (the count is exact).
KEPT_ERRORS = 5

Record = tuple[int, int, int, int, bool]


@dataclass
class Level:
    """What one worker runs at one load level."""

    slots: list[int]                 # concurrency mode: the global slot numbers it owns
    rate: float | None = None        # request-rate mode: this worker's requests per second
    distribution: str = "constant"
    offset_s: float = 0.0            # stagger of this worker's schedule
    seed: int = 0


class Recorder:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.errors: list[str] = []
        self.error_count = 0
        self.delayed = 0

    def error(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < KEPT_ERRORS:
            self.errors.append(message)

    def take(self) -> dict[str, Any]:
        # in place: the load threads hold this list (appending is atomic under the GIL)
        count = len(self.records)
        records = self.records[:count]
        del self.records[:count]
        errors, self.errors = self.errors, []
        error_count, self.error_count = self.error_count, 0
        delayed, self.delayed = self.delayed, 0
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"records": records, "errors": errors, "error_count": error_count,
                "delayed": delayed, "cpu_s": usage.ru_utime + usage.ru_stime,
                "at_ns": time.perf_counter_ns()}


class Schedule:
    """Send times of a request-rate level (constant gaps or Poisson arrivals)."""

    def __init__(self, level: Level) -> None:
        assert level.rate
        self.gap = 1.0 / level.rate
        self.poisson = level.distribution == "poisson"
        self.rng = random.Random(level.seed)
        self.next_at = time.perf_counter() + level.offset_s
        self.lock = threading.Lock()

    def take(self) -> float:
        with self.lock:
            at = self.next_at
            self.next_at += self.rng.expovariate(1.0 / self.gap) if self.poisson else self.gap
            return at


def _host_port(url: str) -> tuple[str, int]:
    host, _, port = url.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class Engine:
    """Shared by both engines: the data, the slots, the recorder, the stop flag."""

    def __init__(self, spec: LoadSpec, model: ModelInfo, worker: int, workers: int) -> None:
        self.spec, self.model = spec, model
        self.streams = build_streams(spec, model)
        self.ids = SequenceIds(spec, worker, workers)
        self.shm: SharedMemory | None = None
        if spec.shared_memory == "system":
            self.shm = SharedMemory(spec, model, shm_prefix(worker))
            self.shm.set_up(self.streams)
        self.recorder = Recorder()
        self.stopping = threading.Event()
        self.slot_cache: dict[int, Slot] = {}

    def slot(self, number: int) -> Slot:
        # a slot outlives its level: its shared memory regions are registered once
        if number not in self.slot_cache:
            self.slot_cache[number] = Slot(number, self.spec, self.model, self.streams,
                                           self.ids, self.shm)
        return self.slot_cache[number]

    def close(self) -> None:
        if self.shm is not None:
            self.shm.close()


class ThreadEngine(Engine):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.threads: list[threading.Thread] = []
        self.stream_closers: list[Callable[[], None]] = []

    def _requester(self, slot: Slot) -> Callable[[], tuple[int, int, bool]]:
        """A function that sends one request and returns (client ns, responses, ok)."""
        clock = time.perf_counter_ns
        if self.spec.protocol == "http":
            conn = HttpConnection(*_host_port(self.spec.url), REQUEST_TIMEOUT_S)

            def http_call() -> tuple[int, int, bool]:
                t0 = clock()
                conn.send(slot.http())
                t1 = clock()
                conn.wait()
                t2 = clock()
                status, body = conn.receive()
                if status != 200:
                    self.recorder.error(error_text(status, body))
                return (t1 - t0) + (clock() - t2), 1, status == 200
            return http_call
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        channel = grpc.insecure_channel(self.spec.url)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        if not self.spec.streaming:
            def grpc_call() -> tuple[int, int, bool]:
                t0 = clock()
                request = slot.grpc()
                t1 = clock()
                stub.ModelInfer(request, timeout=REQUEST_TIMEOUT_S)
                return t1 - t0, 1, True
            return grpc_call
        import queue

        outbox: queue.Queue[Any] = queue.Queue()
        responses = stub.ModelStreamInfer(iter(outbox.get, None))

        def stream_call() -> tuple[int, int, bool]:
            t0 = clock()
            outbox.put(slot.grpc())
            t1 = clock()
            count, ok = 0, True
            while True:
                answer = next(responses)
                if answer.error_message:
                    self.recorder.error(answer.error_message)
                    ok = False
                if answer.infer_response.outputs:
                    count += 1
                if is_final(answer):
                    return t1 - t0, count, ok
        self.stream_closers.append(lambda: outbox.put(None))
        return stream_call

    def _run_slot(self, slot: Slot, schedule: Schedule | None) -> None:
        import grpc

        try:
            call = self._requester(slot)
        except (OSError, grpc.RpcError) as exc:
            self.recorder.error(f"connecting: {exc}")
            return
        clock, records = time.perf_counter_ns, self.recorder.records
        # a sequence is finished before the slot stops, as perf_analyzer does
        while not self.stopping.is_set() or slot.in_sequence:
            if schedule is not None:
                at = schedule.take()
                wait = at - time.perf_counter()
                if wait > 0:
                    if self.stopping.wait(wait) and not slot.in_sequence:
                        return
                elif wait < -0.001:
                    self.recorder.delayed += 1
            start = clock()
            try:
                client_ns, responses, ok = call()
            except (OSError, HttpResponseError, grpc.RpcError, StopIteration) as exc:
                self.recorder.error(_describe(exc))
                records.append((start, clock(), 0, 0, False))
                if self.stopping.wait(0.01):  # a dead server is not hammered
                    return
                continue
            records.append((start, clock(), client_ns, responses, ok))

    def start(self, level: Level) -> None:
        self.stopping.clear()
        self.stream_closers = []
        if level.rate:
            schedule = Schedule(level)
            slots = [self.slot(n) for n in level.slots[:RATE_SLOTS_PER_WORKER]]
            self.threads = [threading.Thread(target=self._run_slot, args=(s, schedule),
                                             daemon=True) for s in slots]
        else:
            self.threads = [threading.Thread(target=self._run_slot,
                                             args=(self.slot(n), None), daemon=True)
                            for n in level.slots]
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(REQUEST_TIMEOUT_S)
        for close in self.stream_closers:  # after the joins: no request follows the end
            close()
        self.threads = []


def _describe(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    if callable(details):
        return f"gRPC {exc.code().name}: {details()}"  # type: ignore[attr-defined]
    return f"{type(exc).__name__}: {exc}"


class AsyncEngine(Engine):
    """--async: every slot a coroutine on one event loop in a thread of its own."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.future: Any = None

    async def _http_slot(self, slot: Slot, schedule: Schedule | None) -> None:
        clock, records = time.perf_counter_ns, self.recorder.records
        host, port = _host_port(self.spec.url)
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while not self.stopping.is_set() or slot.in_sequence:
                if schedule is not None and await self._wait_turn(schedule, slot):
                    return
                t0 = clock()
                try:
                    writer.write(slot.http())
                    await writer.drain()
                    t1 = clock()
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                                  REQUEST_TIMEOUT_S)
                    t2 = clock()
                    from naiad_perf.wire import parse_response_head

                    status, length = parse_response_head(head[:-4])
                    body = await reader.readexactly(length)
                except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                        HttpResponseError) as exc:
                    self.recorder.error(_describe(exc))
                    records.append((t0, clock(), 0, 0, False))
                    return
                if status != 200:
                    self.recorder.error(error_text(status, body))
                end = clock()
                records.append((t0, end, (t1 - t0) + (end - t2), 1, status == 200))
        finally:
            writer.close()

    async def _grpc_slot(self, slot: Slot, schedule: Schedule | None, stub: Any) -> None:
        import grpc

        clock, records = time.perf_counter_ns, self.recorder.records
        call = stub.ModelStreamInfer() if self.spec.streaming else None
        try:
            while not self.stopping.is_set() or slot.in_sequence:
                if schedule is not None and await self._wait_turn(schedule, slot):
                    return
                t0 = clock()
                request = slot.grpc()
                t1 = clock()
                count, ok = 1, True
                try:
                    if call is None:
                        await stub.ModelInfer(request, timeout=REQUEST_TIMEOUT_S)
                    else:
                        await call.write(request)
                        count = 0
                        while True:
                            answer = await call.read()
                            if answer is grpc.aio.EOF:
                                raise HttpResponseError("the server ended the stream")
                            if answer.error_message:
                                self.recorder.error(answer.error_message)
                                ok = False
                            count += bool(answer.infer_response.outputs)
                            if is_final(answer):
                                break
                except (grpc.RpcError, HttpResponseError) as exc:
                    self.recorder.error(_describe(exc))
                    records.append((t0, clock(), 0, 0, False))
                    return
                records.append((t0, clock(), t1 - t0, count, ok))
        finally:
            if call is not None:
                await call.done_writing()

    async def _wait_turn(self, schedule: Schedule, slot: Slot) -> bool:
        """Sleep until the schedule's next send time; True when the level ended meanwhile."""
        wait = schedule.take() - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        elif wait < -0.001:
            self.recorder.delayed += 1
        return self.stopping.is_set() and not slot.in_sequence

    async def _level(self, level: Level) -> None:
        schedule = Schedule(level) if level.rate else None
        numbers = level.slots[:RATE_SLOTS_PER_WORKER] if level.rate else level.slots
        slots = [self.slot(n) for n in numbers]
        if self.spec.protocol == "http":
            await asyncio.gather(*(self._http_slot(s, schedule) for s in slots))
            return
        import grpc
        from tritonclient.grpc import service_pb2_grpc

        async with grpc.aio.insecure_channel(self.spec.url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            await asyncio.gather(*(self._grpc_slot(s, schedule, stub) for s in slots))

    def start(self, level: Level) -> None:
        self.stopping.clear()
        self.future = asyncio.run_coroutine_threadsafe(self._level(level), self.loop)

    def stop(self) -> None:
        self.stopping.set()
        if self.future is not None:
            try:
                self.future.result(REQUEST_TIMEOUT_S)
            except Exception as exc:  # reported as an error of the run
                self.recorder.error(_describe(exc))
            self.future = None

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(REQUEST_TIMEOUT_S)
        super().close()


def worker_main(spec: LoadSpec, model: ModelInfo, worker: int, workers: int,
                conn: Any) -> None:
    """The process's body: answer the runner's commands until "exit"."""
    try:
        engine: Engine = (AsyncEngine if spec.async_mode else ThreadEngine)(
            spec, model, worker, workers)
    except Exception as exc:  # the runner reports it and stops
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    try:
        while True:
            command, argument = conn.recv()
            if command == "start":
                engine.start(argument)  # type: ignore[attr-defined]
                conn.send(("started", None))
            elif command == "collect":
                conn.send(("records", engine.recorder.take()))
            elif command == "stop":
                engine.stop()  # type: ignore[attr-defined]
                conn.send(("records", engine.recorder.take()))
            elif command == "exit":
                break
    finally:
        engine.close()
        conn.send(("closed", None))

"""naiad.tracing.manager: which requests are traced, and the thread that hands finished
traces to their sink. A recording sink stands where the trace file or OpenTelemetry
exporter would be; the manager, its sampling and its thread are the real ones."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from types import SimpleNamespace

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.tracing.manager import TraceManager
from naiad.tracing.settings import TIMESTAMPS, TraceConfig, TraceValues
from naiad.types import InferenceRequest, InferenceResponse

MODEL = SimpleNamespace(name="m", version=1, config=ModelConfig(name="m"))


class Recording:
    """A sink that keeps what the tracing thread gives it, and the thread it ran on."""

    def __init__(self) -> None:
        self.families: list = []
        self.threads: set[str] = set()
        self.retired: list = []
        self.closed_with: list | None = None

    def write(self, family) -> None:
        self.threads.add(threading.current_thread().name)
        self.families.append(family)

    def retire(self, state) -> None:
        self.retired.append(state)

    def idle(self) -> None:
        pass

    def close(self, states) -> None:
        self.closed_with = list(states)


def tracer(rate: int = 1, count: int = -1, level: int = TIMESTAMPS) -> tuple[TraceManager,
                                                                             Recording]:
    sink = Recording()
    config = TraceConfig(TraceValues(level=level, rate=rate, count=count), file="/dev/null")
    return TraceManager(config, sink=sink), sink


def request(name: str = "r") -> InferenceRequest:
    return InferenceRequest("m", 1, {}, id=name)


def run(manager: TraceManager, req: InferenceRequest, internal: bool = False):
    """Admit ``req`` as the core does, and finish it."""
    trace = manager.admit(MODEL, req, internal)
    if trace is not None:
        future: Future = Future()
        trace.watch(req, future)
        future.set_result(InferenceResponse())
    return trace


def test_a_traced_request_reaches_the_sink_on_the_tracing_thread():
    manager, sink = tracer()
    assert manager.active
    req = request()
    trace = run(manager, req)
    assert trace is not None and req.trace is trace
    assert manager.flush(5)
    assert len(sink.families) == 1 and sink.threads == {"naiad-tracing"}
    names = [name for name, _ in sink.families[0].traces[0].timestamps]
    assert names[:2] == ["REQUEST_START", "QUEUE_START"] and names[-1] == "REQUEST_END"
    manager.close()


def test_the_rate_samples_one_request_in_n_and_the_count_bounds_them():
    manager, _ = tracer(rate=2)
    traced = [run(manager, request(str(i))) is not None for i in range(6)]
    assert traced.count(True) == 3
    counted, _ = tracer(rate=1, count=2)
    assert [run(counted, request(str(i))) is not None for i in range(4)] == [
        True, True, False, False]
    manager.close()
    counted.close()


def test_a_models_own_calls_and_already_traced_requests_are_left_alone():
    manager, _ = tracer()
    assert run(manager, request(), internal=True) is None
    carried = request()
    carried.trace = object()  # made and watched by its caller
    assert manager.admit(MODEL, carried, False) is None
    manager.close()


def test_tracing_off_admits_nothing_and_a_model_setting_can_turn_it_on():
    manager, sink = tracer(level=0)
    assert not manager.active and run(manager, request()) is None
    manager.update("m", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    assert manager.active and run(manager, request()) is not None
    assert manager.flush(5) and len(sink.families) == 1
    manager.close()


def test_close_writes_what_was_handed_over_and_then_nothing():
    manager, sink = tracer()
    run(manager, request("before"))
    manager.close()
    assert len(sink.families) == 1 and sink.closed_with is not None
    run(manager, request("after"))
    assert len(sink.families) == 1

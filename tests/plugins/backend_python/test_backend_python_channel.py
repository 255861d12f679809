"""Many batches in flight to one worker process: sent from several threads at once, small
ones inside their messages and large ones through the shared memory region (one at a time),
each answered with its own outputs."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from backend_python_helpers import context_for, instance_info, request, write_model

from naiad_backend_python import PythonBackend

IDENTITY_CONFIG = """
name: "{name}"
backend: "python"
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""

IDENTITY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                np.array(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()))])
                for r in requests]
"""


@pytest.fixture(params=["reader thread", "event loop"])
def loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop | None]:
    """Where the answers are read: a thread of the channel's own, or a running event loop
    (as in the server; sends then never block, what the socket cannot take is queued)."""
    if request.param == "reader thread":
        yield None
        return
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(10)
    running.close()


def test_concurrent_batches_of_every_size_get_their_own_answers(tmp_path, loop):
    model_dir = write_model(tmp_path, "echo", IDENTITY_PY, IDENTITY_CONFIG)
    # A small region, so that large batches grow it, overflow it and wait for it.
    backend = PythonBackend({"shm-default-byte-size": "65536", "shm-growth-byte-size": "65536",
                             "shm-max-byte-size": "1048576"})
    context = dataclasses.replace(context_for(model_dir), loop=loop)
    instance = backend.create_instance(context, instance_info("echo"))
    sizes = [4, 100, 20_000, 70_000, 300_000]  # elements: inline, region, past the region

    def one(i: int) -> bool:
        data = np.arange(sizes[i % len(sizes)], dtype=np.float32) + i
        [response] = instance.execute([request("echo", {"INPUT0": data})])
        assert response.error is None, response.error
        np.testing.assert_array_equal(response.outputs[0].data, data)
        return True

    try:
        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(one, range(200)))
        assert instance.in_flight == 0
    finally:
        instance.close()


@contextlib.contextmanager
def bare_channel(loop: asyncio.AbstractEventLoop | None) -> Iterator[tuple[Any, Any]]:
    """A channel reading on ``loop`` (None: its own thread), and the worker's end of its
    socket for the test to speak as the worker: no process, no region."""
    from naiad_backend_python.isolated.channel import WorkerChannel
    from naiad_backend_python.isolated.regions import RegionPolicy
    from naiad_backend_python.stub import naiad_stub_wire as wire

    server_end, worker_end = socket.socketpair()
    channel = WorkerChannel(wire.Connection(server_end), "m", "m_0",
                            RegionPolicy("/nonexistent", 0, 1, 0, 1 << 20))
    worker = wire.Connection(worker_end)
    channel.start_reading(loop)
    try:
        yield channel, worker
    finally:
        worker.close()
        channel.close()


def wait_for(results: list[object], count: int, timeout_s: float = 10.0) -> None:
    """Until ``results`` (filled from the channel's reader) holds ``count`` items, or
    ``timeout_s`` passes (the test's assertions then say what is missing)."""
    deadline = time.monotonic() + timeout_s
    while len(results) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_stray_or_broken_answer_is_logged_and_the_channel_keeps_reading(caplog):
    """A worker speaking out of turn (an answer to no batch, an answer that cannot be read)
    loses only that message: later batches are still answered."""
    from naiad.errors import InferenceServerError

    results: list[object] = []
    with bare_channel(None) as (channel, worker):
        channel.submit([request("m", {"INPUT0": np.ones(2, np.float32)})], results.append)
        header, _, _ = worker.receive()
        worker.send({"op": "result", "id": 12345, "responses": []})  # no such batch
        worker.send({"op": "result", "id": header["id"], "responses": [  # unreadable
            {"outputs": [["OUT", "FP32", [2], "p", 0, 8]], "error": None}]})
        channel.submit([request("m", {"INPUT0": np.ones(2, np.float32)})], results.append)
        header, _, _ = worker.receive()
        out = np.arange(2, dtype=np.float32)
        worker.send({"op": "result", "id": header["id"], "responses": [
            {"outputs": [["OUT", "FP32", [2], "p", 0, 8]], "error": None}]},
            [memoryview(out.view(np.uint8))])
        wait_for(results, 2)
        broken, good = results
        assert isinstance(broken, InferenceServerError) and "unreadable answer" in broken.message
        np.testing.assert_array_equal(good[0].outputs[0].data, out)
        assert "not in flight" in caplog.text


def test_plain_results_read_on_the_event_loop_answer_as_the_general_way(caplog, loop):
    """On the event loop a plain result (the binary layout: outputs, no parameters, error or
    failure) is read without its dict (``WorkerChannel._plain_result``); on the reader
    thread it takes the dict. Either way: a stray one is logged and ignored, an unreadable
    one fails its batch, a good one answers with its outputs, and the channel keeps
    reading."""
    from naiad.errors import InferenceServerError
    from naiad_backend_python.stub import naiad_stub_wire as wire

    def plain(batch: int, *outputs: list) -> dict:
        header = {"op": "result", "id": batch, "responses": [
            {"outputs": list(tensors), "parameters": None, "error": None}
            for tensors in outputs]}
        assert wire.is_plain_result(wire.encode_header(header))  # it travels binary
        return header

    results: list[object] = []
    with bare_channel(loop) as (channel, worker):
        channel.submit([request("m", {"INPUT0": np.ones(2, np.float32)})], results.append)
        header, _, _ = worker.receive()
        worker.send(plain(12345))  # no such batch
        worker.send(plain(header["id"], [["OUT", "FP32", [2], "p", 0, 8]]))  # no payload
        channel.submit([request("m", {"INPUT0": np.ones(2, np.float32)})], results.append)
        header, _, _ = worker.receive()
        out = np.arange(4, dtype=np.float32)
        worker.send(plain(header["id"], [["OUT", "FP32", [2], "p", 0, 8],
                                         ["EMPTY", "FP32", [0], "p", 8, 0]],
                          [["OUT", "FP32", [1, 2], "p", 8, 8]]),
                    [memoryview(out.view(np.uint8))])
        wait_for(results, 2)
        broken, good = results
        assert isinstance(broken, InferenceServerError) and "unreadable answer" in broken.message
        assert "outside the message payload" in broken.message
        first, second = good
        assert [t.name for t in first.outputs] == ["OUT", "EMPTY"]
        np.testing.assert_array_equal(first.outputs[0].data, out[:2])
        assert first.outputs[1].data.shape == (0,) and first.parameters == {}
        np.testing.assert_array_equal(second.outputs[0].data, out[2:].reshape(1, 2))
        assert first.error is None and second.error is None
        assert "batch 12345, which is not in flight" in caplog.text
        assert channel.in_flight == 0


def _sent_frame(sock: socket.socket) -> bytes:
    """The bytes of the one frame waiting on ``sock`` (the worker's end)."""
    from naiad_backend_python.stub import naiad_stub_wire as wire

    data = b""
    while len(data) < wire.PREFIX_SIZE:
        data += sock.recv(1 << 20)
    head_size, payload_size = wire.unpack_prefix(data, 0)
    while len(data) < wire.PREFIX_SIZE + head_size + payload_size:
        data += sock.recv(1 << 20)
    return data


@pytest.mark.parametrize("case", ["one FP32 input", "inputs of three datatypes",
                                  "outputs asked for", "an id the binary layout cannot hold",
                                  "parameters", "an empty tensor", "a cancellation"])
def test_one_plain_request_is_sent_as_the_general_way_sends_it(case, monkeypatch):
    """A batch of one plain request takes a shorter way through the channel
    (``WorkerChannel._submit_one``); the worker gets the very bytes the general way sends
    for it: binary header, JSON when a field does not fit the layout, inline tensors, and
    the message that tells it the client cancelled."""
    from naiad.types import Cancellation
    from naiad_backend_python.isolated.channel import WorkerChannel
    from naiad_backend_python.isolated.regions import RegionPolicy
    from naiad_backend_python.stub import naiad_stub_wire as wire

    inputs: dict[str, object] = {"INPUT0": np.arange(6, dtype=np.float32).reshape(2, 3)}
    kwargs: dict[str, object] = {}
    if case == "inputs of three datatypes":
        inputs = {"A": np.arange(4, dtype=np.int64),
                  "B": np.array([b"x", b"yz"], dtype=np.object_),
                  "C": np.ones((1, 2), np.float16)}
    elif case == "outputs asked for":
        kwargs = {"outputs": ["OUTPUT1", "OUTPUT0"], "id": "req-7"}
    elif case == "an id the binary layout cannot hold":
        kwargs = {"id": "x" * 70_000}
    elif case == "parameters":
        kwargs = {"parameters": {"p": 1}}
    elif case == "an empty tensor":
        inputs = {"INPUT0": np.zeros((0, 4), np.float32)}

    frames = []
    for general in (False, True):
        server_end, worker_end = socket.socketpair()
        channel = WorkerChannel(wire.Connection(server_end), "m", "m_0",
                                RegionPolicy("/nonexistent", 0, 1, 0, 1 << 20))
        if general:
            monkeypatch.setattr(channel, "_submit_one", lambda request, done: False)
        channel.start_reading(None)
        try:
            sent = request("m", inputs, **kwargs)  # type: ignore[arg-type]
            if case == "a cancellation":
                sent.cancellation = Cancellation()
            channel.submit([sent], lambda result: None)
            frames.append(_sent_frame(worker_end))
            if sent.cancellation is not None:
                sent.cancellation.cancel()
                frames[-1] += _sent_frame(worker_end)
            assert channel.in_flight == 1
        finally:
            worker_end.close()
            channel.close()
    shorter, general_way = frames
    assert shorter == general_way
    head_size, _ = wire.unpack_prefix(shorter, 0)
    header = wire.decode_header(shorter[wire.PREFIX_SIZE:wire.PREFIX_SIZE + head_size])
    assert header["op"] == "execute" and header["out"] is None
    assert [i[3] for i in header["requests"][0]["inputs"]] == ["p"] * len(inputs)


def test_a_request_for_the_region_still_takes_the_general_way(monkeypatch):
    """Tensors of at least shm-inline-max-byte-size go through the region, which only the
    general way handles: the shorter way declines them."""
    from naiad_backend_python.isolated.channel import WorkerChannel
    from naiad_backend_python.isolated.regions import RegionPolicy
    from naiad_backend_python.stub import naiad_stub_wire as wire

    server_end, worker_end = socket.socketpair()
    channel = WorkerChannel(wire.Connection(server_end), "m", "m_0",
                            RegionPolicy("/dev/shm", 1 << 16, 1 << 16, 1 << 20, 1024))
    declined = []
    shorter = channel._submit_one

    def watched(request_, done):
        taken = shorter(request_, done)
        declined.append(not taken)
        return taken

    monkeypatch.setattr(channel, "_submit_one", watched)
    channel.start_reading(None)
    worker = wire.Connection(worker_end)
    try:
        channel.submit([request("m", {"INPUT0": np.ones(1024, np.float32)})], lambda r: None)
        header, _payload, fds = worker.receive()
        wire.close_fds(fds)
        assert declined == [True]
        assert header["out"] is not None  # the region holds the outputs
        assert [i[3] for i in header["requests"][0]["inputs"]] == ["s"]
    finally:
        worker.close()
        channel.close()

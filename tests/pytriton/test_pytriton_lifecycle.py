"""Triton() from naiad.pytriton end to end: naiad's server started in the program's process
tree on the ports TritonConfig names, several kinds of callables bound (one per instance,
async, an async generator streaming over gRPC and generate_stream, @sample with
@triton_context, request parameters and forwarded headers), PyTriton's clients over HTTP and
gRPC, the model's statistics, and stop() leaving no process, socket or workspace."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from naiad.pytriton.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
)
from naiad.pytriton.client.exceptions import (
    PyTritonClientInferenceServerError,
    PyTritonClientModelDoesntSupportBatchingError,
)
from naiad.pytriton.decorators import batch, sample, triton_context
from naiad.pytriton.model_config import (
    DeviceKind,
    DynamicBatcher,
    ModelConfig,
    ModelWarmup,
    Tensor,
    WarmupInput,
)
from naiad.pytriton.triton import Triton, TritonConfig
from naiad.testing import free_port


def _add_sub(offset: float):
    @batch
    def infer(a, b):
        return {"add": a + b + offset, "sub": a - b + offset}
    return infer


async def _double(requests):
    await asyncio.sleep(0)
    return [{"doubled": request["x"] * 2} for request in requests]


@batch
async def _count_up(n):
    if int(n[0][0]) < 0:  # one response, then an error ends the stream
        yield {"i": np.zeros_like(n)}
        raise ValueError("a count must not be negative")
    for i in range(int(n[0][0])):
        await asyncio.sleep(0)
        yield {"i": np.full_like(n, i)}


@sample
@triton_context
def _describe(x, triton_context):
    config = triton_context.model_configs[_describe]
    if float(x[0]) < 0:
        raise ValueError("x must not be negative")
    return {"max_batch_size": np.array([config.max_batch_size], dtype=np.int32)}


def _scaled(requests):
    return [{"scaled": request["x"] * float(request.parameters["factor"])
             / float(request.parameters["header_divisor"])} for request in requests]


def _noting_calls(path: Path):
    def infer(requests):
        with open(path, "a") as notes:
            notes.write(f"{len(requests)} {requests[0]['x'].shape}\n")
        return [{"y": request["x"]} for request in requests]
    return infer


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children of any of its threads)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_triton_serves_bound_callables_and_stops_clean(tmp_path: Path) -> None:
    ports = {"http_port": free_port(), "grpc_port": free_port(), "metrics_port": free_port()}
    config = TritonConfig(http_address="127.0.0.1", grpc_address="127.0.0.1",
                          metrics_address="127.0.0.1", http_header_forward_pattern="header.*",
                          grpc_header_forward_pattern="header.*",
                          cache_config=["local,size=1048576"], **ports)
    workspace = tmp_path / "workspace"
    triton = Triton(config=config, workspace=workspace)
    f32 = np.float32
    triton.bind("AddSub", [_add_sub(0.0), _add_sub(0.0)],
                inputs=[Tensor(name="a", dtype=f32, shape=(-1,)),
                        Tensor(name="b", dtype=f32, shape=(-1,))],
                outputs=[Tensor(name="add", dtype=f32, shape=(-1,)),
                         Tensor(name="sub", dtype=f32, shape=(-1,))],
                config=ModelConfig(max_batch_size=16,
                                   batcher=DynamicBatcher(max_queue_delay_microseconds=100)),
                strict=True)
    triton.bind("Double", _double, inputs=[Tensor(name="x", dtype=np.int64, shape=(-1,))],
                outputs=[Tensor(name="doubled", dtype=np.int64, shape=(-1,))],
                config=ModelConfig(response_cache=True))
    triton.bind("CountUp", _count_up, inputs=[Tensor(name="n", dtype=np.int32, shape=(1,))],
                outputs=[Tensor(name="i", dtype=np.int32, shape=(1,))],
                config=ModelConfig(decoupled=True))
    triton.bind("Describe", _describe, inputs=[Tensor(name="x", dtype=f32, shape=(1,))],
                outputs=[Tensor(name="max_batch_size", dtype=np.int32, shape=(1,))],
                config=ModelConfig(batching=False))
    triton.bind("Scaled", _scaled, inputs=[Tensor(name="x", dtype=f32, shape=(-1,))],
                outputs=[Tensor(name="scaled", dtype=f32, shape=(-1,))])
    warm_calls = tmp_path / "warm-calls"
    triton.bind("Warm", _noting_calls(warm_calls),
                inputs=[Tensor(name="x", dtype=f32, shape=(2,))],
                outputs=[Tensor(name="y", dtype=f32, shape=(2,))],
                config=ModelConfig(max_batch_size=4, model_warmup=[ModelWarmup(
                    name="zeros", batch_size=3, count=2,
                    inputs={"x": WarmupInput(dtype=f32, shape=(2,), zero_data=True)})]))
    triton.run()
    # PyTriton's warmup: each warmup request through the callable before the model serves.
    assert warm_calls.read_text().splitlines() == ["1 (3, 2)", "1 (3, 2)"]
    http_url, grpc_url = f"http://127.0.0.1:{ports['http_port']}", \
        f"grpc://127.0.0.1:{ports['grpc_port']}"
    try:
        assert triton.is_alive()
        a, b = np.array([[1.0], [2.0]], f32), np.array([[2.0], [3.0]], f32)
        for url in (http_url, grpc_url):
            with ModelClient(url, "AddSub") as client:
                result = client.infer_batch(a, b)
                np.testing.assert_array_equal(result["add"], a + b)
                np.testing.assert_array_equal(result["sub"], a - b)
                assert client.model_config.instance_group == {DeviceKind.KIND_CPU: 2}
                assert client.model_config.batcher.max_queue_delay_microseconds == 100
        for url in (http_url, grpc_url):  # request parameters and forwarded headers
            with ModelClient(url, "Scaled") as client:
                result = client.infer_batch(np.ones((2, 1), f32), parameters={"factor": 6},
                                            headers={"header_divisor": "3"})
                assert result["scaled"].tolist() == [[2.0], [2.0]]
        with FuturesModelClient(http_url, "Double") as client:
            futures = [client.infer_sample(np.array([i], np.int64)) for i in range(4)]
            assert [int(f.result()["doubled"][0]) for f in futures] == [0, 2, 4, 6]

        async def use_asyncio_clients() -> tuple[dict, list[int]]:
            async with AsyncioModelClient(grpc_url, "Double") as client:
                doubled = await client.infer_batch(np.array([[5]], np.int64))
            async with AsyncioDecoupledModelClient(grpc_url, "CountUp") as client:
                counted = [int(r["i"][0]) async for r in
                           client.infer_sample(np.array([3], np.int32))]
            return doubled, counted

        doubled, counted = asyncio.run(use_asyncio_clients())
        assert int(doubled["doubled"][0][0]) == 10
        assert counted == [0, 1, 2]
        with DecoupledModelClient(grpc_url, "CountUp") as client:
            assert [int(r["i"][0][0]) for r in
                    client.infer_batch(np.array([[2]], np.int32))] == [0, 1]
            stream = client.infer_sample(np.array([-1], np.int32))
            assert int(next(stream)["i"][0]) == 0
            with pytest.raises(PyTritonClientInferenceServerError, match="must not be negative"):
                next(stream)
        # The same stream over HTTP: Triton's generate_stream (server-sent events).
        request = urllib.request.Request(
            f"http://127.0.0.1:{ports['http_port']}/v2/models/CountUp/generate_stream",
            data=json.dumps({"n": 3}).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            events = [json.loads(line[len(b"data: "):]) for line in answer.read().splitlines()
                      if line.startswith(b"data: ")]
        assert [event["i"] for event in events] == [0, 1, 2]
        with ModelClient(http_url, "Describe") as client:
            assert int(client.infer_sample(np.array([1.0], f32))["max_batch_size"][0]) == 0
            with pytest.raises(PyTritonClientModelDoesntSupportBatchingError):
                client.infer_batch(np.array([[1.0]], f32))
            with pytest.raises(PyTritonClientInferenceServerError, match="must not be negative"):
                client.infer_sample(np.array([-1.0], f32))
        # An ordinary naiad model: its statistics (a restricted API: the token opens it).
        stats = httpclient.InferenceServerClient(f"127.0.0.1:{ports['http_port']}")
        found = stats.get_inference_statistics(
            "AddSub", headers={"triton-access-token": triton.get_access_token()})
        assert int(found["model_stats"][0]["inference_stats"]["success"]["count"]) == 2
        # ... and the response cache (TritonConfig.cache_config, ModelConfig.response_cache)
        with ModelClient(http_url, "Double") as client:
            for _ in range(2):
                assert int(client.infer_sample(np.array([21], np.int64))["doubled"][0]) == 42
        found = stats.get_inference_statistics(
            "Double", headers={"triton-access-token": triton.get_access_token()})
        assert int(found["model_stats"][0]["inference_stats"]["cache_hit"]["count"]) >= 1
        stats.close()
        server_pid = triton._process.pid  # type: ignore[union-attr]
        processes = {server_pid} | _descendants(server_pid)
        assert len(processes) >= 5, processes  # the server and a worker per instance
    finally:
        triton.stop()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in processes) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in processes if Path(f"/proc/{pid}").exists()]
    assert not any(_listening(port) for port in ports.values())
    assert not workspace.exists()
    assert not [name for name in os.listdir("/dev/shm")
                if any(name.startswith(f"naiad-{pid}-") for pid in processes)]
    assert triton.stop() is False


@batch
def _pid(x):
    return {"pid": np.full(x.shape, os.getpid(), np.int64)}


@pytest.mark.long
@pytest.mark.parametrize("mode", ["isolated", "in_process"])
def test_the_callable_runs_where_naiad_runs_python_models(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Isolated (the default): in a worker process of the server; in_process: in the server."""
    if mode == "in_process":
        monkeypatch.setenv("NAIAD_PYTRITON_SERVE_ARGS",
                           "--backend-config=python,execution-mode=in_process")
    http_port = free_port()
    config = TritonConfig(http_address="127.0.0.1", grpc_address="127.0.0.1",
                          metrics_address="127.0.0.1", http_port=http_port,
                          grpc_port=free_port(), metrics_port=free_port())
    with Triton(config=config) as triton:
        triton.bind("Pid", _pid, inputs=[Tensor(name="x", dtype=np.int64, shape=(1,))],
                    outputs=[Tensor(name="pid", dtype=np.int64, shape=(1,))])
        server_pid = triton._process.pid  # type: ignore[union-attr]
        with ModelClient(f"127.0.0.1:{http_port}", "Pid") as client:
            answered = int(client.infer_sample(np.array([1]))["pid"][0])
        assert answered != os.getpid()
        if mode == "in_process":
            assert answered == server_pid
        else:
            assert answered in _descendants(server_pid)

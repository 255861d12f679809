"""Triton's qa/L0_shared_memory robustness cases, the parts tests/core lacks: system shared
memory regions unregistered while several requests that use them are in flight (input and
output regions, HTTP and gRPC), and register/unregister churn from several threads with
inferences in between. (A region truncated after registration, and one unregistered under a
single request held inside the model: tests/core/test_shm_hardening.py.)

Each request either succeeds with the right data where it asked for it, or fails cleanly
(HTTP 4xx, gRPC NOT_FOUND / INVALID_ARGUMENT) naming the region; the server stays alive,
keeps no descriptor of an unregistered region once its requests are done, and serves the
next good inference correctly. Requests are known to be in flight when the one-instance
batcher of ``sleepy_batched`` holds them (``nv_inference_pending_request_count``)."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from hardening_support import ANSWER_TIMEOUT_S, pending, wait_until
from tritonclient.utils import InferenceServerException

DATA = np.arange(4, dtype=np.float32)
NBYTES = DATA.nbytes
IN_FLIGHT = 3  # one executing, two queued behind it
CHURN_THREADS, CHURN_ROUNDS, READERS, READS = 3, 12, 2, 15
CLIENTS = {"http": httpclient, "grpc": grpcclient}
# What a clean refusal is: the region was not found, or is not usable for the request.
CLEAN = {"404", "400", "StatusCode.NOT_FOUND", "StatusCode.INVALID_ARGUMENT"}


class Regions:
    """System shared memory regions made for one test, registered on the server, each
    holding DATA at offset 0; unregistered and destroyed at the end."""

    def __init__(self, server) -> None:
        self.server = server
        self.handles: dict[str, object] = {}

    def make(self, size: int = 64, register: bool = True) -> str:
        name = f"h9-{uuid.uuid4().hex[:12]}"
        handle = shm.create_shared_memory_region(name, "/" + name, size)
        shm.set_shared_memory_region(handle, [DATA])
        self.handles[name] = handle
        if register:
            self.register(name, size)
        return name

    def register(self, name: str, size: int = 64) -> None:
        with httpclient.InferenceServerClient(self.server.http_url) as client:
            client.register_system_shared_memory(name, "/" + name, size)

    def unregister(self, name: str) -> None:
        with httpclient.InferenceServerClient(self.server.http_url) as client:
            client.unregister_system_shared_memory(name)

    def read(self, name: str, offset: int) -> np.ndarray:
        return shm.get_contents_as_numpy(self.handles[name], np.float32, [DATA.size],
                                         offset=offset)

    def close(self) -> None:
        for name, handle in self.handles.items():
            self.unregister(name)
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def regions(hardening_server) -> Iterator[Regions]:
    made = Regions(hardening_server)
    yield made
    made.close()


def infer(server, protocol: str, model: str, source: str, target: str | None = None,
          offset: int = 0) -> object:
    """One inference reading INPUT0 from region ``source``, writing OUTPUT0 to region
    ``target`` at ``offset`` (None: in the response). "ok", or the (status, message) of a
    refusal."""
    client_module = CLIENTS[protocol]
    shape = [1, DATA.size] if model == "sleepy_batched" else [DATA.size]
    tensor = client_module.InferInput("INPUT0", shape, "FP32")
    tensor.set_shared_memory(source, NBYTES)
    outputs = None
    if target is not None:
        output = (httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
                  if protocol == "http" else grpcclient.InferRequestedOutput("OUTPUT0"))
        output.set_shared_memory(target, NBYTES, offset=offset)
        outputs = [output]
    try:
        if protocol == "http":
            with httpclient.InferenceServerClient(
                    server.http_url, network_timeout=ANSWER_TIMEOUT_S) as client:
                result = client.infer(model, [tensor], outputs=outputs)
        else:
            with grpcclient.InferenceServerClient(server.grpc_url) as client:
                result = client.infer(model, [tensor], outputs=outputs,
                                      client_timeout=ANSWER_TIMEOUT_S)
    except InferenceServerException as exc:
        return exc.status(), exc.message()
    if target is None:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0").reshape(-1), DATA)
    return "ok"


def assert_clean(outcome: object, region: str) -> None:
    if outcome != "ok":
        status, message = outcome
        assert status in CLEAN and f"'{region}'" in message, outcome


def descriptors_to(pid: int, names: list[str]) -> list[str]:
    """The /dev/shm objects among ``names`` that process ``pid`` holds open."""
    held = []
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(entry)
        except OSError:  # closed meanwhile
            continue
        held += [name for name in names if target == f"/dev/shm/{name}"]
    return held


def assert_serving(server, regions: Regions) -> None:
    """Alive, and a good inference through shared memory is right."""
    assert server.process.poll() is None, server.log()[-3000:]
    source, target = regions.make(), regions.make()
    for protocol in CLIENTS:
        assert infer(server, protocol, "identity_fp32", source, target, 16) == "ok"
        np.testing.assert_array_equal(regions.read(target, 16), DATA)


@pytest.mark.parametrize("which", ["input", "output"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unregistering_a_region_while_requests_use_it(hardening_server, sleepy_batched,
                                                      regions, protocol, which):
    """L0_shared_memory test_unregister_shm_during_inference_multiple_req: IN_FLIGHT
    requests read one input region and write one output region (each at its own offset);
    with all of them in the server, one region is unregistered."""
    server = hardening_server
    source, target = regions.make(), regions.make(IN_FLIGHT * NBYTES)
    gone = source if which == "input" else target
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        futures = [pool.submit(infer, server, protocol, sleepy_batched, source, target,
                               index * NBYTES) for index in range(IN_FLIGHT)]
        wait_until(lambda: pending(server.metrics_port, sleepy_batched) == IN_FLIGHT - 1,
                   "the requests in flight")
        regions.unregister(gone)
        outcomes = [future.result(timeout=ANSWER_TIMEOUT_S) for future in futures]
    for index, outcome in enumerate(outcomes):
        assert_clean(outcome, gone)
        if outcome == "ok":  # its output is where it asked, whole
            np.testing.assert_array_equal(regions.read(target, index * NBYTES), DATA)
    if which == "input" or protocol == "grpc":
        # an input is read, and a gRPC output target held, when the request is decoded
        assert outcomes == ["ok"] * IN_FLIGHT, outcomes
    # A request made afterwards no longer finds the region.
    status, message = infer(server, protocol, sleepy_batched, source, target)
    assert status in ("404", "StatusCode.NOT_FOUND") and f"'{gone}'" in message
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert gone not in {r["name"] for r in client.get_system_shared_memory_status()}
    wait_until(lambda: not descriptors_to(server.process.pid, [gone]),
               f"the server closes '{gone}' once its requests are done")
    regions.register(gone, IN_FLIGHT * NBYTES if gone == target else 64)
    assert_serving(server, regions)


def test_register_unregister_churn_with_inferences(hardening_server, regions):
    """CHURN_THREADS threads each register, use and unregister a region of their own,
    CHURN_ROUNDS times, alternating HTTP and gRPC, while READERS threads read inputs from
    those regions, registered or not at that moment: every answer is right or refused
    naming the region."""
    server = hardening_server
    names = [regions.make(register=False) for _ in range(CHURN_THREADS)]
    sink = regions.make(READERS * NBYTES)  # the readers' outputs, one slot each
    failures: list[str] = []

    def churn(name: str) -> None:
        for round_ in range(CHURN_ROUNDS):
            regions.register(name)
            protocol = "http" if round_ % 2 else "grpc"
            outcome = infer(server, protocol, "identity_fp32", name, name, 32)
            if outcome != "ok":
                failures.append(f"{name} {protocol}: {outcome}")
            elif not np.array_equal(regions.read(name, 32), DATA):
                failures.append(f"{name} {protocol}: output {regions.read(name, 32)}")
            regions.unregister(name)

    def read(slot: int) -> None:
        for index in range(READS):
            name = names[index % len(names)]
            protocol = "grpc" if (slot + index) % 2 else "http"
            outcome = infer(server, protocol, "identity_fp32", name, sink, slot * NBYTES)
            try:
                assert_clean(outcome, name)
            except AssertionError as exc:
                failures.append(str(exc))

    workers: list[Callable[[], None]] = [lambda n=n: churn(n) for n in names]
    workers += [lambda s=s: read(s) for s in range(READERS)]
    threads = [threading.Thread(target=work) for work in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10 * ANSWER_TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads), "a churn thread hangs"
    assert not failures, failures[:5]
    with httpclient.InferenceServerClient(server.http_url) as client:
        listed = {r["name"] for r in client.get_system_shared_memory_status()}
    assert not listed & set(names), listed
    wait_until(lambda: not descriptors_to(server.process.pid, names),
               "the server closes every unregistered region")
    for name in names:  # registered again for the fixture to unregister
        regions.register(name)
    assert_serving(server, regions)

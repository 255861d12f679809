"""System shared memory that its owner changes underneath the server (issue 17, item 2).

A registered region whose file is truncated afterwards used to kill the server with SIGBUS
on the next inference that read it (the region was a mapping). Now every access checks the
live file size and goes through pread/pwrite, which cannot fault: a short file is refused
with INVALID_ARGUMENT naming the region, the span and the live size, even when the file
shrinks while it is read. Unregistering a region while a request that uses it runs (Triton's
L0_shared_memory) neither crashes nor corrupts: the request keeps the region it was given.

The unit tests drive naiad.shm in this process; the end-to-end tests drive a real
``naiad serve`` with the official clients and check that it is still alive afterwards.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from expect import rejected
from tritonclient.utils import InferenceServerException
from zoo import IDENTITY_PY, identity_config, write_model

from naiad.errors import Status
from naiad.shm import Region
from naiad.testing import ServerProcess, naiad_server

SECONDS = 1.0
KIB = 1024
REGION_SIZE = 64 * KIB
DATA = np.arange(1024, dtype=np.float32)  # 4 KiB
DATA_OFFSET = 8 * KIB  # where the tensor lies in the region: past 4 KiB, the page kept below


# --- the registry on its own ----------------------------------------------------------------


@pytest.fixture
def shm_file() -> Iterator[str]:
    """A 64 KiB object in /dev/shm; its key."""
    key = f"/naiad-hardening-{uuid.uuid4().hex}"
    with open("/dev/shm" + key, "wb") as f:
        f.write(bytes(range(256)) * (REGION_SIZE // 256))
    try:
        yield key
    finally:
        os.unlink("/dev/shm" + key)


def test_a_truncated_region_is_refused_naming_region_span_and_live_size(registry, shm_file):
    registry.register("r", shm_file, 0, REGION_SIZE)
    os.truncate("/dev/shm" + shm_file, 4 * KIB)
    what = "input 'X' of model 'm'"
    rejected(lambda: registry.read("r", DATA_OFFSET, 4 * KIB, what), what, "region 'r'",
             f"offset {DATA_OFFSET} + byte_size {4 * KIB}", f"now holds {4 * KIB}")
    rejected(lambda: registry.write("r", DATA_OFFSET, 4 * KIB, b"x" * 16, what), what,
             "region 'r'", f"now holds {4 * KIB}")
    assert os.stat("/dev/shm" + shm_file).st_size == 4 * KIB  # a refused write adds nothing
    # What is still in the file can still be read, and all of it once it grows back.
    assert registry.read("r", 0, 4, what) == bytes([0, 1, 2, 3])
    os.truncate("/dev/shm" + shm_file, REGION_SIZE)
    assert len(registry.read("r", DATA_OFFSET, 4 * KIB, what)) == 4 * KIB


def test_the_region_offset_counts_against_the_live_size(registry, shm_file):
    registry.register("r", shm_file, 32 * KIB, 16 * KIB)
    os.truncate("/dev/shm" + shm_file, 40 * KIB)
    assert len(registry.read("r", 0, 8 * KIB, "t")) == 8 * KIB
    rejected(lambda: registry.read("r", 4 * KIB, 8 * KIB, "t"), "region 'r'",
             f"needs {44 * KIB} bytes", f"now holds {40 * KIB}")


def test_an_output_target_outlives_unregistering(registry, shm_file):
    registry.register("out", shm_file, 0, REGION_SIZE)
    target = registry.target("out", 16, 4, "output 'Y' of model 'm'")
    registry.unregister_all()
    assert registry.status() == []
    target.write(16, 4, b"abcd", "output 'Y' of model 'm'")  # the request in flight
    with open("/dev/shm" + shm_file, "rb") as f:
        assert f.read()[16:20] == b"abcd"
    rejected(lambda: registry.target("out", 16, 4, "output 'Y' of model 'm'"),
             "'out' is not registered", status=Status.NOT_FOUND)


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_the_descriptor_is_closed_once_nothing_holds_the_region(registry, shm_file):
    before = open_descriptors()
    registry.register("r", shm_file, 0, REGION_SIZE)
    target: Region | None = registry.target("r", 0, 4, "t")
    assert len(open_descriptors() - before) == 1
    registry.unregister("r")
    assert len(open_descriptors() - before) == 1  # the target still needs it
    target = None
    assert target is None and open_descriptors() - before == set()


def test_a_key_that_is_not_a_regular_file_is_refused(registry):
    key = f"/naiad-hardening-fifo-{uuid.uuid4().hex}"
    os.mkfifo("/dev/shm" + key)
    try:
        rejected(lambda: registry.register("r", key, 0, 4), "region 'r'", "not a shared "
                 "memory object")
    finally:
        os.unlink("/dev/shm" + key)


# --- a real server ----------------------------------------------------------------------------

# Runs until a file named "release" appears in the folder given by its "gate" parameter (at
# most 30 s), after creating "started" there: the test knows the request is inside the model.
GATED_PY = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.gate = config["parameters"]["gate"]["string_value"]

    def execute(self, requests):
        open(os.path.join(self.gate, "started"), "w").close()
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(self.gate, "release")):
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, gate: Path) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("shm-hardening-repo")
    write_model(repo, "identity_fp32", identity_config("identity_fp32", "TYPE_FP32"),
                IDENTITY_PY)
    config = identity_config("gated", "TYPE_FP32") + (
        f'parameters {{ key: "gate" value {{ string_value: "{gate}" }} }}\n')
    write_model(repo, "gated", config, GATED_PY)
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


@pytest.fixture
def region(server: ServerProcess) -> Iterator[Callable[[], tuple[str, str]]]:
    """``make()``: a fresh 64 KiB region holding DATA at DATA_OFFSET, registered on the
    server; (its name, its /dev/shm path). Unregistered and removed afterwards."""
    made = []

    def make() -> tuple[str, str]:
        name = f"hardening-{uuid.uuid4().hex[:10]}"
        handle = shm.create_shared_memory_region(name, "/" + name, REGION_SIZE)
        made.append((name, handle))
        shm.set_shared_memory_region(handle, [DATA], offset=DATA_OFFSET)
        with httpclient.InferenceServerClient(server.http_url) as client:
            client.register_system_shared_memory(name, "/" + name, REGION_SIZE)
        return name, "/dev/shm/" + name

    yield make
    with httpclient.InferenceServerClient(server.http_url) as client:
        for name, handle in made:
            client.unregister_system_shared_memory(name)
            shm.destroy_shared_memory_region(handle)


def grpc_infer(server: ServerProcess, name: str, model: str = "identity_fp32",
               output_offset: int | None = None) -> grpcclient.InferResult:
    inputs = [grpcclient.InferInput("INPUT0", [DATA.size], "FP32")]
    inputs[0].set_shared_memory(name, DATA.nbytes, offset=DATA_OFFSET)
    outputs = None
    if output_offset is not None:
        outputs = [grpcclient.InferRequestedOutput("OUTPUT0")]
        outputs[0].set_shared_memory(name, DATA.nbytes, offset=output_offset)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        return client.infer(model, inputs, outputs=outputs, client_timeout=30)


def http_infer(server: ServerProcess, name: str) -> httpclient.InferResult:
    inputs = [httpclient.InferInput("INPUT0", [DATA.size], "FP32")]
    inputs[0].set_shared_memory(name, DATA.nbytes, offset=DATA_OFFSET)
    with httpclient.InferenceServerClient(server.http_url, network_timeout=30) as client:
        return client.infer("identity_fp32", inputs)


def assert_alive(server: ServerProcess) -> None:
    assert server.process is not None and server.process.poll() is None, server.log()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_server_live(client_timeout=10)


def test_truncated_input_region_is_invalid_argument_on_both_protocols(server, region):
    name, path = region()
    np.testing.assert_array_equal(grpc_infer(server, name).as_numpy("OUTPUT0"), DATA)
    os.truncate(path, 4 * KIB)
    with pytest.raises(InferenceServerException) as info:
        grpc_infer(server, name)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    for fragment in (f"region '{name}'", f"offset {DATA_OFFSET} + byte_size {DATA.nbytes}",
                     f"now holds {4 * KIB}", "model 'identity_fp32'"):
        assert fragment in info.value.message(), info.value.message()
    with pytest.raises(InferenceServerException) as info:
        http_infer(server, name)
    assert info.value.status() == "400" and f"now holds {4 * KIB}" in info.value.message()
    assert_alive(server)


def test_truncated_output_region_is_invalid_argument(server, region):
    name, path = region()
    os.truncate(path, DATA_OFFSET + DATA.nbytes)  # the input is whole, the output place gone
    with pytest.raises(InferenceServerException) as info:
        grpc_infer(server, name, output_offset=32 * KIB)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "output 'OUTPUT0'" in info.value.message() and "now holds" in info.value.message()
    assert os.stat(path).st_size == DATA_OFFSET + DATA.nbytes
    assert_alive(server)


def test_a_file_shrinking_while_requests_read_it_never_kills_the_server(server, region):
    """The race no check can close for a mapping: the size changes between the check and
    the read. Bounded: 150 requests against a thread toggling the size."""
    name, path = region()
    stop = threading.Event()

    def toggle() -> None:
        while not stop.is_set():
            os.truncate(path, 0)
            os.truncate(path, REGION_SIZE)

    toggler = threading.Thread(target=toggle, daemon=True)
    toggler.start()
    answers: dict[str, int] = {}
    try:
        for _ in range(150):
            try:
                grpc_infer(server, name)
                answers["ok"] = answers.get("ok", 0) + 1
            except InferenceServerException as exc:
                answers[exc.status()] = answers.get(exc.status(), 0) + 1
    finally:
        stop.set()
        toggler.join(10 * SECONDS)
    assert set(answers) <= {"ok", "StatusCode.INVALID_ARGUMENT"}, answers
    assert answers.get("StatusCode.INVALID_ARGUMENT"), answers  # the race was exercised
    assert_alive(server)


def wait_for(path: Path, timeout: float = 30 * SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_unregistering_during_inference_keeps_the_request_whole(server, region, gate):
    """Triton's L0_shared_memory test_unregister_shm_during_inference: the request in
    flight writes its output where it asked; later requests no longer find the region."""
    name, path = region()
    for marker in ("started", "release"):
        (gate / marker).unlink(missing_ok=True)
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(
        _capture(lambda: grpc_infer(server, name, "gated", output_offset=32 * KIB))))
    thread.start()
    try:
        wait_for(gate / "started")
        with httpclient.InferenceServerClient(server.http_url) as client:
            client.unregister_system_shared_memory()
            assert client.get_system_shared_memory_status() == []
    finally:
        (gate / "release").touch()
        thread.join(30 * SECONDS)
    (result,) = done
    assert isinstance(result, grpcclient.InferResult), result
    with open(path, "rb") as f:
        f.seek(32 * KIB)
        np.testing.assert_array_equal(np.frombuffer(f.read(DATA.nbytes), np.float32), DATA)
    with pytest.raises(InferenceServerException) as info:
        grpc_infer(server, name)
    assert info.value.status() == "StatusCode.NOT_FOUND" and name in info.value.message()
    assert_alive(server)


def test_unregistering_during_an_http_inference_never_fails_it_uncleanly(server, region,
                                                                         gate):
    """Over HTTP the request either completes as over gRPC or, if the frontend looks its
    output region up again when it answers, is refused NOT_FOUND naming the region: never a
    5xx, never a write elsewhere."""
    name, path = region()
    for marker in ("started", "release"):
        (gate / marker).unlink(missing_ok=True)
    inputs = [httpclient.InferInput("INPUT0", [DATA.size], "FP32")]
    inputs[0].set_shared_memory(name, DATA.nbytes, offset=DATA_OFFSET)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    outputs[0].set_shared_memory(name, DATA.nbytes, offset=32 * KIB)
    done: list[object] = []

    def infer() -> object:
        with httpclient.InferenceServerClient(server.http_url, network_timeout=30) as client:
            return client.infer("gated", inputs, outputs=outputs)

    thread = threading.Thread(target=lambda: done.append(_capture(infer)))
    thread.start()
    try:
        wait_for(gate / "started")
        with httpclient.InferenceServerClient(server.http_url) as client:
            client.unregister_system_shared_memory(name)
    finally:
        (gate / "release").touch()
        thread.join(30 * SECONDS)
    (result,) = done
    with open(path, "rb") as f:
        f.seek(32 * KIB)
        written = np.frombuffer(f.read(DATA.nbytes), np.float32)
    if isinstance(result, InferenceServerException):
        assert result.status() == "404" and f"'{name}'" in result.message(), result
        assert not written.any()  # nothing half-written
    else:
        np.testing.assert_array_equal(written, DATA)
    assert_alive(server)


def _capture(call: Callable[[], object]) -> object:
    try:
        return call()
    except (InferenceServerException, grpc.RpcError) as exc:
        return exc

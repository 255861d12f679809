"""Python models in worker processes, end to end: ``naiad serve`` in a process of its own,
called with the official clients (tritonclient.http and tritonclient.grpc).

A crashing model (``os._exit``, a segfault) leaves the server and the other models serving
and comes back ready; nothing leaks over repeated crashes; instances are processes of their
own that run at the same time; shared memory falls back to the socket; shutdown ends a
worker stuck in ``execute``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, IDENTITY_PY, identity_config, write_model

from naiad.testing import ServerProcess, naiad_server

PROBE_PY = """
import ctypes
import json
import os
import subprocess
import sys
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            action = pb_utils.get_input_tensor_by_name(request, "ACTION").as_numpy()
            action = action.reshape(-1)[0].decode()
            info = {"pid": os.getpid(), "python": sys.executable, "start": time.time()}
            if action == "exit":
                os._exit(7)
            if action == "segv":
                ctypes.string_at(0)
            if action == "block":
                time.sleep(3600)
            if action == "spawn":
                info["child"] = subprocess.Popen(["sleep", "600"]).pid
            if action == "spin":  # pure-Python work, holding this process's GIL
                total = 0
                while time.time() - info["start"] < 0.5:
                    total += sum(range(1000))
            info["end"] = time.time()
            out = np.array([json.dumps(info).encode()], dtype=object)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("INFO", out)]))
        return responses
"""


def probe_config(name: str, count: int = 1, mode: str = "") -> str:
    parameters = (f'parameters {{ key: "EXECUTION_MODE" value: {{ string_value: "{mode}" }} }}'
                  if mode else "")
    return f"""
name: "{name}"
backend: "python"
input [ {{ name: "ACTION", data_type: TYPE_STRING, dims: [ 1 ] }} ]
output [ {{ name: "INFO", data_type: TYPE_STRING, dims: [ 1 ] }} ]
instance_group [ {{ count: {count}, kind: KIND_CPU }} ]
{parameters}
"""


# Restarts come quickly here, so that the tests do not wait; the doubling stays visible.
FAST_RESTARTS = ("--backend-config", "python,worker-restart-delay-min-seconds=0.2",
                 "--backend-config", "python,worker-restart-delay-max-seconds=0.4")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("isolation")
    write_model(root, "probe", probe_config("probe"), PROBE_PY)
    write_model(root, "probe_pair", probe_config("probe_pair", count=2), PROBE_PY)
    write_model(root, "probe_inproc", probe_config("probe_inproc", mode="in_process"), PROBE_PY)
    write_model(root, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    write_model(root, "echo", identity_config("echo", "TYPE_FP32"), IDENTITY_PY)
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(repo), *FAST_RESTARTS) as process:
        yield process


Call = Callable[[str, str], dict]


@pytest.fixture(params=["http", "grpc"])
def call(request: pytest.FixtureRequest, server: ServerProcess) -> Call:
    """``call(model, action)``: the probe's INFO as a dict, over one protocol."""
    module = httpclient if request.param == "http" else grpcclient
    client = module.InferenceServerClient(
        server.http_url if request.param == "http" else server.grpc_url)

    def _call(model: str, action: str) -> dict:
        tensor = module.InferInput("ACTION", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([action.encode()], dtype=object))
        result = client.infer(model, [tensor])
        return json.loads(result.as_numpy("INFO")[0])

    return _call


def _http(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def _add_sub_works(server: ServerProcess) -> None:
    client = _http(server)
    a = np.array([1, 2, 3, 4], np.float32)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"),
              httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


def _eventually(check: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (InferenceServerException, AssertionError, OSError):
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout} s: {check}")
        time.sleep(0.05)


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])


def _restarts(server: ServerProcess, model: str) -> int:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read()
    for line in text.decode().splitlines():
        if line.startswith(f'naiad_instance_restarts_total{{model="{model}",'):
            return int(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no restart count for {model}")


# --- where the model runs -----------------------------------------------------------------


def test_each_instance_is_a_worker_process_of_the_server(call: Call,
                                                        server: ServerProcess) -> None:
    info = call("probe", "hello")
    assert server.process is not None
    assert info["pid"] != server.process.pid
    assert _parent_of(info["pid"]) == server.process.pid
    # The server's own interpreter: the model names no environment of its own.
    assert os.path.realpath(info["python"]) == os.path.realpath(sys.executable)


def test_in_process_mode_runs_the_model_in_the_server(call: Call, server: ServerProcess) -> None:
    assert server.process is not None
    assert call("probe_inproc", "hello")["pid"] == server.process.pid


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling classes only")
def test_a_worker_leaves_the_servers_batch_scheduling_class(call: Call,
                                                           server: ServerProcess) -> None:
    """The server runs in SCHED_BATCH (--sched-batch, the default); its workers, which
    inherit it, go back to the normal class: an instance woken while other processes keep
    the CPUs busy must not wait out their time slices (issue 26)."""
    assert server.process is not None
    pid = call("probe", "hello")["pid"]
    assert os.sched_getscheduler(server.process.pid) == os.SCHED_BATCH
    assert os.sched_getscheduler(pid) == os.SCHED_OTHER


def test_two_instances_are_two_processes_running_at_once(server: ServerProcess) -> None:
    """count: 2 gives two workers; two requests of pure-Python work run at the same time in
    them (their busy intervals overlap)."""
    results: list[dict] = []

    def one() -> None:
        client = _http(server)
        tensor = httpclient.InferInput("ACTION", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([b"spin"], dtype=object))
        results.append(json.loads(client.infer("probe_pair", [tensor]).as_numpy("INFO")[0]))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    first, second = results
    assert first["pid"] != second["pid"]
    assert first["start"] < second["end"] and second["start"] < first["end"]


# --- crashes ---------------------------------------------------------------------------


@pytest.mark.parametrize(("action", "how"), [("exit", "exited with code 7"),
                                             ("segv", "was killed by SIGSEGV")])
def test_a_crash_fails_its_request_and_the_model_comes_back(call: Call, server: ServerProcess,
                                                            action: str, how: str) -> None:
    before = call("probe", "hello")["pid"]
    restarts = _restarts(server, "probe")
    with pytest.raises(InferenceServerException) as info:
        call("probe", action)
    assert info.value.status() in ("503", "StatusCode.UNAVAILABLE")
    message = info.value.message()
    assert "model 'probe'" in message and f"(pid {before}) {how}" in message, message
    assert not _http(server).is_model_ready("probe")
    _add_sub_works(server)  # the other models serve meanwhile
    assert _http(server).is_server_live()
    _eventually(lambda: _http(server).is_model_ready("probe"))
    after = call("probe", "hello")["pid"]
    assert after != before
    assert _restarts(server, "probe") == restarts + 1


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found.update(int(p) for p in f.read().split())
    return found


def _shm_mappings(pid: int) -> int:
    with open(f"/proc/{pid}/maps") as f:
        return sum("/naiad-" in line for line in f)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


# A leak of one descriptor, child or mapping per crash shows after a few; the long run does 20.
@pytest.mark.parametrize("cycles", [6, pytest.param(20, marks=pytest.mark.long)])
def test_crash_cycles_leak_nothing(server: ServerProcess, cycles: int) -> None:
    """Child processes, descriptors and shared memory mappings of the server are back to
    where they were after repeated crashes (exits and SIGSEGVs in turn); what a model started
    dies with its worker."""
    assert server.process is not None
    spid = server.process.pid
    client = _http(server)

    def probe(action: str) -> dict:
        tensor = httpclient.InferInput("ACTION", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([action.encode()], dtype=object))
        return json.loads(client.infer("probe", [tensor]).as_numpy("INFO")[0])

    _eventually(lambda: client.is_model_ready("probe"))
    probe("hello")
    children, fds = _children(spid), len(os.listdir(f"/proc/{spid}/fd"))
    mappings = _shm_mappings(spid)
    grandchild = probe("spawn")["child"]
    for cycle in range(cycles):
        with pytest.raises(InferenceServerException):
            probe("segv" if cycle % 2 else "exit")
        _eventually(lambda: client.is_model_ready("probe"))
        probe("hello")
    assert not _alive(grandchild)
    # Other tests' client connections may have closed meanwhile: never more than before.
    assert len(_children(spid)) <= len(children)
    assert len(os.listdir(f"/proc/{spid}/fd")) <= fds
    assert _shm_mappings(spid) <= mappings
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"naiad-{spid}-")]


# --- shared memory ---------------------------------------------------------------------


def _echo_big(server: ServerProcess) -> None:
    data = np.arange(1 << 20, dtype=np.float32)  # 4 MiB each way
    for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        client = module.InferenceServerClient(url)
        tensor = module.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        np.testing.assert_array_equal(client.infer("echo", [tensor]).as_numpy("OUTPUT0"), data)


def test_tensors_cross_in_shared_memory(server: ServerProcess) -> None:
    _echo_big(server)
    assert "travel over the worker's socket" not in server.log()


def test_missing_shared_memory_falls_back_to_the_socket(repo: Path) -> None:
    """The documented way to force the fallback: a region folder that does not exist."""
    with naiad_server("--model-repository", str(repo), "--backend-config",
                      "python,shm-region-dir=/nonexistent/naiad") as process:
        _echo_big(process)
        log = process.log()
    assert "model 'echo' instance " in log and "no shared memory region of" in log
    assert "/nonexistent/naiad is missing" in log
    assert log.count("travel over the worker's socket") == 1  # one line, not one per request


def _can_mount_a_private_dev_shm() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               "mount -t tmpfs -o size=64k tmpfs /dev/shm"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _can_mount_a_private_dev_shm(),
                    reason="cannot make a private mount namespace here (unshare -m needs "
                           "CAP_SYS_ADMIN); test_missing_shared_memory_falls_back_to_the_socket "
                           "forces the fallback another way")
def test_a_dev_shm_too_small_for_the_tensors_still_serves(repo: Path) -> None:
    """/dev/shm of 64 KiB (a private mount in a mount namespace of the server's own)."""
    serve = [sys.executable, "-m", "naiad", "serve", "--http-address", "127.0.0.1",
             "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
             "--http-port", "{http_port}", "--grpc-port",
             "{grpc_port}", "--metrics-port", "{metrics_port}", "--model-repository",
             str(repo)]
    script = "mount -t tmpfs -o size=64k tmpfs /dev/shm && exec \"$@\""
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *serve]
    with ServerProcess(cmd) as process:
        _echo_big(process)
        log = process.log()
    assert "no shared memory region of" in log and "bytes free there" in log


# --- shutdown ----------------------------------------------------------------------------


def test_shutdown_ends_a_worker_stuck_in_execute(repo: Path) -> None:
    with naiad_server("--model-repository", str(repo), "--exit-timeout-secs", "1") as process:
        outcome: list[object] = []

        def blocked() -> None:
            client = _http(process)
            tensor = httpclient.InferInput("ACTION", [1], "BYTES")
            tensor.set_data_from_numpy(np.array([b"block"], dtype=object))
            try:
                client.infer("probe", [tensor])
                outcome.append("answered")
            except Exception as exc:  # the server ends the worker: an error, or a drop
                outcome.append(exc)
            finally:
                client.close()

        thread = threading.Thread(target=blocked, daemon=True)
        thread.start()
        time.sleep(1.0)  # the request is in the worker now
        assert process.process is not None
        process.signal(signal.SIGTERM)
        # Before workers were ended, this waited forever: the stop timeout's SIGKILL came.
        # Status 1: the shutdown had to end a request (docs/user-guide.md, "Shutdown").
        assert process.process.wait(process.stop_timeout) == 1
        thread.join(10)
        assert outcome and outcome[0] != "answered"
        assert "ending the instances that run them" in process.log()


# --- bad configurations ------------------------------------------------------------------


@pytest.fixture(scope="module")
def explicit_server(repo: Path) -> Iterator[ServerProcess]:
    """Nothing loaded at start, at most 4 instances a model: the bad loads below (each
    fails and leaves the model unloaded, so they share it)."""
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--max-instances-per-model", "4") as process:
        yield process


def _probe_config(**fields: object) -> str:
    """The JSON config of a Python model 'probe' (ACTION in, INFO out) with ``fields``."""
    return json.dumps({"backend": "python", **fields,
                       "input": [{"name": "ACTION", "data_type": "TYPE_STRING", "dims": [1]}],
                       "output": [{"name": "INFO", "data_type": "TYPE_STRING", "dims": [1]}]})


def test_instance_count_above_the_limit_fails_the_load(explicit_server: ServerProcess) -> None:
    process = explicit_server
    client = _http(process)
    config = _probe_config(instance_group=[{"count": 5}])
    with pytest.raises(InferenceServerException) as info:
        client.load_model("probe", config=config)
    assert info.value.status() == "400"
    assert "asks for 5 instances, more than the 4" in info.value.message()
    client.load_model("add_sub")  # the server keeps serving
    _add_sub_works(process)


def test_an_unknown_execution_mode_fails_the_load(explicit_server: ServerProcess) -> None:
    client = _http(explicit_server)
    config = _probe_config(parameters={"EXECUTION_MODE": {"string_value": "sideways"}})
    with pytest.raises(InferenceServerException) as info:
        client.load_model("probe", config=config)
    assert "EXECUTION_MODE is 'sideways', expected one of isolated, in_process" \
        in info.value.message()
    assert not client.is_model_ready("probe")


# --- a model using a framework, in both modes ---------------------------------------------

TORCH_PY = """
import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 2)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_numpy(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                                 .copy())
            with torch.no_grad():
                y = self.layer(x).numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses
"""


@pytest.fixture(scope="module")
def torch_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server with the torch model in each mode (linear_isolated, linear_in_process)."""
    pytest.importorskip("torch")
    repo = tmp_path_factory.mktemp("torch-modes")
    for mode in ("isolated", "in_process"):
        config = f"""
name: "linear_{mode}"
backend: "python"
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 3, 4 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 3, 2 ] }} ]
parameters {{ key: "EXECUTION_MODE" value: {{ string_value: "{mode}" }} }}
"""
        write_model(repo, f"linear_{mode}", config, TORCH_PY)
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


@pytest.mark.parametrize("mode", ["isolated", "in_process"])
def test_a_model_using_torch_serves_in_both_modes(torch_server: ServerProcess,
                                                  mode: str) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    expected_layer = torch.nn.Linear(4, 2)
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    with torch.no_grad():
        expected = expected_layer(torch.from_numpy(data)).numpy()
    for module, url in ((httpclient, torch_server.http_url), (grpcclient, torch_server.grpc_url)):
        client = module.InferenceServerClient(url)
        tensor = module.InferInput("INPUT0", [3, 4], "FP32")
        tensor.set_data_from_numpy(data)
        got = client.infer(f"linear_{mode}", [tensor]).as_numpy("OUTPUT0")
        np.testing.assert_allclose(got, expected, rtol=1e-6)

"""``naiad serve --frontend-processes N``: HTTP served by N processes for one engine that holds
every model (docs/design.md, "Processes"). The engine runs each forwarded request in the
same application as a single-process server, so these tests check what only the split can
break: one set of instances and statistics for every frontend, a batcher fed from two
frontends, model control seen by all, streams and limits through the bridge, shutdown, and a
frontend that dies."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, IDENTITY_PY, SLOW_PY, identity_config, write_model

from naiad.testing import ServerProcess, naiad_server

# Requests of one batch wait this long in the batcher for each other (generous: the batch
# must form whichever frontend each request came through, on a loaded CI machine).
BATCH_WAIT_US = 1_500_000

STREAM_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for i in range(3):
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUT", np.array([i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

STREAM_CONFIG = """
name: "stream"
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

# --grpc-stream-idle-timeout of the server: the engine's loop ends a stream idle that long.
IDLE_TIMEOUT_MS = 1000

BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                               "data": [1, 2, 3, 4]}]}).encode()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("frontends")
    write_model(root, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    write_model(root, "batched", identity_config("batched", "TYPE_FP32", 16, "4") + (
        f"dynamic_batching {{ max_queue_delay_microseconds: {BATCH_WAIT_US} }}\n"),
        IDENTITY_PY)
    write_model(root, "slow", identity_config("slow", "TYPE_FP32"), SLOW_PY)
    write_model(root, "stream", STREAM_CONFIG, STREAM_PY)
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(repo), "--frontend-processes", "2",
                      "--http-max-input-size", "65536", "--model-control-mode", "explicit",
                      "--load-model", "*", f"--grpc-stream-idle-timeout={IDLE_TIMEOUT_MS}"
                      ) as process:
        yield process


def frontend_pids(server: ServerProcess) -> list[int]:
    """The pids of the server's frontend processes."""
    assert server.process is not None
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rpartition(")")[2].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if parent == server.process.pid and b"naiad.frontends.bridge.frontend_main" in cmdline:
            found.append(int(entry))
    return sorted(found)


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _owner_of(connection: http.client.HTTPConnection, frontends: list[int]) -> int | None:
    """Which frontend process accepted ``connection`` (from /proc/net/tcp), or None."""
    assert connection.sock is not None
    client_port = connection.sock.getsockname()[1]
    inodes = {}
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == client_port:
                inodes[int(fields[9])] = True
    for pid in frontends:
        if inodes.keys() & _socket_inodes(pid):
            return pid
    return None


def _connections_on_every_frontend(server: ServerProcess, frontends: list[int]
                                   ) -> list[http.client.HTTPConnection]:
    """Open connections until every frontend holds at least one (each asked once, so it is
    accepted)."""
    owned: dict[int, list[http.client.HTTPConnection]] = {pid: [] for pid in frontends}
    spare = []
    for _ in range(64):
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        connection.request("GET", "/v2/health/live")
        assert connection.getresponse().read() == b""
        owner = _owner_of(connection, frontends)
        owned.get(owner, spare).append(connection)  # type: ignore[arg-type]
        if all(owned.values()):
            break
    for connection in spare:
        connection.close()
    assert all(owned.values()), f"connections reached only some frontends: {owned}"
    return [connection for group in owned.values() for connection in group]


def _status(connection: http.client.HTTPConnection, method: str, path: str) -> int:
    body = b"{}" if method == "POST" else None
    connection.request(method, path, body, {"Content-Type": "application/json"})
    answer = connection.getresponse()
    answer.read()
    return answer.status


def _stats(server: ServerProcess, model: str) -> dict:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats") as answer:
        return json.loads(answer.read())["model_stats"][0]


def _metric(server: ServerProcess, line_start: str) -> float:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric line starts with {line_start}")


def test_the_http_port_is_served_by_the_frontend_processes(server: ServerProcess) -> None:
    frontends = frontend_pids(server)
    assert len(frontends) == 2
    client = httpclient.InferenceServerClient(server.http_url)
    a = np.array([1, 2, 3, 4], np.float32)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"),
              httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    for binary in (False, True):
        result = client.infer("add_sub", inputs, outputs=[
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)
        assert result.as_numpy("OUTPUT0") is None  # only what was asked for
    with pytest.raises(Exception, match="unknown model"):
        client.infer("no_such_model", inputs)
    assert client.is_server_ready()


def test_one_batcher_batches_requests_from_both_frontends(server: ServerProcess) -> None:
    """Requests that reach the engine through different frontends wait in the same queue and
    run as one batch, larger than either frontend sent."""
    connections = _connections_on_every_frontend(server, frontend_pids(server))
    before = _stats(server, "batched")
    answers: list[int] = []

    def send(connection: http.client.HTTPConnection) -> None:
        connection.request("POST", "/v2/models/batched/infer", BODY)
        answers.append(connection.getresponse().status)

    threads = [threading.Thread(target=send, args=(c,)) for c in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == [200] * len(connections)
    after = _stats(server, "batched")
    assert after["inference_count"] - before["inference_count"] == len(connections)
    assert after["execution_count"] - before["execution_count"] == 1
    batch = [s for s in after["batch_stats"] if s["batch_size"] == len(connections)]
    assert batch and batch[0]["compute_infer"]["count"] >= 1
    for connection in connections:
        connection.close()


def test_a_client_that_leaves_withdraws_its_queued_request_through_the_bridge(
        server: ServerProcess) -> None:
    """A plain inference crosses as one INFER frame; the client's leaving, as DISCONNECT,
    takes it out of the batcher's queue before it runs, as in a single-process server."""
    before = _stats(server, "batched")
    with socket.create_connection(("127.0.0.1", server.http_port)) as sock:
        sock.sendall(b"POST /v2/models/batched/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
        time.sleep(0.3)  # it reached the batcher, which holds it for BATCH_WAIT_US
    time.sleep(BATCH_WAIT_US / 1e6 + 1.0)  # past the time its batch would have run
    after = _stats(server, "batched")
    assert after["execution_count"] == before["execution_count"]
    assert after["inference_count"] == before["inference_count"]
    # The frontends keep serving it.
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    connection.request("POST", "/v2/models/batched/infer", BODY)
    assert connection.getresponse().status == 200
    connection.close()


def test_statistics_and_one_metrics_scrape_count_every_frontends_requests(
        server: ServerProcess) -> None:
    connections = _connections_on_every_frontend(server, frontend_pids(server))
    line = 'nv_inference_request_success{model="add_sub",version="1"}'
    before_stats, before_metric = _stats(server, "add_sub"), _metric(server, line)
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]}]}).encode()
    for _ in range(5):
        for connection in connections:
            connection.request("POST", "/v2/models/add_sub/infer", body)
            assert connection.getresponse().read().startswith(b'{"model_name":"add_sub"')
    sent = 5 * len(connections)
    assert _stats(server, "add_sub")["inference_count"] - before_stats["inference_count"] == sent
    assert _metric(server, line) - before_metric == sent
    for connection in connections:
        connection.close()


def test_a_stream_and_the_body_limit_cross_the_bridge(server: ServerProcess) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    connection.request("POST", "/v2/models/stream/generate_stream", b'{"IN": [1]}')
    answer = connection.getresponse()
    assert answer.status == 200, answer.read()
    events = [json.loads(line[5:]) for line in answer.read().decode().splitlines()
              if line.startswith("data:")]
    assert [event["OUT"] for event in events] == [0, 1, 2]
    # Over --http-max-input-size (64 KiB here), in chunks the frontend forwards as they come.
    connection.request("POST", "/v2/models/add_sub/infer", b"[" + b" " * 100_000 + b"]")
    answer = connection.getresponse()
    assert answer.status == 413
    assert b"max-input-size" in answer.read().replace(b"_", b"-")
    connection.close()


def test_load_and_unload_are_seen_through_every_frontend(server: ServerProcess) -> None:
    connections = _connections_on_every_frontend(server, frontend_pids(server))
    connections[0].request("POST", "/v2/repository/models/add_sub/unload", b"{}",
                           {"Content-Type": "application/json"})
    assert connections[0].getresponse().read() == b""
    try:
        for connection in connections:
            assert _status(connection, "GET", "/v2/models/add_sub/ready") == 400
    finally:
        assert _status(connections[-1], "POST", "/v2/repository/models/add_sub/load") == 200
    for connection in connections:
        assert _status(connection, "GET", "/v2/models/add_sub/ready") == 200
        connection.close()


def test_a_frontend_that_dies_is_replaced_and_the_port_keeps_serving(
        server: ServerProcess) -> None:
    first = frontend_pids(server)
    os.kill(first[0], signal.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        now = frontend_pids(server)
        if len(now) == 2 and first[0] not in now:
            break
        time.sleep(0.1)
    assert len(frontend_pids(server)) == 2 and first[0] not in frontend_pids(server)
    for _ in range(6):
        with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready") as answer:
            assert answer.status == 200
    assert "starting another" in server.log()


def test_sigterm_drains_requests_in_every_frontend_then_ends_them(repo: Path) -> None:
    with naiad_server("--model-repository", str(repo), "--frontend-processes", "2",
                      "--load-model", "slow", "--model-control-mode", "explicit") as server:
        frontends = frontend_pids(server)
        connections = _connections_on_every_frontend(server, frontends)
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                                       "data": [1, 2, 3, 4]}]}).encode()
        answers: list[int] = []

        def send(connection: http.client.HTTPConnection) -> None:
            connection.request("POST", "/v2/models/slow/infer", body)
            answers.append(connection.getresponse().status)

        threads = [threading.Thread(target=send, args=(c,)) for c in connections]
        for thread in threads:
            thread.start()
        time.sleep(0.3)  # every request is in (the slow model takes 1 s each)
        server.signal(signal.SIGTERM)
        for thread in threads:
            thread.join(30)
        for connection in connections:
            connection.close()
        assert answers == [200] * len(connections)
        assert server.process is not None
        assert server.process.wait(30) == 0
        assert "did not stop" not in server.log()  # each frontend ended on SIGTERM, unkilled
        for pid in frontends:
            assert not os.path.exists(f"/proc/{pid}") or is_zombie(pid)


def is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("value", ["-1", "257"])
def test_a_frontend_count_out_of_range_is_refused(value: str) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "naiad", "serve", "--model-repository", "/x",
                           "--frontend-processes", value], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert "--frontend-processes must be from 0 to 256" in done.stderr


def test_hypercorn_with_frontend_processes_is_refused() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "naiad", "serve", "--model-repository", "/x",
                           "--frontend-processes", "2", "--http-server", "hypercorn"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--frontend-processes serves HTTP with uvicorn only" in done.stderr


# --- gRPC ---------------------------------------------------------------------------------


def test_grpc_is_served_by_the_frontend_processes_too(server: ServerProcess) -> None:
    """Every frontend binds the gRPC port (SO_REUSEPORT) and forwards each call: unary
    calls, errors with their status, and a stream, with the statistics in the engine."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    assert server.process is not None
    listening = {pid for pid in frontend_pids(server)
                 if _listens_on(pid, server.grpc_port)}
    assert listening == set(frontend_pids(server))
    assert not _listens_on(server.process.pid, server.grpc_port)

    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.is_server_live() and client.is_model_ready("add_sub")
    before = _stats(server, "add_sub")["inference_count"]
    a = np.array([1, 2, 3, 4], np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
              grpcclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    for _ in range(3):
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), 2 * a)
    assert _stats(server, "add_sub")["inference_count"] - before == 3
    with pytest.raises(InferenceServerException) as refused:
        client.infer("no_such_model", inputs)
    assert refused.value.status() == "StatusCode.NOT_FOUND"
    assert "no_such_model" in refused.value.message()

    responses: list = []
    stream_input = grpcclient.InferInput("IN", [1], "INT32")
    stream_input.set_data_from_numpy(np.array([1], np.int32))
    done = threading.Event()

    def collect(result, error) -> None:
        responses.append(error if error is not None else result.as_numpy("OUT")[0])
        if len(responses) == 3:
            done.set()

    client.start_stream(collect)
    client.async_stream_infer("stream", [stream_input])
    assert done.wait(30)
    client.stop_stream()
    assert responses == [0, 1, 2]
    client.close()


def test_a_grpc_stream_runs_on_the_engines_loop_through_the_frontends(
        server: ServerProcess) -> None:
    """naiad's gRPC server in a frontend sends ModelStreamInfer to the engine's event loop
    (frames.GRPC_STREAM): many requests answered in order, a refused one answered in the
    stream while the stream goes on, the statistics in the engine, no thread per stream in
    either process, and --grpc-stream-idle-timeout kept by the engine."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    assert server.process is not None
    engine = server.process.pid
    frontends = frontend_pids(server)
    threads = {pid: thread_count(pid) for pid in [engine, *frontends]}
    before = _stats(server, "add_sub")["inference_count"]

    def request(number: int, model: str = "add_sub") -> service_pb2.ModelInferRequest:
        message = service_pb2.ModelInferRequest(model_name=model, id=f"r{number}")
        for name in ("INPUT0", "INPUT1"):
            message.inputs.add(name=name, datatype="FP32", shape=[4])
            message.raw_input_contents.append(np.full(4, number, np.float32).tobytes())
        return message

    def one_then_wait(first: service_pb2.ModelInferRequest | None) -> Iterator:
        if first is not None:
            yield first
        release.wait(60)  # bounded: set as the test ends

    requests = [request(number) for number in range(40)]
    requests.insert(20, request(99, "no_such_model"))
    release = threading.Event()
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            answers = list(stub.ModelStreamInfer(iter(requests), timeout=60))
            # Open streams, each with one request answered: none holds a thread.
            held = [stub.ModelStreamInfer(one_then_wait(request(number)), timeout=60)
                    for number in range(12)]
            for call in held:
                assert next(call).error_message == ""
            for pid, count in threads.items():
                assert thread_count(pid) < count + 6, (pid, count)
            for call in held:
                call.cancel()
            # An idle stream is ended by the engine, naming the flag.
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as idle:
                list(stub.ModelStreamInfer(one_then_wait(None), timeout=60))
            waited = time.monotonic() - started
        finally:
            release.set()
    assert idle.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "--grpc-stream-idle-timeout" in (idle.value.details() or "")
    assert IDLE_TIMEOUT_MS / 1000 * 0.9 < waited < 30
    errors = [answer.error_message for answer in answers]
    assert "no_such_model" in errors.pop(20)
    assert errors == [""] * 40
    ok = [answer.infer_response for answer in answers if not answer.error_message]
    assert [response.id for response in ok] == [f"r{number}" for number in range(40)]
    for number, response in enumerate(ok):
        got = np.frombuffer(response.raw_output_contents[0], np.float32)
        np.testing.assert_array_equal(got, np.full(4, 2 * number, np.float32))
    assert _stats(server, "add_sub")["inference_count"] - before == 40 + 12


def thread_count(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError(f"no thread count for {pid}")


def _listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on TCP ``port`` (IPv4 or IPv6)."""
    inodes = _socket_inodes(pid)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if (fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port
                        and int(fields[9]) in inodes):
                    return True
    return False

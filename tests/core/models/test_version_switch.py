"""Zero lost requests while model versions change (issue 16, item 6).

Eight client threads (four over ``tritonclient.http``, four over ``tritonclient.grpc``) keep
two models busy while their versions change under them: three explicit reloads (one with a
config override) on an explicit-mode server, then a new version folder and a changed
config.pbtxt picked up by a polling server. Both models take a moment to load (the Python
model's ``initialize`` sleeps, both warm up), so requests keep arriving while the new
instances are being made, while the switch happens and while the old ones drain. Every
answer that is not a 200 is counted by what it said, the counts are printed, and there must
be none.

A second test holds a request in flight on a version (its ``execute`` waits for a file the
test writes) while a version policy change removes that version: the request must finish
on that version, and the new version serves before it does.

Every wait is bounded in count and time; none is a speed threshold.
"""

from __future__ import annotations

import json
import os
import re
import socket
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from naiad.testing import ServerProcess, naiad_server

onnx = pytest.importorskip("onnx")
pytest.importorskip("naiad_backend_onnx")
pytest.importorskip("naiad_backend_python")

# Client threads, and how they split between the protocols.
HTTP_CLIENTS = 4
GRPC_CLIENTS = 4
# Requests each phase must see answered (explicit reloads, then the poll switch): 2 000
# in all at least.
EXPLICIT_REQUESTS = 1200
POLL_REQUESTS = 800
# Requests answered between two switches, so that each switch happens under load.
BETWEEN_SWITCHES = 150
# Bounds, not thresholds: a phase that has not finished in this long fails the test; no
# client thread sends more than this many requests.
PHASE_LIMIT_S = 240.0
MAX_REQUESTS_PER_CLIENT = 20_000
CALL_TIMEOUT_S = 60.0

DATA = np.arange(4, dtype=np.float32)

# A Triton Python identity model that takes a moment to load: the window a switch must
# cover is real.
SLOW_INIT_PY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(0.3)

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""

WARMUP = """
model_warmup [ {
  name: "zeros" batch_size: 1 count: 2
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
} ]
"""


def model_config(name: str, backend: str, extra: str) -> str:
    """config.pbtxt of a model with INPUT0 and OUTPUT0 (FP32 [4]), then ``extra``."""
    return textwrap.dedent(f"""
        name: "{name}"
        backend: "{backend}"
        max_batch_size: 0
        input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
        output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
        """).lstrip() + textwrap.dedent(extra).lstrip()


def identity_config(name: str, backend: str, instances: int = 1) -> str:
    return model_config(name, backend, f"instance_group [ {{ count: {instances}, "
                                       f"kind: KIND_CPU }} ]\n" + WARMUP)


def onnx_identity() -> bytes:
    """FP32 [4] -> the same tensor, as an ONNX model's bytes."""
    helper = onnx.helper
    value = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
                              "identity", [value("INPUT0", onnx.TensorProto.FLOAT, [4])],
                              [value("OUTPUT0", onnx.TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=9)
    return model.SerializeToString()


def write_repository(repo: Path) -> None:
    """``slow_py`` (Python, initialize sleeps) and ``onnx_id`` (ONNX Runtime), version 1."""
    (repo / "slow_py" / "1").mkdir(parents=True)
    (repo / "slow_py" / "config.pbtxt").write_text(identity_config("slow_py", "python", 2))
    (repo / "slow_py" / "1" / "model.py").write_text(textwrap.dedent(SLOW_INIT_PY).lstrip())
    (repo / "onnx_id" / "1").mkdir(parents=True)
    (repo / "onnx_id" / "config.pbtxt").write_text(identity_config("onnx_id", "onnxruntime"))
    (repo / "onnx_id" / "1" / "model.onnx").write_bytes(onnx_identity())


@dataclass
class Traffic:
    """What the client threads saw: answers, failures by what they said, versions seen."""

    ok: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    versions: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def answered(self) -> int:
        with self.lock:
            return self.ok + sum(self.failures.values())

    def report(self, phase: str) -> str:
        with self.lock:
            lines = [f"{phase}: {self.ok} answered 200, "
                     f"{sum(self.failures.values())} not 200; versions seen {dict(self.versions)}"]
            lines += [f"  {count} x {what}" for what, count in self.failures.most_common()]
        return "\n".join(lines)


def http_call(server: ServerProcess) -> Callable[[str], str]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=CALL_TIMEOUT_S)
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(DATA)

    def call(model: str) -> str:
        result = client.infer(model, [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA)
        return f"{model} v{result.get_response()['model_version']}"
    return call


def grpc_call(server: ServerProcess) -> Callable[[str], str]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(DATA)

    def call(model: str) -> str:
        result = client.infer(model, [tensor], client_timeout=CALL_TIMEOUT_S)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA)
        return f"{model} v{result.get_response().model_version}"
    return call


def run_traffic(server: ServerProcess, switch: Callable[[Traffic], None], phase: str,
                at_least: int) -> Traffic:
    """Eight client threads send requests to both models (alternating) while ``switch``
    runs in this thread; they stop once ``switch`` returned and ``at_least`` requests were
    answered. Returns what they saw."""
    traffic = Traffic()
    stop = threading.Event()
    makers = [http_call] * HTTP_CLIENTS + [grpc_call] * GRPC_CLIENTS

    def client(index: int) -> None:
        call = makers[index](server)
        protocol = "http" if index < HTTP_CLIENTS else "grpc"
        for n in range(MAX_REQUESTS_PER_CLIENT):
            if stop.is_set():
                return
            model = ("slow_py", "onnx_id")[(n + index) % 2]
            try:
                seen = call(model)
            except InferenceServerException as exc:
                with traffic.lock:
                    traffic.failures[f"{protocol} {model}: {exc.status()} {exc.message()}"] += 1
                continue
            except Exception as exc:  # a wrong answer or a broken connection: counted too
                with traffic.lock:
                    traffic.failures[f"{protocol} {model}: {type(exc).__name__}: {exc}"] += 1
                continue
            with traffic.lock:
                traffic.ok += 1
                traffic.versions[seen] += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True)
               for i in range(HTTP_CLIENTS + GRPC_CLIENTS)]
    deadline = time.monotonic() + PHASE_LIMIT_S
    for thread in threads:
        thread.start()
    try:
        wait_for_answers(traffic, BETWEEN_SWITCHES, deadline, phase)
        switch(traffic)
        wait_for_answers(traffic, max(at_least - traffic.answered, BETWEEN_SWITCHES),
                         deadline, phase)
    finally:
        stop.set()
        for thread in threads:
            thread.join(CALL_TIMEOUT_S)
    print(traffic.report(phase))
    return traffic


def wait_for_answers(traffic: Traffic, count: int, deadline: float, phase: str) -> None:
    """Until ``count`` more requests are answered; fail past ``deadline``."""
    target = traffic.answered + count
    while traffic.answered < target:
        if time.monotonic() > deadline:
            pytest.fail(f"{phase}: {traffic.answered} of {target} requests answered within "
                        f"{PHASE_LIMIT_S} s\n{traffic.report(phase)}")
        time.sleep(0.05)


def wait_until(check: Callable[[], object], what: str, server: ServerProcess,
               deadline: float) -> None:
    while True:
        with suppress(InferenceServerException):
            if check():
                return
        if time.monotonic() > deadline:
            pytest.fail(f"not seen within {PHASE_LIMIT_S} s: {what}\n{server.log()[-4000:]}")
        time.sleep(0.1)


def config_override(name: str, backend: str, instances: int) -> str:
    """The JSON config override of a load, as tritonclient sends it."""
    return json.dumps({
        "name": name, "backend": backend, "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "instance_group": [{"count": instances, "kind": "KIND_CPU"}],
        "model_warmup": [{"name": "zeros", "batch_size": 1, "count": 2, "inputs": {
            "INPUT0": {"data_type": "TYPE_FP32", "dims": [4], "zero_data": True}}}],
    })


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    write_repository(tmp_path / "repo")
    return tmp_path / "repo"


def test_no_request_is_lost_across_reloads_and_a_poll_switch(repo: Path, tmp_path: Path):
    totals = Counter[str]()

    # --- three explicit reloads under load (the last with config overrides) -------------
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=slow_py", "--load-model=onnx_id") as server:
        control = httpclient.InferenceServerClient(server.http_url,
                                                   network_timeout=PHASE_LIMIT_S)

        def reload_three_times(traffic: Traffic) -> None:
            for round_ in range(3):
                overrides = {"slow_py": config_override("slow_py", "python", 1),
                             "onnx_id": config_override("onnx_id", "onnxruntime", 2)} \
                    if round_ == 2 else {}
                for model in ("slow_py", "onnx_id"):
                    control.load_model(model, config=overrides.get(model))
                    assert control.is_model_ready(model)
                wait_for_answers(traffic, BETWEEN_SWITCHES, time.monotonic() + PHASE_LIMIT_S,
                                 f"explicit reload {round_ + 1}")

        explicit = run_traffic(server, reload_three_times, "explicit reloads",
                               EXPLICIT_REQUESTS)
        assert control.get_model_config("onnx_id")["instance_group"][0]["count"] == 2
        # Each model was loaded at start and three times more, and the versions it replaced
        # were unloaded once they had drained.
        wait_until(lambda: server.log().count("unloaded model 'slow_py' version 1") == 3,
                   "the three replaced versions of 'slow_py' unloaded", server,
                   time.monotonic() + PHASE_LIMIT_S)
        assert len(re.findall(r"(?<!un)loaded model 'slow_py' version 1", server.log())) == 4
    totals.update(explicit.failures)

    # --- a polling server: a new version folder and a changed config.pbtxt -------------
    with naiad_server("--model-repository", str(repo), "--model-control-mode=poll",
                      "--repository-poll-secs=1") as server:
        watch = httpclient.InferenceServerClient(server.http_url)

        def switch_by_polling(traffic: Traffic) -> None:
            deadline = time.monotonic() + PHASE_LIMIT_S
            staging = tmp_path / "staging"
            (staging / "2").mkdir(parents=True)
            (staging / "2" / "model.py").write_text(textwrap.dedent(SLOW_INIT_PY).lstrip())
            os.rename(staging / "2", repo / "slow_py" / "2")
            (staging / "config.pbtxt").write_text(identity_config("onnx_id", "onnxruntime", 2))
            os.replace(staging / "config.pbtxt", repo / "onnx_id" / "config.pbtxt")
            wait_until(lambda: watch.get_model_metadata("slow_py")["versions"] == ["2"],
                       "'slow_py' serving version 2 only", server, deadline)
            wait_until(lambda: watch.get_model_config("onnx_id")["instance_group"][0]["count"]
                       == 2, "'onnx_id' with its new config", server, deadline)

        polled = run_traffic(server, switch_by_polling, "poll switch", POLL_REQUESTS)
        # Both versions of slow_py answered: the switch happened under load.
        assert polled.versions["slow_py v1"] and polled.versions["slow_py v2"], \
            polled.report("poll switch")
        wait_until(lambda: "unloaded model 'slow_py' version 1" in server.log(),
                   "the old version 1 of 'slow_py' unloaded", server,
                   time.monotonic() + PHASE_LIMIT_S)
    totals.update(polled.failures)

    answered = explicit.ok + polled.ok + sum(totals.values())
    print(f"in all: {answered} requests, {sum(totals.values())} not 200")
    assert answered >= EXPLICIT_REQUESTS + POLL_REQUESTS
    assert not totals, "\n".join(f"{count} x {what}" for what, count in totals.most_common())


# --- a request that looked its version up before the switch, and comes in after it -----

def partial_request(server: ServerProcess, model: str, body: bytes, sent: int
                    ) -> socket.socket:
    """An HTTP inference request to ``model`` (the latest version) of which only the
    headers and ``sent`` bytes of the body have been sent: the server has looked the model
    up (it does that when the headers are in) and waits for the rest."""
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=CALL_TIMEOUT_S)
    head = (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    sock.sendall(head.encode() + body[:sent])
    # Answered after the server took in the headers above (one event loop serves both
    # connections, in order): from now on the request holds the version it looked up.
    assert httpclient.InferenceServerClient(server.http_url).is_server_live()
    return sock


def finish_request(sock: socket.socket, body: bytes, sent: int) -> tuple[int, dict]:
    """Send the rest of the body; the status and JSON body of the answer."""
    sock.sendall(body[sent:])
    reader = sock.makefile("rb")
    status = int(reader.readline().split()[1])
    length = 0
    while (line := reader.readline().strip()):
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "content-length":
            length = int(value)
    answer = json.loads(reader.read(length))
    sock.close()
    return status, answer


@pytest.mark.parametrize("mode", ["explicit", "poll"])
def test_a_request_arriving_across_a_switch_is_answered(repo: Path, tmp_path: Path, mode):
    args = ["--model-control-mode=explicit", "--load-model=slow_py"] if mode == "explicit" \
        else ["--model-control-mode=poll", "--repository-poll-secs=1"]
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                                   "data": DATA.tolist()}]}).encode()
    with naiad_server("--model-repository", str(repo), *args) as server:
        sock = partial_request(server, "slow_py", body, 10)
        # Version 1 is replaced (loaded again, or version 2 appears) and unloaded while
        # the request's body is still on its way.
        if mode == "explicit":
            httpclient.InferenceServerClient(server.http_url, network_timeout=PHASE_LIMIT_S
                                             ).load_model("slow_py")
        else:
            staging = tmp_path / "staging" / "2"
            staging.mkdir(parents=True)
            (staging / "model.py").write_text(textwrap.dedent(SLOW_INIT_PY).lstrip())
            os.rename(staging, repo / "slow_py" / "2")
        wait_until(lambda: "unloaded model 'slow_py' version 1" in server.log(),
                   "the old version 1 of 'slow_py' unloaded", server,
                   time.monotonic() + PHASE_LIMIT_S)
        status, answer = finish_request(sock, body, 10)
    # The version serving now answers it: version 1 loaded again, or version 2.
    assert status == 200, answer
    assert answer["outputs"][0]["data"] == DATA.tolist()
    assert answer["model_version"] == ("1" if mode == "explicit" else "2")


# --- a request in flight on a version that a policy change removes ----------------------

# Version 1 waits in execute until the test writes <root>/release (a bounded wait), after
# writing <root>/started; version 2 answers at once. Both say which version answered.
GATED_PY = """
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

WAIT_LIMIT_S = 120.0


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])
        self.root = Path(args["model_repository"]).parents[1]

    def execute(self, requests):
        if self.version == 1:
            (self.root / "started").touch()
            deadline = time.monotonic() + WAIT_LIMIT_S
            while not (self.root / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", np.full([4], self.version, np.float32))]) for _ in requests]
"""


def gated_config(versions: list[int]) -> str:
    policy = ", ".join(map(str, versions))
    return model_config("gated", "python",
                        f"version_policy: {{ specific: {{ versions: [ {policy} ] }} }}\n")


@pytest.fixture
def gated_root(tmp_path: Path) -> Path:
    """``<root>/repo/gated`` with versions 1 and 2 and a policy that serves version 1."""
    model = tmp_path / "repo" / "gated"
    for version in (1, 2):
        (model / str(version)).mkdir(parents=True)
        (model / str(version) / "model.py").write_text(textwrap.dedent(GATED_PY).lstrip())
    (model / "config.pbtxt").write_text(gated_config([1]))
    return tmp_path


@pytest.fixture(params=["explicit", "poll"])
def gated_server(request, gated_root: Path) -> Iterator[tuple[ServerProcess, str]]:
    mode = request.param
    args = ["--model-control-mode=explicit", "--load-model=gated"] if mode == "explicit" \
        else ["--model-control-mode=poll", "--repository-poll-secs=1"]
    with naiad_server("--model-repository", str(gated_root / "repo"), *args) as server:
        yield server, mode


def test_a_request_in_flight_finishes_on_the_version_a_policy_change_removes(
        gated_server, gated_root: Path):
    server, mode = gated_server
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=PHASE_LIMIT_S)
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(DATA)
    outcome: dict[str, object] = {}

    def in_flight() -> None:
        with httpclient.InferenceServerClient(server.http_url,
                                              network_timeout=PHASE_LIMIT_S) as own:
            try:
                outcome["result"] = own.infer("gated", [tensor])
            except Exception as exc:
                outcome["error"] = exc

    thread = threading.Thread(target=in_flight, daemon=True)
    thread.start()
    deadline = time.monotonic() + PHASE_LIMIT_S
    wait_until(lambda: (gated_root / "started").exists(), "version 1 executing", server,
               deadline)

    # The policy moves on to version 2 while version 1 runs the request.
    if mode == "explicit":
        client.load_model("gated", config=json.dumps({
            "name": "gated", "backend": "python", "max_batch_size": 0,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
            "version_policy": {"specific": {"versions": [2]}}}))
    else:
        staging = gated_root / "config.pbtxt"
        staging.write_text(gated_config([2]))
        os.replace(staging, gated_root / "repo" / "gated" / "config.pbtxt")
    # Version 2 serves while version 1 still holds its request: the load waited for no
    # request of the version it replaced.
    wait_until(lambda: client.get_model_metadata("gated")["versions"] == ["2"],
               "'gated' serving version 2 only", server, deadline)
    assert thread.is_alive() and not outcome
    answer = client.infer("gated", [tensor])
    assert answer.get_response()["model_version"] == "2"
    np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), np.full([4], 2, np.float32))
    assert "unloaded model 'gated' version 1" not in server.log()
    # As Triton 2.51 answers meanwhile: version 1 is unloading, and takes no new request.
    assert client.get_model_repository_index() == [
        {"name": "gated", "version": "1", "state": "UNLOADING"},
        {"name": "gated", "version": "2", "state": "READY"}]
    with pytest.raises(InferenceServerException) as refused:
        client.infer("gated", [tensor], model_version="1")
    assert refused.value.status() == "503"
    assert "'gated' version 1 is not at ready state" in refused.value.message()

    (gated_root / "release").touch()
    thread.join(PHASE_LIMIT_S)
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert result.get_response()["model_version"] == "1"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full([4], 1, np.float32))
    # Then version 1 drained and unloaded.
    wait_until(lambda: "unloaded model 'gated' version 1" in server.log(),
               "version 1 unloaded once its request finished", server, deadline)
    assert not client.is_model_ready("gated", "1")
    assert client.get_model_repository_index() == [
        {"name": "gated", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "gated", "version": "2", "state": "READY"}]

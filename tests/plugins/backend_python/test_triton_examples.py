"""Triton's own python_backend examples, unmodified, served by naiad and by the real Triton.

Each example's model repository is laid out in a temporary folder exactly as its README in
triton-inference-server/python_backend (``examples/<example>/README.md``) says (files copied,
never edited), a server is started on it, and the example's own client script runs as a
subprocess. It passes when the client exits 0 and prints the line its README shows
(``PASS: ...``). Every example runs against the real Triton 2.51 (which validates the harness
and the layouts) and against naiad in both Python execution modes.

The examples are not copied into this repository (see triton_examples/README.md): they are read
from a git checkout of python_backend named by ``NAIAD_PYTHON_BACKEND_DIR`` (default
``<repo>/../shared/python_backend``), whose ``examples/`` must have no local changes. Without
one the example tests skip with that reason; the harness self-tests at the end run anyway,
on small examples of our own laid out the same way.

The clients hard-code localhost:8000 (HTTP), 8001 (gRPC) and 8002 (metrics), so every server
here listens on those ports: one server at a time, serialized across processes by a lock
file, and a test skips when something else already listens there.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from naiad.testing import ServerProcess

REPO_ROOT = Path(__file__).resolve().parents[3]
PYTHON_BACKEND_DIR = Path(
    os.environ.get("NAIAD_PYTHON_BACKEND_DIR", REPO_ROOT.parent / "shared" / "python_backend")
)
#: python_backend's release branch for Triton 2.51, the peer below; another tag is run too,
#: and named in the test output.
PYTHON_BACKEND_TAG = "r24.10"
TRITON_SCRIPTS = Path(
    os.environ.get("NAIAD_TRITON_SCRIPTS", REPO_ROOT.parent / "shared" / "triton")
)
TRITON_PEER_DIR = Path(
    os.environ.get("TRITON_PEER_DIR", Path(tempfile.gettempdir()) / "naiad-triton-reference")
)
TRITON_BIN = TRITON_PEER_DIR / "wheel/pytriton/tritonserver/bin/tritonserver"
TRITON_STUB_DIR = TRITON_PEER_DIR / "wheel/pytriton/tritonserver/backends/python"

#: The ports every example client connects to (``localhost:8000`` and so on, hard-coded).
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
PORT_LOCK = Path(tempfile.gettempdir()) / "naiad-triton-examples-ports.lock"
SECONDS = 1.0
SERVER_READY_TIMEOUT = 120 * SECONDS  # Triton loads every model before it answers ready
CLIENT_TIMEOUT = 60 * SECONDS  # the slowest client (repeat_int32) waits about 10 s


@dataclass(frozen=True)
class Client:
    script: str  # path inside python_backend, as the README runs it
    expect: str  # the line the README shows the client printing when it passes


@dataclass(frozen=True)
class Example:
    """One model repository of a README section: ``layout`` maps each file of the
    repository (``models/...`` in the README) to the python_backend file it is copied from."""

    name: str
    layout: dict[str, str]
    clients: tuple[Client, ...]
    server_args: tuple[str, ...] = ()
    client_modules: tuple[str, ...] = ("numpy", "tritonclient.http")
    server_modules: tuple[str, ...] = ()  # what the models import beyond numpy
    notes: str = ""


ADD_SUB = {
    "add_sub/1/model.py": "examples/add_sub/model.py",
    "add_sub/config.pbtxt": "examples/add_sub/config.pbtxt",
}
PYTORCH = {
    "pytorch/1/model.py": "examples/pytorch/model.py",
    "pytorch/config.pbtxt": "examples/pytorch/config.pbtxt",
}
SQUARE = {
    "square_int32/1/model.py": "examples/decoupled/square_model.py",
    "square_int32/config.pbtxt": "examples/decoupled/square_config.pbtxt",
}

EXAMPLES = (
    Example(
        "add_sub", ADD_SUB,
        (Client("examples/add_sub/client.py", "PASS: add_sub"),),
    ),
    Example(
        "bls_sync",
        {**ADD_SUB, **PYTORCH,
         "bls_sync/1/model.py": "examples/bls/sync_model.py",
         "bls_sync/config.pbtxt": "examples/bls/sync_config.pbtxt"},
        (Client("examples/bls/sync_client.py", "PASS: BLS Sync"),),
        server_modules=("torch",),
    ),
    Example(
        "bls_async",
        {**ADD_SUB, **PYTORCH,
         "bls_async/1/model.py": "examples/bls/async_model.py",
         "bls_async/config.pbtxt": "examples/bls/async_config.pbtxt"},
        (Client("examples/bls/async_client.py", "PASS: BLS Async"),),
        server_modules=("torch",),
    ),
    Example(
        "bls_decoupled_sync",
        {**SQUARE,
         "bls_decoupled_sync/1/model.py": "examples/bls_decoupled/sync_model.py",
         "bls_decoupled_sync/config.pbtxt": "examples/bls_decoupled/sync_config.pbtxt"},
        (Client("examples/bls_decoupled/sync_client.py", "PASS: BLS Decoupled Sync"),),
    ),
    Example(
        "bls_decoupled_async",
        {**SQUARE,
         "bls_decoupled_async/1/model.py": "examples/bls_decoupled/async_model.py",
         "bls_decoupled_async/config.pbtxt": "examples/bls_decoupled/async_config.pbtxt"},
        (Client("examples/bls_decoupled/async_client.py", "PASS: BLS Decoupled Async"),),
    ),
    Example(
        "decoupled",
        {**SQUARE,
         "repeat_int32/1/model.py": "examples/decoupled/repeat_model.py",
         "repeat_int32/config.pbtxt": "examples/decoupled/repeat_config.pbtxt"},
        (Client("examples/decoupled/repeat_client.py", "PASS: repeat_int32"),
         Client("examples/decoupled/square_client.py", "PASS: square_int32")),
        client_modules=("numpy", "tritonclient.grpc"),
    ),
    Example(
        "custom_metrics",
        {"custom_metrics/1/model.py": "examples/custom_metrics/model.py",
         "custom_metrics/config.pbtxt": "examples/custom_metrics/config.pbtxt"},
        (Client("examples/custom_metrics/client.py", "PASS: custom_metrics"),),
        client_modules=("numpy", "tritonclient.http", "requests"),
    ),
    Example(
        "auto_complete",
        {"nobatch_auto_complete/1/model.py": "examples/auto_complete/nobatch_model.py",
         "batch_auto_complete/1/model.py": "examples/auto_complete/batch_model.py"},
        (Client("examples/auto_complete/client.py", "PASS: auto_complete"),),
        # the README starts the server so, and the models have no config.pbtxt
        server_args=("--strict-model-config=false",),
    ),
)

#: naiad's two Python execution modes, chosen server-wide so the examples stay unmodified
TARGETS = {
    "triton": (),
    "naiad-isolated": ("--backend-config", "python,execution-mode=isolated"),
    "naiad-in_process": ("--backend-config", "python,execution-mode=in_process"),
}


# --- the harness --------------------------------------------------------------------------


class ExamplesUnavailable(Exception):
    """No usable python_backend checkout: the example tests skip with this reason."""


class ExamplesModified(Exception):
    """The checkout's examples differ from its commit: the example tests fail."""


def checked_checkout(root: Path) -> str:
    """The commit (``git describe``) of a python_backend checkout whose ``examples/`` has no
    local changes; raises ExamplesUnavailable or ExamplesModified otherwise."""
    if not (root / "examples").is_dir():
        raise ExamplesUnavailable(
            f"no python_backend checkout at {root} (set NAIAD_PYTHON_BACKEND_DIR to a git "
            f"checkout of triton-inference-server/python_backend, tag {PYTHON_BACKEND_TAG}; "
            f"see tests/plugins/backend_python/triton_examples/README.md)")

    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                              text=True, timeout=30)
        if proc.returncode != 0:
            raise ExamplesModified(
                f"{root} must be a git checkout, so that its examples can be shown "
                f"unmodified: git {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    # untracked files count too: a README's cp of a file the commit lacks must not find one
    changed = git("status", "--porcelain", "--untracked-files=all", "--", "examples")
    if changed.strip():
        raise ExamplesModified(f"python_backend examples at {root} differ from their "
                               f"commit:\n{changed}")
    return git("describe", "--tags", "--always").strip()


def lay_out(example: Example, source_root: Path, repository: Path) -> Path:
    """Copy the example's files into ``repository`` as its README's ``cp`` lines do."""
    for destination, source in example.layout.items():
        path = repository / destination
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((source_root / source).read_bytes())
    return repository


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    return [name for name in modules if importlib.util.find_spec(name.split(".")[0]) is None
            or importlib.util.find_spec(name) is None]


def stub_lacks(modules: tuple[str, ...]) -> list[str]:
    """The top-level modules Triton's Python stub cannot import (not in its folder)."""
    return [name for name in modules if not (TRITON_STUB_DIR / name.split(".")[0]).exists()]


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def example_ports() -> Iterator[None]:
    """Ports 8000-8002 for this module's servers, one server at a time; held across the
    module so that no other pytest process starts one between two of ours."""
    with open(PORT_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def require_free_ports() -> None:
    taken = [port for port in (HTTP_PORT, GRPC_PORT, METRICS_PORT) if port_in_use(port)]
    if taken:
        pytest.skip(f"the example clients connect to localhost:{HTTP_PORT}/{GRPC_PORT}/"
                    f"{METRICS_PORT}, and something else listens on {taken}")


class ExampleServer(ServerProcess):
    """A server on the fixed ports the example clients use (not free ones)."""

    def __init__(self, cmd: list[str], **kwargs: object) -> None:
        super().__init__(cmd, **kwargs)  # type: ignore[arg-type]
        self.http_port, self.grpc_port, self.metrics_port = HTTP_PORT, GRPC_PORT, METRICS_PORT


def server_command(target: str, repository: Path, server_args: tuple[str, ...]) -> list[str]:
    ports = ["--http-port", str(HTTP_PORT), "--grpc-port", str(GRPC_PORT),
             "--metrics-port", str(METRICS_PORT)]
    if target == "triton":
        serve = TRITON_SCRIPTS / "serve.sh"
        if not serve.exists() or not TRITON_BIN.exists():
            reason = (f"the real Triton is not set up (serve.sh in {TRITON_SCRIPTS}, "
                      f"{TRITON_BIN}): run {TRITON_SCRIPTS / 'setup.sh'}")
            if os.environ.get("NAIAD_REQUIRE_TRITON") == "1":
                pytest.fail(f"NAIAD_REQUIRE_TRITON=1: {reason}", pytrace=False)
            pytest.skip(reason)
        return [str(serve), "--model-repository", str(repository), *ports, *server_args]
    return [sys.executable, "-m", "naiad", "serve", "--http-address", "127.0.0.1",
            "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
            "--model-repository", str(repository), *ports, *server_args, *TARGETS[target]]


@dataclass
class ClientRun:
    client: Client
    returncode: int
    output: str

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and self.client.expect in self.output.splitlines()


@dataclass
class ServedExample:
    example: Example
    target: str
    source_root: Path
    server: ServerProcess
    described: str = ""
    runs: list[ClientRun] = field(default_factory=list)

    def run_clients(self) -> list[ClientRun]:
        """Each client, as its README runs it (``python3 examples/.../client.py`` from the
        checkout's root), with this interpreter, which has tritonclient."""
        for client in self.example.clients:
            try:
                proc = subprocess.run(
                    [sys.executable, str(self.source_root / client.script)],
                    cwd=self.source_root, capture_output=True, text=True,
                    timeout=CLIENT_TIMEOUT)
                self.runs.append(ClientRun(client, proc.returncode, proc.stdout + proc.stderr))
            except subprocess.TimeoutExpired as exc:
                output = (exc.stdout or b"").decode(errors="replace") + \
                    (exc.stderr or b"").decode(errors="replace")
                self.runs.append(ClientRun(client, -1, f"{output}\n[client killed after "
                                                       f"{CLIENT_TIMEOUT} s]"))
        return self.runs

    def report(self) -> str:
        parts = []
        for run in self.runs:
            verdict = "passed" if run.passed else f"FAILED (exit {run.returncode}, " \
                f"expected the line {run.client.expect!r})"
            parts.append(f"--- {run.client.script}: {verdict}\n{tail(run.output)}")
        if not all(run.passed for run in self.runs):
            parts.append(f"--- server log ({self.target}):\n{tail(self.server.log(), 4000)}")
        return "\n".join(parts)


def tail(text: str, limit: int = 3000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def serve_example(example: Example, target: str, source_root: Path,
                  repository: Path) -> ExampleServer:
    """A started server for the example's repository (the test owns stopping it); a server
    that exits or never gets ready fails the test with its log."""
    missing = missing_modules(example.client_modules)
    if missing:
        pytest.skip(f"{example.name}'s client imports {missing}, not installed here")
    require_free_ports()
    cmd = server_command(target, lay_out(example, source_root, repository),
                         example.server_args)
    server = ExampleServer(cmd, ready_timeout=SERVER_READY_TIMEOUT)
    try:
        server.start()
    except RuntimeError as exc:
        pytest.fail(f"{target} did not serve {example.name}: {tail(str(exc), 6000)}",
                    pytrace=False)
    return server


# --- Triton's examples ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def python_backend_examples() -> tuple[Path, str]:
    try:
        return PYTHON_BACKEND_DIR, checked_checkout(PYTHON_BACKEND_DIR)
    except ExamplesUnavailable as exc:
        pytest.skip(str(exc))
    except ExamplesModified as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_triton_example_client_passes(example: Example, target: str,
                                      python_backend_examples: tuple[Path, str],
                                      example_ports: None, tmp_path: Path) -> None:
    source_root, described = python_backend_examples
    if target != "triton" and missing_modules(example.server_modules):
        pytest.skip(f"{example.name}'s models import "
                    f"{missing_modules(example.server_modules)}, not installed here")
    if target == "triton" and stub_lacks(example.server_modules):
        # Triton's stub reads only its own folder (not PYTHONPATH); setup.sh links numpy.
        pytest.skip(f"{example.name}'s models import {stub_lacks(example.server_modules)}, "
                    f"which Triton's Python stub in {TRITON_STUB_DIR} does not have")
    server = serve_example(example, target, source_root, tmp_path / "models")
    served = ServedExample(example, target, source_root, server, described)
    try:
        runs = served.run_clients()
    finally:
        server.stop()
    assert all(run.passed for run in runs), (
        f"python_backend {described}, example {example.name} on {target}:\n{served.report()}")


# --- the harness itself, on examples of our own -------------------------------------------

SELF_TEST_CONFIG = """\
name: "echo_twice"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 2 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""
SELF_TEST_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUT", 2 * pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests]
"""
SELF_TEST_CLIENT = """\
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

data = np.array([3, 4], dtype=np.int32)
with httpclient.InferenceServerClient("localhost:8000") as client:
    tensor = httpclient.InferInput("IN", [2], "INT32")
    tensor.set_data_from_numpy(data)
    out = client.infer("echo_twice", [tensor]).as_numpy("OUT")
with grpcclient.InferenceServerClient("localhost:8001") as client:
    tensor = grpcclient.InferInput("IN", [2], "INT32")
    tensor.set_data_from_numpy(data)
    out_grpc = client.infer("echo_twice", [tensor]).as_numpy("OUT")
if WANT_PASS and (out.tolist(), out_grpc.tolist()) == ([6, 8], [6, 8]):
    print("PASS: echo_twice")
    sys.exit(0)
print("echo_twice example error:", out, out_grpc)
sys.exit(1)
"""


def make_checkout(root: Path) -> Path:
    """A python_backend-shaped git checkout with one example: a model that doubles INT32
    [2], and two clients, one passing and one that fails after a correct answer."""
    files = {
        "examples/echo_twice/model.py": SELF_TEST_MODEL,
        "examples/echo_twice/config.pbtxt": SELF_TEST_CONFIG,
        "examples/echo_twice/client.py": "WANT_PASS = True\n" + SELF_TEST_CLIENT,
        "examples/echo_twice/failing_client.py": "WANT_PASS = False\n" + SELF_TEST_CLIENT,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for args in (["init", "-q"], ["add", "."],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    return root


ECHO_TWICE = Example(
    "echo_twice",
    {"echo_twice/1/model.py": "examples/echo_twice/model.py",
     "echo_twice/config.pbtxt": "examples/echo_twice/config.pbtxt"},
    (Client("examples/echo_twice/client.py", "PASS: echo_twice"),
     Client("examples/echo_twice/failing_client.py", "PASS: echo_twice")),
    client_modules=("numpy", "tritonclient.http", "tritonclient.grpc"),
)


@pytest.mark.parametrize("target", ["triton", "naiad-isolated"])
def test_harness_runs_a_checkout_example_and_sees_its_client_fail(
        target: str, tmp_path: Path, example_ports: None) -> None:
    """The same path as the examples above: layout, fixed ports, client subprocesses, and a
    client that exits 1 is reported as failed (so the example tests can fail)."""
    checkout = make_checkout(tmp_path / "python_backend")
    described = checked_checkout(checkout)
    server = serve_example(ECHO_TWICE, target, checkout, tmp_path / "models")
    served = ServedExample(ECHO_TWICE, target, checkout, server, described)
    try:
        passing, failing = served.run_clients()
    finally:
        server.stop()
    assert (tmp_path / "models/echo_twice/1/model.py").read_text() == SELF_TEST_MODEL
    assert passing.passed, served.report()
    assert not failing.passed and failing.returncode == 1, served.report()
    assert "echo_twice example error: [6 8] [6 8]" in failing.output


def test_harness_refuses_edited_or_missing_examples(tmp_path: Path) -> None:
    with pytest.raises(ExamplesUnavailable, match="no python_backend checkout"):
        checked_checkout(tmp_path / "nowhere")
    checkout = make_checkout(tmp_path / "python_backend")
    model = checkout / "examples/echo_twice/model.py"
    model.write_text(model.read_text() + "# edited\n")
    with pytest.raises(ExamplesModified, match=r"examples/echo_twice/model\.py"):
        checked_checkout(checkout)
    model.write_text(SELF_TEST_MODEL)
    checked_checkout(checkout)
    (checkout / "examples/echo_twice/extra.py").write_text("")
    with pytest.raises(ExamplesModified, match=r"extra\.py"):
        checked_checkout(checkout)


def test_layouts_follow_the_readme_shape() -> None:
    """Every repository file sits where Triton looks for it (MODEL/config.pbtxt,
    MODEL/1/model.py) and comes from examples/; every example has a client."""
    for example in EXAMPLES:
        assert example.clients, example.name
        for destination, source in example.layout.items():
            parts = destination.split("/")
            assert parts[1:] in (["config.pbtxt"], ["1", "model.py"]), destination
            assert source.startswith("examples/") and source.endswith(
                ".pbtxt" if parts[-1] == "config.pbtxt" else ".py"), source

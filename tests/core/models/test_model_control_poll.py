"""``--model-control-mode=poll``: a real server follows its repository's changes.

One server polls every second; each test changes its own models and waits (with a bounded
loop, never a speed threshold) until the change shows through the official clients.
"""

from __future__ import annotations

import os
import shutil
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from zoo import BROKEN_INIT_PY, IDENTITY_PY, identity_config, write_model

from naiad.testing import naiad_server

# A change must show within a few polls of one second; loading a Python model takes a
# moment more. Generous, because a busy machine is slow, and only a bound: waits end as
# soon as the change shows.
WAIT_S = 30.0

# An identity model that counts its initializations in <tmp>/stamps (outside the
# repository, so that counting is no change the poller would see).
COUNTING_PY = """
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        stamps = Path(args["model_repository"]).parents[1] / "stamps"
        name = f"{args['model_name']}-v{args['model_version']}.inits"
        with open(stamps / name, "a") as out:
            out.write("init\\n")

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


def config(name: str, max_batch_size: int = 0, policy: str = "") -> str:
    return identity_config(name, "TYPE_FP32", max_batch_size) + policy


POLICY_ALL = "version_policy: { all: {} }\n"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("poll")
    repo, staging = root / "repo", root / "staging"
    (root / "stamps").mkdir()
    staging.mkdir()
    write_model(repo, "reconf", config("reconf"), IDENTITY_PY)
    write_model(repo, "versions_all", config("versions_all", policy=POLICY_ALL), COUNTING_PY)
    write_model(repo, "versions_latest", config("versions_latest"), COUNTING_PY)
    write_model(repo, "fragile", config("fragile"), IDENTITY_PY)
    write_model(repo, "fragile_version", config("fragile_version"), IDENTITY_PY)
    with naiad_server("--model-repository", str(repo), "--model-control-mode=poll",
                      "--repository-poll-secs=1", "--exit-on-error=false",
                      "--strict-readiness=false") as server:
        yield server, repo, staging, root / "stamps"


@pytest.fixture
def client(setup):
    with httpclient.InferenceServerClient(setup[0].http_url, network_timeout=30) as c:
        yield c


def wait_until(check: Callable[[], object], what: str, server) -> object:
    """``check()`` once it is truthy; fail naming ``what`` (and show the log) after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            result = check()
        except InferenceServerException:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"not seen within {WAIT_S} s: {what}\n{server.log()[-4000:]}")
        time.sleep(0.1)


def put(staging: Path, target: Path, text: str) -> None:
    """Write ``target`` in one step (written aside, then renamed): the poller never sees a
    half-written file."""
    aside = staging / target.name
    aside.write_text(textwrap.dedent(text).lstrip())
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(aside, target)


def add_version(staging: Path, model_dir: Path, version: int, source: str) -> None:
    aside = staging / f"{model_dir.name}-{version}"
    aside.mkdir()
    (aside / "model.py").write_text(textwrap.dedent(source).lstrip())
    os.rename(aside, model_dir / str(version))


def identity(client, model: str, data: np.ndarray, version: str = ""):
    tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return client.infer(model, [tensor], model_version=version)


def index_of(client, name: str) -> list[dict]:
    return [entry for entry in client.get_model_repository_index() if entry["name"] == name]


def inits(stamps: Path, model: str, version: int) -> int:
    path = stamps / f"{model}-v{version}.inits"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_new_model_folder_loads_and_a_removed_one_unloads(setup, client):
    server, repo, staging, _ = setup
    assert not client.is_model_ready("late")
    write_model(staging, "late", config("late"), IDENTITY_PY)
    os.rename(staging / "late", repo / "late")
    wait_until(lambda: client.is_model_ready("late"), "'late' ready after its folder appeared",
               server)
    data = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(identity(client, "late", data).as_numpy("OUTPUT0"), data)

    shutil.move(repo / "late", staging / "late-removed")
    wait_until(lambda: not client.is_model_ready("late"), "'late' unloaded after removal",
               server)
    with pytest.raises(InferenceServerException) as info:
        identity(client, "late", data)
    assert info.value.status() == "404"
    assert "no available versions" in info.value.message()
    assert index_of(client, "late") == []  # as in Triton: the index lists the folders there


def test_a_changed_config_reloads_the_model(setup, client):
    server, repo, staging, _ = setup
    assert client.get_model_config("reconf")["max_batch_size"] == 0
    put(staging, repo / "reconf" / "config.pbtxt", config("reconf", max_batch_size=4))
    wait_until(lambda: client.get_model_config("reconf")["max_batch_size"] == 4,
               "the new max_batch_size of 'reconf'", server)
    assert client.get_model_metadata("reconf")["inputs"][0]["shape"] == [-1, -1]
    batch = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(identity(client, "reconf", batch).as_numpy("OUTPUT0"), batch)


def test_a_new_version_folder_follows_the_version_policy(setup, client):
    server, repo, staging, stamps = setup
    data = np.array([5], np.float32)
    # version_policy all: version 2 joins, version 1 keeps serving without loading again
    assert inits(stamps, "versions_all", 1) == 1
    add_version(staging, repo / "versions_all", 2, COUNTING_PY)
    wait_until(lambda: client.is_model_ready("versions_all", "2"),
               "version 2 of 'versions_all'", server)
    assert client.is_model_ready("versions_all", "1")
    assert inits(stamps, "versions_all", 1) == 1  # unchanged: not loaded again
    assert inits(stamps, "versions_all", 2) == 1
    assert identity(client, "versions_all", data).get_response()["model_version"] == "2"

    # the default policy (latest 1): version 2 replaces version 1
    add_version(staging, repo / "versions_latest", 2, COUNTING_PY)
    wait_until(lambda: client.get_model_metadata("versions_latest")["versions"] == ["2"],
               "'versions_latest' serving version 2 only", server)
    assert not client.is_model_ready("versions_latest", "1")
    # UNLOADING until version 1 has drained and closed, then unloaded (as in Triton)
    wait_until(lambda: index_of(client, "versions_latest") == [
        {"name": "versions_latest", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "versions_latest", "version": "2", "state": "READY"}],
        "version 1 of 'versions_latest' listed as unloaded", server)
    result = identity(client, "versions_latest", data)
    assert result.get_response()["model_version"] == "2"

    # a version folder removed: that version unloads, the others keep serving
    shutil.move(repo / "versions_all" / "2", staging / "versions_all-2-removed")
    wait_until(lambda: not client.is_model_ready("versions_all", "2"),
               "version 2 of 'versions_all' unloaded", server)
    assert identity(client, "versions_all", data).get_response()["model_version"] == "1"
    assert inits(stamps, "versions_all", 1) == 1
    wait_until(lambda: index_of(client, "versions_all") == [
        {"name": "versions_all", "version": "1", "state": "READY"},
        {"name": "versions_all", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded"}],
        "version 2 of 'versions_all' listed as unloaded", server)


def test_a_broken_config_keeps_the_previous_version_serving(setup, client):
    server, repo, staging, _ = setup
    data = np.array([7, 8], np.float32)
    put(staging, repo / "fragile" / "config.pbtxt",
        'name: "fragile"\nbackend: "python"\nnot_a_field: 1\n')

    def reason() -> str:
        return " ".join(entry.get("reason", "") for entry in index_of(client, "fragile"))

    wait_until(lambda: "not_a_field" in reason(), "the reason 'fragile' failed to reload",
               server)
    assert client.is_model_ready("fragile")
    np.testing.assert_array_equal(identity(client, "fragile", data).as_numpy("OUTPUT0"), data)

    # fixed: the new configuration serves and the reason is gone
    put(staging, repo / "fragile" / "config.pbtxt", config("fragile", max_batch_size=2))
    wait_until(lambda: client.get_model_config("fragile")["max_batch_size"] == 2,
               "the fixed configuration of 'fragile'", server)
    assert index_of(client, "fragile") == [{"name": "fragile", "version": "1",
                                            "state": "READY"}]


def test_a_version_that_fails_to_load_leaves_the_previous_one_serving(setup, client):
    server, repo, staging, _ = setup
    data = np.array([9], np.float32)
    add_version(staging, repo / "fragile_version", 2, BROKEN_INIT_PY)

    def version_2() -> dict:
        return next((e for e in index_of(client, "fragile_version")
                     if e.get("version") == "2"), {})

    wait_until(lambda: version_2().get("state") == "UNAVAILABLE",
               "version 2 of 'fragile_version' failing", server)
    assert "deliberate failure in initialize" in version_2()["reason"]
    assert client.is_model_ready("fragile_version", "1")
    result = identity(client, "fragile_version", data)
    assert result.get_response()["model_version"] == "1"


def test_load_and_unload_are_refused_as_triton_does(setup, client):
    server = setup[0]
    refused = "explicit model load / unload is not allowed if polling is enabled"
    for call in (lambda: client.load_model("reconf"), lambda: client.unload_model("reconf"),
                 lambda: client.load_model("no_such_model")):
        with pytest.raises(InferenceServerException) as info:
            call()
        assert info.value.status() == "503"
        assert refused in info.value.message()
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        for call in (lambda: grpc_client.load_model("reconf"),
                     lambda: grpc_client.unload_model("reconf")):
            with pytest.raises(InferenceServerException) as info:
                call()
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert refused in info.value.message()
    assert client.is_model_ready("reconf")

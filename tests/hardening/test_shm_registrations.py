"""Issue 32, item 3: system shared memory registrations cannot exhaust the server's file
descriptors. Before the fix every registration held a descriptor, with no cap, and one key
could be registered under any number of names: about 20,000 registrations and naiad
accepted no connection. Now a key is registered once (tritonserver 2.51's answer: "Invalid
shared memory region: 'KEY'", there a 500, here ALREADY_EXISTS) and at most
``--max-shared-memory-regions`` are held; the server keeps serving throughout, over both
protocols."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from naiad.testing import ServerProcess, naiad_server

CAP = 8
SIZE = 64


@pytest.fixture(scope="module")
def capped_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("empty-repo")
    with naiad_server("--model-repository", str(repo),
                      f"--max-shared-memory-regions={CAP}") as server:
        yield server


@pytest.fixture
def keys() -> Iterator[list[str]]:
    """CAP + 1 shared memory objects of SIZE bytes, destroyed at the end."""
    handles = [shm.create_shared_memory_region(f"g32-{i}", f"/g32-{uuid.uuid4().hex[:10]}",
                                               SIZE) for i in range(CAP + 1)]
    yield [h._shm_key for h in handles]
    for handle in handles:
        shm.destroy_shared_memory_region(handle)


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, capped_server: ServerProcess) -> Iterator[object]:
    """A client of the capped server over one protocol, closed at the end."""
    made = (httpclient.InferenceServerClient(capped_server.http_url)
            if request.param == "http"
            else grpcclient.InferenceServerClient(capped_server.grpc_url))
    yield made
    made.unregister_system_shared_memory()
    made.close()


def test_a_key_is_registered_once(client, keys: list[str]) -> None:
    client.unregister_system_shared_memory()
    client.register_system_shared_memory("first", keys[0], SIZE)
    with pytest.raises(InferenceServerException) as refused:
        client.register_system_shared_memory("second", keys[0], SIZE)
    assert f"Invalid shared memory region: '{keys[0]}'" in refused.value.message()
    assert "'first'" in refused.value.message()
    assert str(refused.value.status()) in ("409", "StatusCode.ALREADY_EXISTS")
    # 'k' names the same object as '/k'
    with pytest.raises(InferenceServerException):
        client.register_system_shared_memory("third", keys[0].lstrip("/"), SIZE)
    status = client.get_system_shared_memory_status()
    names = ([r["name"] for r in status] if isinstance(status, list)
             else list(status.regions))
    assert names == ["first"]
    client.unregister_system_shared_memory("first")
    client.register_system_shared_memory("second", keys[0], SIZE)  # free again
    client.unregister_system_shared_memory()


def test_registrations_are_capped(capped_server: ServerProcess, client,
                                  keys: list[str]) -> None:
    client.unregister_system_shared_memory()
    pid = capped_server.process.pid
    before = _open_fds(pid)
    for i, key in enumerate(keys[:CAP]):
        client.register_system_shared_memory(f"r{i}", key, SIZE)
    with pytest.raises(InferenceServerException) as refused:
        client.register_system_shared_memory("one-more", keys[CAP], SIZE)
    assert f"--max-shared-memory-regions={CAP}" in refused.value.message()
    assert str(refused.value.status()) in ("413", "StatusCode.RESOURCE_EXHAUSTED")
    assert _open_fds(pid) <= before + CAP + 2  # a descriptor per region at most
    assert client.is_server_live() and client.is_server_ready()
    client.unregister_system_shared_memory("r0")
    client.register_system_shared_memory("one-more", keys[CAP], SIZE)
    client.unregister_system_shared_memory()
    assert _open_fds(pid) <= before + 2
    assert Path(f"/proc/{pid}").exists()

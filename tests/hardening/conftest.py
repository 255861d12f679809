"""Fixtures of the hardening tests (helpers: hardening_support.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import tritonclient.http as httpclient
from hardening_support import MODELS, hardening_repository

from naiad.testing import ServerProcess, naiad_server


@pytest.fixture(scope="session")
def hardening_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One ``naiad serve`` in explicit model control with every model loaded: repository
    control is live, so its bad requests reach the body parsers."""
    repo = hardening_repository(tmp_path_factory.mktemp("hardening-repo"))
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=*") as server:
        yield server


#: models/sleepy behind a dynamic batcher with one instance taking one request at a time:
#: the requests behind the one executing wait in the batcher's queue, where the server
#: counts them (``nv_inference_pending_request_count``) and a cancellation withdraws them.
SLEEPY_BATCHED = {
    "name": "sleepy_batched", "backend": "python", "max_batch_size": 1,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "instance_group": [{"count": 1, "kind": "KIND_CPU"}], "dynamic_batching": {},
    "parameters": {"SLEEP_MS": {"string_value": "300"}},
}


@pytest.fixture(scope="session")
def sleepy_batched(hardening_server: ServerProcess) -> Iterator[str]:
    """SLEEPY_BATCHED deployed on the hardening server through the load API (its files
    sent with the request, as Triton's ``file:`` parameters); unloaded afterwards."""
    name = SLEEPY_BATCHED["name"]
    with httpclient.InferenceServerClient(hardening_server.http_url) as client:
        client.load_model(name, config=json.dumps(SLEEPY_BATCHED), files={
            "file:1/model.py": (MODELS / "sleepy" / "1" / "model.py").read_bytes()})
        try:
            yield name
        finally:
            client.unload_model(name)

"""Tracing, naiad against the real tritonserver 2.51: the trace extension's bodies (reads,
updates, errors, per-model settings) byte for byte, and the trace files the same requests
produce (the same records and timestamp names per trace, the same parent links; the
nanoseconds differ). Each server writes its own trace file, so this module starts its own
pair instead of the suite's ``servers``."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from compat_helpers import MODEL_REPOSITORY, http_request, model_subset, on_both
from compat_peer import (
    SELF_TEST,
    START_TIMEOUT,
    TRITON_PEER_DIR,
    compat_server,
    naiad_cmd,
    triton_cmd,
)

TRACE_ARGS = ["--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1000"]
# the models these tests name: the ensemble and its two steps
MODELS = ("add_sub", "mul", "pipeline")


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory, triton_serve_script: Path) -> Any:
    """Both servers tracing to a file of their own; the test that reads the files (the
    last one of this module) stops them."""
    folder = tmp_path_factory.mktemp("traces")
    files = {"triton": folder / "triton.json", "naiad": folder / "naiad.json"}
    env = {"TRITON_PEER_DIR": str(TRITON_PEER_DIR)}
    repository = model_subset(MODEL_REPOSITORY, MODELS, tmp_path_factory.mktemp("models"))
    servers = {}
    for name, file in files.items():
        args = [*TRACE_ARGS, "--trace-config", f"triton,file={file}"]
        cmd = (naiad_cmd(args, repository) if name == "naiad" and not SELF_TEST
               else triton_cmd(triton_serve_script, args, repository))
        servers[name] = compat_server(cmd, MODELS, env=env, ready_timeout=START_TIMEOUT)
    starters = [threading.Thread(target=s.start) for s in servers.values()]
    for thread in starters:
        thread.start()
    for thread in starters:
        thread.join()
    try:
        for name, server in servers.items():
            if server.process is None or server.process.poll() is not None:
                pytest.fail(f"{name} did not start:\n{server.log()[-3000:]}", pytrace=False)
        yield servers, files
    finally:
        for server in servers.values():
            server.stop()


def both(traced: Any, method: str, path: str, body: Any = None) -> tuple[Any, Any]:
    servers, _ = traced
    return on_both(lambda s: http_request(s.http_port, method, path, body),
                   servers["triton"], servers["naiad"])


# In order: later cases see the settings earlier ones made (on both servers alike).
SETTINGS_CASES = [
    ("GET", "/v2/trace/setting", None),
    ("GET", "/v2/models/add_sub/trace/setting", None),
    ("POST", "/v2/trace/setting", {"trace_rate": "7", "trace_count": "-1"}),
    ("POST", "/v2/models/add_sub/trace/setting", {"trace_rate": "5"}),
    ("GET", "/v2/models/add_sub/trace/setting", None),
    ("GET", "/v2/models/mul/trace/setting", None),
    ("POST", "/v2/trace/setting", {"log_frequency": "0"}),
    ("POST", "/v2/models/add_sub/trace/setting", {}),
    ("POST", "/v2/models/add_sub/trace/setting", {"trace_rate": None}),
    ("POST", "/v2/trace/setting", {"trace_rate": "1"}),
    ("POST", "/v2/trace/setting", {"trace_rate": "abc"}),
    ("POST", "/v2/trace/setting", {"trace_count": "-2"}),
    ("POST", "/v2/trace/setting", {"trace_rate": "4294967296"}),
    ("POST", "/v2/trace/setting", {"trace_level": ["OFF", "TIMESTAMPS"]}),
    ("POST", "/v2/trace/setting", {"trace_rate": "0", "trace_level": ["TIMESTAMPS"]}),
    ("GET", "/v2/models/nope/trace/setting", None),
    ("GET", "/v2/trace/setting", None),
]


@pytest.mark.parametrize(("method", "path", "body"), SETTINGS_CASES,
                         ids=[f"{m} {p} {json.dumps(b)}" for m, p, b in SETTINGS_CASES])
def test_trace_settings_bodies_are_tritons(traced: Any, method: str, path: str,
                                           body: Any) -> None:
    triton, naiad = both(traced, method, path, body)
    triton_json = json.loads(triton.body.replace(str(traced[1]["triton"]).encode(), b"F"))
    naiad_json = json.loads(naiad.body.replace(str(traced[1]["naiad"]).encode(), b"F"))
    assert (naiad.status, naiad_json) == (triton.status, triton_json)


def test_the_file_cannot_change_at_run_time(traced: Any) -> None:
    # Triton answers 501; naiad's UNSUPPORTED is 400 over HTTP (naiad.errors), same text.
    triton, naiad = both(traced, "POST", "/v2/trace/setting", {"trace_file": "/tmp/x.json"})
    assert triton.status == 501
    assert naiad.json() == triton.json()


def _inputs(module: Any) -> list[Any]:
    tensors = [module.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
    tensors[0].set_data_from_numpy(np.arange(4, dtype=np.float32))
    tensors[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
    return tensors


def _send_requests(server: Any) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        client.infer("add_sub", _inputs(httpclient), request_id="over-http")
        client.infer("pipeline", _inputs(httpclient), request_id="ensemble")
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.infer("add_sub", _inputs(grpcclient), request_id="over-grpc")


def _shape(path: Path) -> list[tuple[Any, ...]]:
    """What two runs share: per trace, its model record (the ids replaced by the model's
    names) and its timestamps' names (as a set: the order of capture differs); sorted."""
    text = path.read_text()
    assert text.startswith('[{"id":') and text.endswith("}]"), text[:200]
    records = json.loads(text)
    models = {r["id"]: r for r in records if "model_name" in r}
    names: dict[int, set[str]] = {}
    for record in records:
        for stamp in record.get("timestamps", ()):
            names.setdefault(record["id"], set()).add(stamp["name"])
    shape = []
    for trace_id, model in models.items():
        parent = models[model["parent_id"]]["model_name"] if "parent_id" in model else None
        keys = tuple(sorted(model))
        shape.append((model["model_name"], model["model_version"], model.get("request_id"),
                       parent, keys, tuple(sorted(names.get(trace_id, ())))))
    assert set(models) == {r["id"] for r in records}  # every record belongs to a trace
    return sorted(shape, key=repr)


def test_the_same_requests_give_the_same_traces(traced: Any) -> None:
    """Last in this module: the settings tests left both servers tracing every request
    (rate 1, level TIMESTAMPS, no model setting)."""
    servers, files = traced
    on_both(_send_requests, servers["triton"], servers["naiad"])
    for name, server in servers.items():
        assert server.stop() == 0, f"{name}: {server.log()[-2000:]}"
    triton, naiad = _shape(files["triton"]), _shape(files["naiad"])
    assert naiad == triton
    assert len(triton) == 5  # add_sub twice, the ensemble and its two steps

"""``--model-config-name``, ``--model-load-thread-count`` and ``--model-load-retry-count``,
each against real server processes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from zoo import IDENTITY_PY, identity_config, write_model

from naiad.testing import naiad_server

ONE_INSTANCE = 'instance_group [ { count: 1, kind: KIND_CPU } ]\n'

# --- --model-config-name ------------------------------------------------------------------


def test_model_config_name_prefers_configs_name_and_falls_back_to_config_pbtxt(tmp_path):
    write_model(tmp_path, "custom", identity_config("custom", "TYPE_FP32", 0), IDENTITY_PY)
    (tmp_path / "custom" / "configs").mkdir()
    (tmp_path / "custom" / "configs" / "fast.pbtxt").write_text(
        identity_config("custom", "TYPE_FP32", 8))
    # a configs/ folder without the named file: config.pbtxt it is
    write_model(tmp_path, "other", identity_config("other", "TYPE_FP32", 0), IDENTITY_PY)
    (tmp_path / "other" / "configs").mkdir()
    (tmp_path / "other" / "configs" / "slow.pbtxt").write_text(
        identity_config("other", "TYPE_FP32", 2))
    write_model(tmp_path, "plain", identity_config("plain", "TYPE_FP32", 0), IDENTITY_PY)
    with naiad_server("--model-repository", str(tmp_path), "--model-config-name=fast") \
            as server, httpclient.InferenceServerClient(server.http_url) as client, \
            grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        assert client.get_model_config("custom")["max_batch_size"] == 8
        grpc_config = grpc_client.get_model_config("custom", as_json=True)["config"]
        assert grpc_config["max_batch_size"] == 8
        assert client.get_model_metadata("custom")["inputs"][0]["shape"] == [-1, -1]
        assert client.get_model_config("other")["max_batch_size"] == 0
        assert client.get_model_config("plain")["max_batch_size"] == 0
        assert client.is_model_ready("plain")


def test_without_model_config_name_the_configs_folder_is_ignored(tmp_path):
    write_model(tmp_path, "custom", identity_config("custom", "TYPE_FP32", 0), IDENTITY_PY)
    (tmp_path / "custom" / "configs").mkdir()
    (tmp_path / "custom" / "configs" / "fast.pbtxt").write_text(
        identity_config("custom", "TYPE_FP32", 8))
    with naiad_server("--model-repository", str(tmp_path)) as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        assert client.get_model_config("custom")["max_batch_size"] == 0


# --- --model-load-thread-count ------------------------------------------------------------

# Writes when its initialize starts and ends into <tmp>/stamps, and waits (up to a bound)
# for another model's initialize to start: that only happens while it waits when two
# models load at once. The bound keeps the one-at-a-time case finite, not fast or slow.
RENDEZVOUS_PY = """
import time
import shutil
from pathlib import Path

import triton_python_backend_utils as pb_utils

WAIT_FOR_OTHER_S = 3.0


class TritonPythonModel:
    def initialize(self, args):
        stamps = Path(args["model_repository"]).parents[1] / "stamps"
        name = args["model_name"]
        (stamps / f"{name}.start").write_text(repr(time.time()))
        deadline = time.time() + WAIT_FOR_OTHER_S
        while time.time() < deadline and not [
                p for p in stamps.glob("*.start") if p.name != f"{name}.start"]:
            time.sleep(0.02)
        (stamps / f"{name}.end").write_text(repr(time.time()))

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


def load_intervals(tmp_path: Path, thread_count: int) -> list[tuple[float, float]]:
    repo, stamps = tmp_path / "repo", tmp_path / "stamps"
    stamps.mkdir()
    for name in ("first", "second"):
        write_model(repo, name, identity_config(name, "TYPE_FP32") + ONE_INSTANCE,
                    RENDEZVOUS_PY)
    with naiad_server("--model-repository", str(repo),
                      f"--model-load-thread-count={thread_count}") as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        assert client.is_model_ready("first") and client.is_model_ready("second")
    return [(float((stamps / f"{name}.start").read_text()),
             float((stamps / f"{name}.end").read_text())) for name in ("first", "second")]


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_two_load_threads_load_two_models_at_once(tmp_path):
    first, second = load_intervals(tmp_path, 2)
    assert overlap(first, second), (first, second)


def test_one_load_thread_loads_one_model_at_a_time(tmp_path):
    first, second = load_intervals(tmp_path, 1)
    assert not overlap(first, second), (first, second)


# --- --model-load-retry-count -------------------------------------------------------------

# Fails its first initialize (leaving a marker in <tmp>/stamps) and succeeds afterwards.
FAILS_ONCE_PY = """
import shutil
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = Path(args["model_repository"]).parents[1] / "stamps" / "tried"
        if not marker.exists():
            marker.write_text("once")
            raise RuntimeError("deliberate failure at the first initialize")

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


@pytest.mark.parametrize("retries", [0, 1])
def test_a_failed_load_is_tried_retry_count_more_times(tmp_path, retries):
    repo, stamps = tmp_path / "repo", tmp_path / "stamps"
    stamps.mkdir()
    write_model(repo, "flaky", identity_config("flaky", "TYPE_FP32") + ONE_INSTANCE,
                FAILS_ONCE_PY)
    with naiad_server("--model-repository", str(repo), f"--model-load-retry-count={retries}",
                      "--exit-on-error=false", "--strict-readiness=false") as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        assert (stamps / "tried").exists()
        if retries:
            assert client.is_model_ready("flaky")
            log = server.log()
            assert "attempt 1 of 2" in log and "deliberate failure at the first" in log
        else:
            assert not client.is_model_ready("flaky")
            entry, = client.get_model_repository_index()
            assert entry["state"] == "UNAVAILABLE"
            assert "deliberate failure at the first initialize" in entry["reason"]


def test_one_load_thread_loads_an_ensemble_and_its_steps_without_waiting_for_ever(tmp_path):
    """An ensemble waits for its composing models while they load; it must hold no load
    slot meanwhile, or a single slot would deadlock start-up."""
    examples = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
    for name in ("pipeline", "add_sub", "mul"):
        shutil.copytree(examples / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    with naiad_server("--model-repository", str(tmp_path), "--model-load-thread-count=1",
                      ready_timeout=30) as server, \
            httpclient.InferenceServerClient(server.http_url) as client:
        for name in ("pipeline", "add_sub", "mul"):
            assert client.is_model_ready(name), name

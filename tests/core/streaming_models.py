"""The repository of the streaming tests (test_grpc_decoupled, test_http_generate,
test_frontend_cancellation): the decoupled models of the Triton differential suite
(tests/compat/model_repository: repeat, text_stream, cancel_watch), its add_sub, and an
ordinary model that watches for cancellation (slow_watch)."""

from __future__ import annotations

import shutil
from pathlib import Path

COMPAT_MODELS = Path(__file__).resolve().parents[1] / "compat" / "model_repository"

SLOW_WATCH_CONFIG = """
name: "slow_watch"
backend: "python"
max_batch_size: 0
input [ { name: "SECONDS" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

SLOW_WATCH_PY = '''
"""Ordinary model: works SECONDS (checking request.is_cancelled() every 10 ms); a request
that sees its cancellation stops and is counted. OUT = the count so far."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.cancelled_seen = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = float(pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()[0])
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                if request.is_cancelled():
                    self.cancelled_seen += 1
                    break
                time.sleep(0.01)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array([self.cancelled_seen], dtype=np.int32))]))
        return responses
'''


def write_streaming_repository(root: Path) -> Path:
    """The repository under ``root``; returns its path."""
    repo = root / "models"
    for name in ("repeat", "text_stream", "cancel_watch", "add_sub"):
        shutil.copytree(COMPAT_MODELS / name, repo / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "slow_watch" / "1").mkdir(parents=True)
    (repo / "slow_watch" / "config.pbtxt").write_text(SLOW_WATCH_CONFIG)
    (repo / "slow_watch" / "1" / "model.py").write_text(SLOW_WATCH_PY)
    return repo

"""Triton Python models the end-to-end tests serve, written into a repository at test time.

Every model here is an ordinary Triton Python model (``import triton_python_backend_utils``):
the same files run under tritonserver.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
input [
  { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
output [
  { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 4 ] }
]
"""

ADD_SUB_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""

RAISES_PY = """
class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("deliberate failure in execute")
"""

SLOW_PY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(1.0)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""

BROKEN_INIT_PY = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("deliberate failure in initialize")

    def execute(self, requests):
        return []
"""

# V2 datatype -> config type name for the identity models
IDENTITY_TYPES = {
    "BOOL": "TYPE_BOOL", "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16",
    "UINT32": "TYPE_UINT32", "UINT64": "TYPE_UINT64", "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16", "INT32": "TYPE_INT32", "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16", "FP32": "TYPE_FP32", "FP64": "TYPE_FP64", "BF16": "TYPE_BF16",
    "BYTES": "TYPE_STRING",
}


def identity_config(name: str, type_name: str, max_batch_size: int = 0,
                    dims: str = "-1") -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0", data_type: {type_name}, dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0", data_type: {type_name}, dims: [ {dims} ] }} ]
"""


def write_model(repo: Path, name: str, config: str | None, model_py: str,
                version: int = 1) -> Path:
    """Write ``repo/name/config.pbtxt`` (unless None) and ``repo/name/<version>/model.py``."""
    folder = repo / name
    (folder / str(version)).mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.pbtxt").write_text(textwrap.dedent(config).lstrip())
    (folder / str(version) / "model.py").write_text(textwrap.dedent(model_py).lstrip())
    return folder


def standard_repository(repo: Path) -> Path:
    """The repository most end-to-end tests serve."""
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    for datatype, type_name in IDENTITY_TYPES.items():
        name = f"identity_{datatype.lower()}"
        write_model(repo, name, identity_config(name, type_name), IDENTITY_PY)
    write_model(repo, "identity_batch", identity_config("identity_batch", "TYPE_FP32", 8),
                IDENTITY_PY)
    write_model(repo, "raises", identity_config("raises", "TYPE_FP32"), RAISES_PY)
    write_model(repo, "broken_init", identity_config("broken_init", "TYPE_FP32"),
                BROKEN_INIT_PY)
    write_model(repo, "bad_config", "name: \"bad_config\"\nbackend: \"python\"\nnot_a_field: 1\n",
                IDENTITY_PY)
    return repo

"""Helpers for the Python backend tests: write a model into tmp_path, build its context
and requests. No server runs: the tests call ``PythonBackend`` and its instances directly.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.datatypes import numpy_to_datatype
from naiad.types import (
    InferenceClient,
    InferenceRequest,
    InstanceInfo,
    ModelContext,
    RequestedOutput,
    Tensor,
)

# Pins a test that reads the model object itself (``instance.model``) to in-process mode.
in_process_only = pytest.mark.parametrize("execution_mode", ["in_process"])

ADD_SUB_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

ADD_SUB_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = pb_utils.Tensor("OUTPUT0", (in0 + in1).astype("float32"))
            out1 = pb_utils.Tensor("OUTPUT1", (in0 - in1).astype("float32"))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
        return responses
"""


def write_model(root: Path, name: str, model_py: str, config: str | None = None,
                version: int = 1, files: dict[str, str] | None = None) -> Path:
    """``root/name/config.pbtxt`` and ``root/name/<version>/model.py`` (plus ``files``,
    relative to the version folder); returns the model folder."""
    model_dir = root / name
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(
        textwrap.dedent(config if config is not None else ADD_SUB_CONFIG).replace("{name}", name))
    (version_dir / "model.py").write_text(textwrap.dedent(model_py))
    for relative, text in (files or {}).items():
        path = version_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return model_dir


def parse_config(model_dir: Path) -> ModelConfig:
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), ModelConfig())


def context_for(model_dir: Path, config: ModelConfig | None = None,
                version: int = 1, server: InferenceClient | None = None) -> ModelContext:
    config = config if config is not None else parse_config(model_dir)
    return ModelContext(
        name=config.name or model_dir.name,
        version=version,
        config=config,
        model_dir=model_dir,
        version_dir=model_dir / str(version),
        repository=model_dir.parent,
        backend_config={},
        server=server,
    )


def instance_info(model_name: str, index: int = 0, kind: str = "KIND_CPU") -> InstanceInfo:
    return InstanceInfo(name=f"{model_name}_0_{index}", kind=kind, device_id=0, index=index)


def tensor(name: str, data: object, datatype: str | None = None) -> Tensor:
    array = data if isinstance(data, np.ndarray) else np.asarray(data)
    return Tensor(name, datatype or numpy_to_datatype(array.dtype), array.shape, array)


def request(model: str, inputs: dict[str, object], outputs: list[str] | None = None,
            parameters: dict[str, object] | None = None, id: str = "") -> InferenceRequest:
    return InferenceRequest(
        model_name=model,
        model_version=1,
        inputs={name: tensor(name, data) for name, data in inputs.items()},
        id=id,
        requested_outputs=None if outputs is None else [RequestedOutput(o) for o in outputs],
        parameters=dict(parameters or {}),
    )


def add_sub_request(model: str = "add_sub", **kwargs: object) -> InferenceRequest:
    return request(model, {"INPUT0": np.array([1, 2, 3, 4], np.float32),
                           "INPUT1": np.array([4, 3, 2, 1], np.float32)}, **kwargs)  # type: ignore[arg-type]

"""A model repository of Triton Python models for the gRPC end-to-end tests, written at test
time: add_sub, one identity model per datatype, a batching identity, a model that raises in
execute and one that fails to load."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

# V2 datatype -> numpy dtype of the test data (BYTES: object arrays of bytes)
DATATYPES = {
    "BOOL": np.bool_,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": ml_dtypes.bfloat16,
    "BYTES": np.object_,
}

ADD_SUB = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (in0 + in1).astype("float32")),
                pb_utils.Tensor("OUTPUT1", (in0 - in1).astype("float32")),
            ]))
        return responses
'''

IDENTITY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
'''

RAISES = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("raises: deliberate failure in execute")
'''

BROKEN = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("broken: deliberate failure in initialize")

    def execute(self, requests):
        return []
'''


def config_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def _config(name: str, datatype: str, dims: str, max_batch_size: int = 0,
            inputs: int = 1, outputs: int = 1) -> str:
    kind = config_type(datatype)
    ins = ", ".join(f'{{ name: "INPUT{i}" data_type: {kind} dims: [ {dims} ] }}'
                    for i in range(inputs))
    outs = ", ".join(f'{{ name: "OUTPUT{i}" data_type: {kind} dims: [ {dims} ] }}'
                     for i in range(outputs))
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
            f"input [ {ins} ]\noutput [ {outs} ]\n"
            f"instance_group [ {{ count: 1 kind: KIND_CPU }} ]\n")


def identity_name(datatype: str) -> str:
    return f"identity_{datatype.lower()}"


def _model(root: Path, name: str, config: str, source: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text(source)


def write_repository(root: Path) -> Path:
    """The test repository under ``root``; returns its path."""
    repo = root / "models"
    _model(repo, "add_sub", _config("add_sub", "FP32", "4", inputs=2, outputs=2), ADD_SUB)
    for datatype in DATATYPES:
        name = identity_name(datatype)
        _model(repo, name, _config(name, datatype, "-1"), IDENTITY)
    _model(repo, "identity_batch", _config("identity_batch", "FP32", "-1", max_batch_size=8),
           IDENTITY)
    _model(repo, "counted", _config("counted", "INT32", "-1"), IDENTITY)
    _model(repo, "raises", _config("raises", "FP32", "4"), RAISES)
    _model(repo, "broken", _config("broken", "FP32", "4"), BROKEN)
    return repo


def sample(datatype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Test data of ``datatype`` with awkward values (extremes, non-UTF-8 bytes)."""
    count = int(np.prod(shape))
    if datatype == "BYTES":
        values = [b"", b"hello", "wörld".encode(), b"\xff\x00\xfe"] * count
        return np.array(values[:count], dtype=np.object_).reshape(shape)
    if datatype == "BOOL":
        return (np.arange(count) % 3 == 0).reshape(shape)
    dtype = np.dtype(DATATYPES[datatype])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [info.min, info.max, 0, 1, info.max // 3, info.min // 7 if info.min else 7]
        return np.array((values * count)[:count], dtype=dtype).reshape(shape)
    values = [1.5, -2.25, 0.0, 1024.0, -0.125, 3.0]
    return np.array((values * count)[:count], dtype=np.float32).astype(dtype).reshape(shape)

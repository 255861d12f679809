"""The fixed requests of naiad's benchmarks, their expected answers, and the wire payloads.

Shared by the driver (``protocol_overhead.py``) and the two protocol floors
(``floors/``), so that the floors answer exactly what naiad must answer.

Two models:

- ``identity``: a Triton Python model, OUTPUT0 = INPUT0, FP32 ``[-1, 16]``,
  ``max_batch_size: 16`` (the shape of the shared bench's ``identity_py``);
  requests are batch 1, ``[1, 16]``.
- ``add_sub``: ``examples/model_repository/add_sub`` (Triton's tutorial model),
  INPUT0/INPUT1 FP32 ``[4]`` -> OUTPUT0 = sum, OUTPUT1 = difference.

Input values are multiples of 1/64, so they survive any JSON float formatting exactly.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

MODELS = ("identity", "add_sub")
GRPC_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"


def inputs(model: str) -> dict[str, np.ndarray]:
    """The fixed input tensors of one benchmark request."""
    rng = np.random.default_rng(7)
    if model == "identity":
        return {"INPUT0": (rng.integers(-128, 128, size=(1, 16)) / 64.0).astype(np.float32)}
    if model == "add_sub":
        return {"INPUT0": (rng.integers(-128, 128, size=4) / 64.0).astype(np.float32),
                "INPUT1": (rng.integers(-128, 128, size=4) / 64.0).astype(np.float32)}
    raise KeyError(model)


def expected(model: str) -> dict[str, np.ndarray]:
    """What the model must answer for :func:`inputs` (numpy reference)."""
    x = inputs(model)
    if model == "identity":
        return {"OUTPUT0": x["INPUT0"].copy()}
    return {"OUTPUT0": x["INPUT0"] + x["INPUT1"], "OUTPUT1": x["INPUT0"] - x["INPUT1"]}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def json_request(model: str) -> bytes:
    """The V2 JSON infer body, as tritonclient.http sends it with binary_data=False."""
    return _dumps({
        "inputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                    "data": [float(v) for v in a.reshape(-1)]} for n, a in inputs(model).items()],
        "outputs": [{"name": n, "parameters": {"binary_data": False}} for n in expected(model)],
    })


def binary_request(model: str) -> tuple[bytes, int]:
    """The V2 body with Triton's binary tensor extension (tritonclient.http's default
    mode): JSON header + raw tensor bytes. Returns (body, Inference-Header-Content-Length)."""
    ins = inputs(model)
    header = _dumps({
        "inputs": [{"name": n, "shape": list(a.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": a.nbytes}} for n, a in ins.items()],
        "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in expected(model)],
    })
    return header + b"".join(a.tobytes() for a in ins.values()), len(header)


def json_response(model: str) -> bytes:
    """A correct V2 JSON infer response (what the HTTP floor returns)."""
    return _dumps({
        "model_name": model, "model_version": "1",
        "outputs": [{"name": n, "datatype": "FP32", "shape": list(a.shape),
                     "data": [float(v) for v in a.reshape(-1)]}
                    for n, a in expected(model).items()],
    })


def grpc_request(model: str) -> Any:
    """ModelInferRequest as tritonclient.grpc builds it (tensor bytes in raw_input_contents)."""
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest(model_name=model, model_version="")
    for name, a in inputs(model).items():
        t = req.inputs.add()
        t.name, t.datatype = name, "FP32"
        t.shape.extend(a.shape)
        req.raw_input_contents.append(np.ascontiguousarray(a).tobytes())
    for name in expected(model):
        req.outputs.add().name = name
    return req


def grpc_response(model: str) -> Any:
    """A correct ModelInferResponse (what the gRPC floor returns)."""
    from tritonclient.grpc import service_pb2

    resp = service_pb2.ModelInferResponse(model_name=model, model_version="1")
    for name, a in expected(model).items():
        t = resp.outputs.add()
        t.name, t.datatype = name, "FP32"
        t.shape.extend(a.shape)
        resp.raw_output_contents.append(np.ascontiguousarray(a).tobytes())
    return resp


def grpc_frame(message: bytes) -> bytes:
    """A gRPC length-prefixed message: compressed flag (0) + 4-byte big-endian length."""
    return struct.pack(">BI", 0, len(message)) + message


def decode_grpc_response(data: bytes) -> dict[str, np.ndarray]:
    """Output tensors of a serialized ModelInferResponse (raw or typed contents)."""
    from tritonclient.grpc import service_pb2

    resp = service_pb2.ModelInferResponse.FromString(data)
    out = {}
    for i, t in enumerate(resp.outputs):
        if i < len(resp.raw_output_contents):
            a = np.frombuffer(resp.raw_output_contents[i], dtype=np.float32)
        else:
            a = np.asarray(t.contents.fp32_contents, dtype=np.float32)
        out[t.name] = a.reshape(tuple(t.shape))
    return out


def matches(got: dict[str, np.ndarray], model: str) -> bool:
    want = expected(model)
    return set(got) >= set(want) and all(
        np.array_equal(np.asarray(got[n], dtype=np.float32).reshape(a.shape), a)
        for n, a in want.items())


def identity_config() -> str:
    """config.pbtxt of the ``identity`` Triton Python model."""
    return """name: "identity"
backend: "python"
max_batch_size: 16
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""


IDENTITY_MODEL_PY = '''"""identity: OUTPUT0 = INPUT0 (FP32 [-1, 16]), a Triton Python model."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", np.ascontiguousarray(x))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses

    def finalize(self):
        pass
'''

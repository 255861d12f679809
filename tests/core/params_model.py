"""A one-model repository for the header tests: ``params`` answers every request with the
request's parameters, ``request.parameters()`` (a JSON object string), as its BYTES output
``PARAMS``. One model only, so a server starts fast."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from zoo import write_model

PARAMS_CONFIG = """
name: "params"
backend: "python"
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "PARAMS", data_type: TYPE_STRING, dims: [ 1 ] } ]
"""

PARAMS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "PARAMS", np.array([r.parameters().encode()], dtype=np.object_))])
            for r in requests]
"""

INPUT = np.ones(1, dtype=np.float32)


def params_repository(root: Path) -> Path:
    write_model(root, "params", PARAMS_CONFIG, PARAMS_PY)
    return root


def seen_parameters(result: object) -> dict:
    """The parameters the model saw, from a tritonclient (HTTP or gRPC) InferResult."""
    return json.loads(result.as_numpy("PARAMS")[0])  # type: ignore[attr-defined]

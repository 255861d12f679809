"""The backend conformance kit (naiad.testing.conformance) on TensorRT identity engines.

GPU only: the whole class skips, with the reason, where there is no NVIDIA GPU or no
tensorrt / cuda-bindings / onnx package (naiad's CI).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from backend_tensorrt_helpers import build_engine, gpu_skip_reason, onnx_graph

from naiad.testing.conformance import BackendConformance, IdentityModel

SKIP_REASON = gpu_skip_reason()
# Room past the kit's ELEMENTS_PER_ROW in every dynamic dimension but the batch one.
MAX_ELEMENTS = 64


@pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
class TestTensorRTConformance(BackendConformance):
    backend = "tensorrt"
    # I/O types a strongly typed TensorRT network passes through an Identity layer.
    datatypes = ("FP32", "FP16", "INT32", "INT64")

    def write_identity_model(self, version_dir: Path, datatype: str,
                             max_batch_size: int) -> IdentityModel:
        if max_batch_size > 0:
            dims: tuple[int, ...] = (-1, -1)
            profile = {"INPUT0": ((1, 1), (max_batch_size, 5),
                                  (max_batch_size, MAX_ELEMENTS))}
        else:
            dims = (-1,)
            profile = {"INPUT0": ((1,), (5,), (MAX_ELEMENTS,))}
        build_engine(onnx_graph("Identity", datatype, dims), [profile],
                     version_dir / "model.plan")
        return IdentityModel("INPUT0", "OUTPUT0")

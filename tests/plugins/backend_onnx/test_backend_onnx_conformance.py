"""The backend conformance kit (naiad.testing.conformance) run against the onnxruntime
backend: an ONNX Identity graph per datatype, [N, M] when batching, every dimension symbolic."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx_helpers import identity_model

from naiad.testing.conformance import BackendConformance, IdentityModel

# Every V2 datatype. ONNX string tensors hold UTF-8 text, so BYTES is claimed as text only
# (the backend answers raw non-UTF-8 bytes with 400, tested in test_onnx_serve.py).
DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
             "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES")


class TestOnnxConformance(BackendConformance):
    backend = "onnxruntime"
    datatypes = DATATYPES
    bytes_are_text = True

    def write_identity_model(self, version_dir: Path, datatype: str,
                             max_batch_size: int) -> IdentityModel:
        model = identity_model(datatype, batching=max_batch_size > 0)
        onnx.save_model(model, str(version_dir / "model.onnx"))
        return IdentityModel("INPUT0", "OUTPUT0")

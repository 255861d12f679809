"""naiad-backend-onnx: serves ONNX models (``model.onnx``) with ONNX Runtime, as Triton's
onnxruntime backend does (same config.pbtxt names, parameters and auto-complete)."""

from naiad_backend_onnx.backend import OnnxBackend
from naiad_backend_onnx.instance import OnnxModelInstance

__all__ = ["OnnxBackend", "OnnxModelInstance"]

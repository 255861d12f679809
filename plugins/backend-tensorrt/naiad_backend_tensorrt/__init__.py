"""naiad-backend-tensorrt: serves serialized TensorRT engines (``model.plan``) on NVIDIA GPUs
with the TensorRT 10+ Python API and NVIDIA's CUDA binding (``cuda.bindings``).

Neither tensorrt nor cuda is imported here: they load when a model needs them.
"""

from naiad_backend_tensorrt.backend import TensorRTBackend

__all__ = ["TensorRTBackend"]

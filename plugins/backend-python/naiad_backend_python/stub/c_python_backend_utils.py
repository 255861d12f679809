"""``c_python_backend_utils``: in Triton, the C++ module built into the stub that
``triton_python_backend_utils`` takes its classes from; some models import it directly
(Triton's QA: L0_backend_python's ``restart`` model reads ``shared_memory.free_memory()``).

In naiad those classes are written in Python, so this module hands out the very same objects
``triton_python_backend_utils`` does (``c_utils.Tensor is pb_utils.Tensor``), plus
``shared_memory``: the free bytes of the instance's shared memory region
(``naiad_stub_shared_memory`` says what that means in naiad). It is importable in both
execution modes, like ``triton_python_backend_utils``.
"""

from __future__ import annotations

import naiad_stub_shared_memory as _shared_memory
import triton_python_backend_utils as _pb_utils

TritonError = _pb_utils.TritonError
TritonModelException = _pb_utils.TritonModelException
PreferredMemory = _pb_utils.PreferredMemory
TRITONSERVER_MEMORY_GPU = _pb_utils.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = _pb_utils.TRITONSERVER_MEMORY_CPU
InferenceRequest = _pb_utils.InferenceRequest
Tensor = _pb_utils.Tensor
InferenceResponse = _pb_utils.InferenceResponse
InferenceResponseSender = _pb_utils.InferenceResponseSender
ResponseIterator = _pb_utils.ResponseIterator
Logger = _pb_utils.Logger
MetricFamily = _pb_utils.MetricFamily
load_model = _pb_utils.load_model
unload_model = _pb_utils.unload_model
is_model_ready = _pb_utils.is_model_ready

SharedMemory = _shared_memory.SharedMemory
shared_memory = _shared_memory.shared_memory

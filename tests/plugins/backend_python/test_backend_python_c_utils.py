"""``import c_python_backend_utils`` (Triton's C++ stub module, which some models import
directly, as L0_backend_python's ``restart`` model does): the same classes as
``triton_python_backend_utils``, and ``shared_memory.free_memory()``, the free bytes of the
instance's shared memory region (naiad_stub_shared_memory)."""

from __future__ import annotations

import numpy as np
from backend_python_helpers import request

MIB = 1024 * 1024

FREE_MEMORY_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "FREE" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "SAME" data_type: TYPE_BOOL dims: [ 1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

FREE_MEMORY_PY = """
import c_python_backend_utils as c_utils
import numpy as np
import triton_python_backend_utils as pb_utils

SAME = all(getattr(c_utils, name) is getattr(pb_utils, name) for name in (
    "Tensor", "InferenceRequest", "InferenceResponse", "TritonError",
    "TritonModelException", "Logger", "MetricFamily", "load_model"))


class TritonPythonModel:
    def execute(self, requests):
        free = c_utils.shared_memory.free_memory()
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("FREE", np.array([free], np.int64)),
            pb_utils.Tensor("SAME", np.array([SAME]))]) for _ in requests]
"""


def free_memory(instance, elements: int) -> int:
    [response] = instance.execute([request("free", {"IN": np.zeros(elements, np.float32)})])
    assert response.error is None, response.error
    out = {t.name: t.data for t in response.outputs}
    assert bool(out["SAME"][0]), "c_python_backend_utils hands out pb_utils' own classes"
    return int(out["FREE"][0])


def test_free_memory_is_what_the_region_has_left(load, execution_mode):
    instance = load("free", FREE_MEMORY_PY, FREE_MEMORY_CONFIG)
    small, large = 16, 128 * 1024 // 4  # 64 bytes (inline), 128 KiB (the region)
    assert free_memory(instance, small) == 0  # no region yet: the batch went inline
    if execution_mode == "in_process":  # no region ever: nothing crosses a process
        assert free_memory(instance, large) == 0
        return
    # The region the 128 KiB batch made (shm-default-byte-size, 1 MiB) less its input.
    during = free_memory(instance, large)
    assert MIB - 128 * 1024 - 4096 <= during <= MIB - 128 * 1024
    # Between batches the whole region is free: a small batch does not use it.
    assert free_memory(instance, small) == MIB
    assert free_memory(instance, large) == during  # the same region, nothing leaked

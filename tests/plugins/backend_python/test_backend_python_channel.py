"""Many batches in flight to one worker process: sent from several threads at once, small
ones inside their messages and large ones through the shared memory region (one at a time),
each answered with its own outputs."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from backend_python_helpers import context_for, instance_info, request, write_model

from naiad_backend_python import PythonBackend

IDENTITY_CONFIG = """
name: "{name}"
backend: "python"
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""

IDENTITY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                np.array(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()))])
                for r in requests]
"""


def test_concurrent_batches_of_every_size_get_their_own_answers(tmp_path):
    model_dir = write_model(tmp_path, "echo", IDENTITY_PY, IDENTITY_CONFIG)
    # A small region, so that large batches grow it, overflow it and wait for it.
    backend = PythonBackend({"shm-default-byte-size": "65536", "shm-growth-byte-size": "65536",
                             "shm-max-byte-size": "1048576"})
    instance = backend.create_instance(context_for(model_dir), instance_info("echo"))
    sizes = [4, 100, 20_000, 70_000, 300_000]  # elements: inline, region, past the region

    def one(i: int) -> bool:
        data = np.arange(sizes[i % len(sizes)], dtype=np.float32) + i
        [response] = instance.execute([request("echo", {"INPUT0": data})])
        assert response.error is None, response.error
        np.testing.assert_array_equal(response.outputs[0].data, data)
        return True

    try:
        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(one, range(200)))
        assert instance.in_flight == 0
    finally:
        instance.close()

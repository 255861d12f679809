"""A two-layer MLP (64 -> 128 -> 16, ReLU) with fixed numpy weights; each execute() call
also waits ``WAIT_MS`` milliseconds (config.pbtxt parameters), once per call, whatever the
number of requests in it."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.wait_s = float(config["parameters"]["WAIT_MS"]["string_value"]) / 1000
        rng = np.random.default_rng(0)
        self.w1 = rng.standard_normal((64, 128)).astype(np.float32)
        self.w2 = rng.standard_normal((128, 16)).astype(np.float32)

    def execute(self, requests):
        time.sleep(self.wait_s)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            hidden = np.maximum(x @ self.w1, 0)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", (hidden @ self.w2).astype(np.float32))]))
        return responses

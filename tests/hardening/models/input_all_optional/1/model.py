import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0: the sum of the inputs the request gave (optional ones may be absent)."""

    def initialize(self, args):
        self.names = [i["name"] for i in json.loads(args["model_config"])["input"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            total = np.zeros(1, np.float32)
            for name in self.names:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    total += tensor.as_numpy()
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", total)]))
        return responses

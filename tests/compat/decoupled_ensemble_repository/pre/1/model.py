"""Preprocessing: the prompt upper-cased, and how many pieces to make."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()[0]
            count = pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("WORD", np.array([prompt.upper()], dtype=object)),
                pb_utils.Tensor("TIMES", count.astype(np.int32))]))
        return responses

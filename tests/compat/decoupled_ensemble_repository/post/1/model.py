"""Postprocessing: each piece lower-cased, with its index times ten."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            piece = pb_utils.get_input_tensor_by_name(request, "PIECE").as_numpy()[0]
            index = int(pb_utils.get_input_tensor_by_name(request, "INDEX").as_numpy()[0])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "TEXT", np.array([piece.lower() + b"#%d" % (index * 10)], dtype=object))]))
        return responses

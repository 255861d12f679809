"""Decoupled, the shape of an LLM behind Triton's generate extension: `count` responses,
each with text_output "<text_input> <i>", its index and the request's parameters (JSON),
sent from execute; the last one carries the final flag (count 0: the final flag alone)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            count = int(pb_utils.get_input_tensor_by_name(request, "count").as_numpy()[0])
            prompt = text[0].decode() if isinstance(text[0], bytes) else str(text[0])
            sender = request.get_response_sender()
            for index in range(count):
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if index == count - 1 else 0
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("text_output",
                                    np.array([f"{prompt} {index}".encode()], dtype=np.object_)),
                    pb_utils.Tensor("index", np.array([index], dtype=np.int32)),
                    pb_utils.Tensor("parameters",
                                    np.array([request.parameters().encode()], dtype=np.object_)),
                ]), flags=flags)
            if count <= 0:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

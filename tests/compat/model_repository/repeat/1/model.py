"""Decoupled: one response per element of IN (OUT = the element, IDX = its index), sent
from a thread of the model's own after execute returned, then the final flag alone. A
negative element is an error response in the middle of the stream; the stream goes on.
IN of shape [0]: no response, only the final flag."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            returned = threading.Event()
            threading.Thread(target=self._respond,
                             args=(request.get_response_sender(), values, returned),
                             daemon=True).start()
            returned.set()
        return None

    def _respond(self, sender, values, returned):
        returned.wait()
        for index, value in enumerate(values.tolist()):
            if value < 0:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"repeat: negative value {value} at index {index}")))
                continue
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

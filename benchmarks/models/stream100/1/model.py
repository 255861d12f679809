"""N small responses per request, sent from execute through the request's response sender
(Triton's decoupled API); the last one carries TRITONSERVER_RESPONSE_COMPLETE_FINAL, so a
request costs N messages and no empty final one."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            if count <= 0:
                sender.send(flags=final)
                continue
            for index in range(count):
                out = pb_utils.Tensor("OUT", np.array([index], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]),
                            flags=final if index == count - 1 else 0)
        return None

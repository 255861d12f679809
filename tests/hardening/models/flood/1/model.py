import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            size = int(pb_utils.get_input_tensor_by_name(request, "SIZE").as_numpy()[0])
            sender = request.get_response_sender()
            for number in range(count):
                if request.is_cancelled():
                    break
                data = np.full(size, number % 256, dtype=np.uint8)
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", data)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

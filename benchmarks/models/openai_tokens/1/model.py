"""A decoupled "LLM" without a model: max_tokens responses of one short word each, as fast
as the sender takes them (what is measured is the serving path, not generation)."""
import numpy as np
import triton_python_backend_utils as pb_utils

WORD = np.array([[b"tok "]], dtype=object)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            limit = pb_utils.get_input_tensor_by_name(request, "max_tokens")
            count = 16 if limit is None else int(limit.as_numpy().reshape(-1)[0])
            for _ in range(count):
                if request.is_cancelled():
                    break
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", WORD)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

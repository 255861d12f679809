"""Every request gets a response carrying a TritonError."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[], error=pb_utils.TritonError("error_response: deliberate error")
            )
            for _ in requests
        ]

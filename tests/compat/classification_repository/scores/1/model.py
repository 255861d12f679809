import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Answers its input as OUTPUT0 (and as OUTPUT1, which has no labels)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data),
                                                         pb_utils.Tensor("OUTPUT1", data)]))
        return responses

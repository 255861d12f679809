import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Answers its INT32 input as OUTPUT0."""

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]

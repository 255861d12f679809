"""The backend conformance kit (naiad.testing.conformance) run on the Python backend."""

from __future__ import annotations

from pathlib import Path

from naiad.datatypes import datatype_to_config
from naiad.testing.conformance import BackendConformance, IdentityModel

# A Triton Python model that echoes its input. Its auto_complete_config declares the tensors
# and max_batch_size, which is how a Python model fills a config that leaves them out.
IDENTITY_MODEL_PY = '''\
import triton_python_backend_utils as pb_utils

INPUT = "INPUT0"
OUTPUT = "OUTPUT0"
DATA_TYPE = "{data_type}"
MAX_BATCH_SIZE = {max_batch_size}


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {{"name": INPUT, "data_type": DATA_TYPE, "dims": [-1]}})
        auto_complete_model_config.add_output(
            {{"name": OUTPUT, "data_type": DATA_TYPE, "dims": [-1]}})
        auto_complete_model_config.set_max_batch_size(MAX_BATCH_SIZE)
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, INPUT).as_numpy()
            output = pb_utils.Tensor(OUTPUT, data)
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
'''


class TestPythonBackendConformance(BackendConformance):
    backend = "python"
    # Every V2 datatype: pb_utils tensors carry each one as numpy (BF16 as ml_dtypes.bfloat16,
    # BYTES as an object array of bytes). The kit sends BF16 as binary data only.
    datatypes = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                 "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES")

    def write_identity_model(self, version_dir: Path, datatype: str,
                             max_batch_size: int) -> IdentityModel:
        (version_dir / "model.py").write_text(IDENTITY_MODEL_PY.format(
            data_type=datatype_to_config(datatype), max_batch_size=max_batch_size))
        return IdentityModel("INPUT0", "OUTPUT0")

"""naiad's backend conformance kit, run against the OpenVINO backend with identity IR models
built with OpenVINO's graph API, for every datatype Triton's openvino backend maps."""

from __future__ import annotations

from pathlib import Path

import pytest
from openvino_helpers import identity_ir

from naiad.testing.conformance import BackendConformance, IdentityModel

pytest.importorskip("naiad_backend_openvino", reason="naiad-backend-openvino is not installed")
from naiad_backend_openvino.types import DATATYPE_TO_OV

# INT64 is served (Triton's backend maps it), but OpenVINO's CPU plugin computes 64-bit
# signed integers in 32 bits, so the kit's extreme values (int64 min and max) do not come
# back; test_openvino_serve.py checks INT64 within the 32-bit range.
DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "FP16",
             "FP32")
IDENTITY = IdentityModel(input_name="INPUT0", output_name="OUTPUT0")


def test_the_kit_covers_every_datatype_the_backend_claims():
    assert set(DATATYPES) | {"INT64"} == set(DATATYPE_TO_OV)


class TestOpenVinoConformance(BackendConformance):
    backend = "openvino"
    datatypes = DATATYPES

    def write_identity_model(self, version_dir: Path, datatype: str,
                             max_batch_size: int) -> IdentityModel:
        batching = max_batch_size > 0
        identity_ir(version_dir / "model.xml", datatype, 2 if batching else 1,
                    IDENTITY.input_name, IDENTITY.output_name, batch_layout=batching)
        return IDENTITY

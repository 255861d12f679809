"""naiad's backend conformance kit, run against the PyTorch backend twice: with TorchScript
identity models (which carry no shapes, so no auto-complete) and with torch.export programs
(which do: the config-less model is filled from the program)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from backend_torch_helpers import SCRIPT_IS_DEPRECATED, Identity

from naiad.testing.conformance import BackendConformance, IdentityModel
from naiad_backend_torch.dtypes import TORCH_DTYPES

pytestmark = pytest.mark.filterwarnings(SCRIPT_IS_DEPRECATED)

# Every V2 datatype the backend serves (all but BYTES), in the kit's order.
DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16")
IDENTITY = IdentityModel(input_name="INPUT__0", output_name="OUTPUT__0")


def test_the_kit_covers_every_datatype_the_backend_claims():
    assert set(DATATYPES) == set(TORCH_DTYPES)


class TestTorchScriptConformance(BackendConformance):
    backend = "pytorch"
    datatypes = DATATYPES
    auto_complete = False  # TorchScript records no datatypes or shapes

    def write_identity_model(self, version_dir: Path, datatype: str,
                             max_batch_size: int) -> IdentityModel:
        torch.jit.script(Identity()).save(str(version_dir / "model.pt"))
        return IDENTITY


class TestTorchExportConformance(BackendConformance):
    backend = "pytorch"
    datatypes = DATATYPES
    auto_complete = True

    def write_identity_model(self, version_dir: Path, datatype: str,
                             max_batch_size: int) -> IdentityModel:
        # Dims [-1] past the batch dimension: every dimension of the example is dynamic.
        rank = 2 if max_batch_size > 0 else 1
        example = torch.zeros((2, 3)[:rank], dtype=TORCH_DTYPES[datatype])
        dynamic = {i: torch.export.Dim.DYNAMIC for i in range(rank)}
        program = torch.export.export(Identity(), (example,),
                                      dynamic_shapes={"INPUT__0": dynamic})
        # Saved as model.pt, the file name the core recognizes in a folder without config.
        buffer = io.BytesIO()
        torch.export.save(program, buffer)
        (version_dir / "model.pt").write_bytes(buffer.getvalue())
        return IDENTITY

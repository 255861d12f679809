"""naiad's backend conformance kit, run against the TensorFlow backend with identity
SavedModels (``tf.identity`` behind a ``serving_default`` signature), one per datatype.

Long (``pytest -m long``): it imports TensorFlow into the test process and saves some thirty
SavedModels, which takes longer than the default run allows; test_tensorflow_serve.py covers
the backend in the default run.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from naiad.testing.conformance import BackendConformance, IdentityModel

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("tensorflow (tensorflow-cpu) is not installed", allow_module_level=True)
if importlib.util.find_spec("naiad_backend_tensorflow") is None:
    pytest.skip("naiad-backend-tensorflow is not installed", allow_module_level=True)

pytestmark = pytest.mark.long

DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BYTES")
TF_TYPES = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32",
            "UINT64": "uint64", "INT8": "int8", "INT16": "int16", "INT32": "int32",
            "INT64": "int64", "FP16": "float16", "FP32": "float32", "FP64": "float64",
            "BYTES": "string"}
IDENTITY = IdentityModel(input_name="INPUT0", output_name="OUTPUT0")


def test_the_kit_covers_every_datatype_the_backend_maps():
    from naiad_backend_tensorflow.model import TF_TO_DATATYPE

    assert set(DATATYPES) == set(TF_TO_DATATYPE.values())


class TestTensorFlowConformance(BackendConformance):
    backend = "tensorflow"
    datatypes = DATATYPES

    def write_identity_model(self, version_dir: Path, datatype: str,
                             max_batch_size: int) -> IdentityModel:
        import tensorflow as tf

        shape = [None, None] if max_batch_size > 0 else [None]
        spec = tf.TensorSpec(shape, getattr(tf, TF_TYPES[datatype]),
                             name=IDENTITY.input_name)
        module = tf.Module()
        module.serve = tf.function(
            lambda x: {IDENTITY.output_name: tf.identity(x)}, input_signature=[spec])
        tf.saved_model.save(module, str(version_dir / "model.savedmodel"),
                            signatures={"serving_default": module.serve})
        return IDENTITY

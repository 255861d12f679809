"""TensorRT <-> Triton data type tables, by name: no tensorrt module needed."""

from __future__ import annotations

import enum

import pytest
from tritonclient.grpc.model_config_pb2 import DataType

from naiad.datatypes import NUMPY_DTYPES, config_to_datatype
from naiad.errors import InferenceServerError, Status
from naiad_backend_tensorrt.dtypes import (
    CONFIG_TO_TRT,
    NO_TRITON_TYPE,
    TRT_TO_CONFIG,
    config_type,
    numpy_dtype,
    trt_type,
    trt_type_name,
)

# Bytes per element of each TensorRT type (trt.DataType.itemsize in TensorRT 10/11).
TRT_ITEM_SIZES = {"FLOAT": 4, "HALF": 2, "BF16": 2, "INT8": 1, "INT32": 4, "INT64": 8,
                  "BOOL": 1, "UINT8": 1}


def test_tables_round_trip():
    assert {trt: CONFIG_TO_TRT[config] for trt, config in TRT_TO_CONFIG.items()} == {
        trt: trt for trt in TRT_TO_CONFIG}
    for config, trt in CONFIG_TO_TRT.items():
        assert trt_type(config, "t") == trt
        assert config_type(trt, "t") == config


def test_the_mapping_is_tritons():
    assert TRT_TO_CONFIG == {
        "FLOAT": "TYPE_FP32", "HALF": "TYPE_FP16", "BF16": "TYPE_BF16", "INT8": "TYPE_INT8",
        "INT32": "TYPE_INT32", "INT64": "TYPE_INT64", "BOOL": "TYPE_BOOL",
        "UINT8": "TYPE_UINT8"}


@pytest.mark.parametrize("trt_name", sorted(TRT_TO_CONFIG))
def test_every_mapped_type_is_a_config_enum_with_a_host_dtype_of_the_same_size(trt_name):
    config = TRT_TO_CONFIG[trt_name]
    assert DataType.Value(config)  # a real ModelConfig enum name
    dtype = numpy_dtype(trt_name, "t")
    assert dtype == NUMPY_DTYPES[config_to_datatype(config)]
    assert dtype.itemsize == TRT_ITEM_SIZES[trt_name]


@pytest.mark.parametrize("trt_name", sorted(NO_TRITON_TYPE))
def test_types_without_a_triton_datatype_are_refused_by_name(trt_name):
    with pytest.raises(InferenceServerError) as caught:
        config_type(trt_name, "model 'm': input 'x'")
    assert caught.value.status is Status.UNSUPPORTED
    assert f"model 'm': input 'x' has TensorRT type {trt_name}" in caught.value.message
    assert "8-bit float or sub-byte" in caught.value.message


@pytest.mark.parametrize("config", ["TYPE_STRING", "TYPE_FP64", "TYPE_UINT16", "TYPE_INT16"])
def test_config_types_tensorrt_lacks_are_refused(config):
    with pytest.raises(InferenceServerError, match=f"has data_type {config}"):
        trt_type(config, "input 'x'")


def test_trt_type_name_reads_the_member_name():
    # pybind11 enum members (trt.DataType.FLOAT) expose .name like a Python enum member.
    data_type = enum.Enum("DataType", ["FLOAT", "HALF"])
    assert trt_type_name(data_type.HALF) == "HALF"
    assert trt_type_name("DataType.INT64") == "INT64"

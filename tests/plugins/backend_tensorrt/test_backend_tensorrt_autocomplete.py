"""Auto-complete and config checks on plain engine descriptions (what ``read_engine_io``
returns), following Triton's TensorRT backend: no device, no tensorrt module."""

from __future__ import annotations

import pytest
from backend_tensorrt_helpers import batching_engine, parse_config, tensor
from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import DataType

from naiad.config.defaults import fill_defaults
from naiad.config.validate import validate_config
from naiad.errors import InferenceServerError, Status
from naiad_backend_tensorrt.autocomplete import (
    check_config,
    complete_config,
    engine_max_batch_size,
)
from naiad_backend_tensorrt.engine_io import EngineIO
from naiad_backend_tensorrt.instance import client_shape

BARE = 'name: "m"\nplatform: "tensorrt_plan"\n'


def _io(config) -> list[tuple[str, str, list[int], bool]]:
    return [(t.name, DataType.Name(t.data_type), list(t.dims), t.HasField("reshape"))
            for t in (*config.input, *config.output)]


def test_a_config_without_tensors_gets_the_engines():
    config = parse_config(BARE)
    filled = complete_config(config, batching_engine((8,)), "m")
    assert filled == ["max_batch_size", "dynamic_batching", "input", "output"]
    assert config.max_batch_size == 8
    assert config.HasField("dynamic_batching")
    assert _io(config) == [("INPUT0", "TYPE_FP32", [4], False),
                           ("OUTPUT0", "TYPE_FP32", [4], False)]
    # What auto-complete produced passes the core's own defaults and validation.
    fill_defaults(config, "m", gpus=[0])
    validate_config(config, "m")


def test_max_batch_size_comes_from_the_profiles_the_instance_groups_use():
    engine = batching_engine((4, 16))
    default = parse_config(BARE)
    complete_config(default, engine, "m")
    assert default.max_batch_size == 4  # profile 0 only, as in Triton
    both = parse_config(BARE + 'instance_group [ { kind: KIND_GPU, profile: ["0", "1"] } ]')
    complete_config(both, engine, "m")
    assert both.max_batch_size == 16


def test_the_smallest_input_limit_bounds_a_profile():
    engine = EngineIO((
        tensor("A", (-1, 2), profiles=[((1, 2), (4, 2), (8, 2))]),
        tensor("B", (-1, 3), profiles=[((1, 3), (2, 3), (6, 3))]),
        tensor("Y", (-1, 5), is_input=False),
    ))
    assert engine_max_batch_size(engine, [0]) == 6


def test_an_engine_with_a_fixed_leading_dimension_does_not_batch():
    engine = EngineIO((tensor("INPUT0", (3, 4), dtype="HALF", profiles=[((3, 4),) * 3]),
                       tensor("OUTPUT0", (3, 4), dtype="HALF", is_input=False)))
    config = parse_config(BARE)
    assert complete_config(config, engine, "m") == ["input", "output"]
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert _io(config) == [("INPUT0", "TYPE_FP16", [3, 4], False),
                           ("OUTPUT0", "TYPE_FP16", [3, 4], False)]


def test_an_output_without_a_dynamic_leading_dimension_stops_batching():
    engine = EngineIO((tensor("INPUT0", (-1, 4), profiles=[((1, 4), (2, 4), (8, 4))]),
                       tensor("OUTPUT0", (1,), is_input=False)))
    assert engine_max_batch_size(engine, [0]) == 0


def test_a_batch_of_one_does_not_get_a_dynamic_batcher():
    config = parse_config(BARE)
    complete_config(config, batching_engine((1,)), "m")
    assert config.max_batch_size == 1
    assert not config.HasField("dynamic_batching")


def test_a_configured_batcher_is_kept():
    config = parse_config(BARE + "sequence_batching { }")
    assert "dynamic_batching" not in complete_config(config, batching_engine((8,)), "m")
    assert not config.HasField("dynamic_batching")


def test_a_per_item_scalar_becomes_dims_1_with_an_empty_reshape():
    engine = EngineIO((tensor("X", (-1,), dtype="INT64", profiles=[((1,), (4,), (8,))]),
                       tensor("Y", (-1,), dtype="BOOL", is_input=False)))
    config = parse_config(BARE)
    complete_config(config, engine, "m")
    assert _io(config) == [("X", "TYPE_INT64", [1], True), ("Y", "TYPE_BOOL", [1], True)]
    assert list(config.input[0].reshape.shape) == []
    fill_defaults(config, "m", gpus=[0])
    validate_config(config, "m")


def test_listed_tensors_only_get_what_they_leave_out():
    config = parse_config(BARE + 'input [ { name: "INPUT0" } ]\n'
                                 'output [ { name: "OUTPUT0", data_type: TYPE_FP32 } ]')
    filled = complete_config(config, batching_engine((8,)), "m")
    assert "input" in filled and "output" in filled
    assert _io(config) == [("INPUT0", "TYPE_FP32", [4], False),
                           ("OUTPUT0", "TYPE_FP32", [4], False)]


def test_a_complete_config_changes_nothing():
    text = (BARE + "max_batch_size: 4\ndynamic_batching { }\n"
            'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
            'output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n')
    config = parse_config(text)
    assert complete_config(config, batching_engine((8,)), "m") == []
    assert json_format.MessageToDict(config) == json_format.MessageToDict(parse_config(text))


def test_dims_as_long_as_the_engines_mean_no_batching():
    # Triton's hint: dims that spell out the engine's full shape leave no batch dimension.
    config = parse_config(BARE + 'input [ { name: "INPUT0", data_type: TYPE_FP32, '
                                 'dims: [ -1, 4 ] } ]')
    complete_config(config, batching_engine((8,)), "m")
    assert config.max_batch_size == 0
    assert [list(t.dims) for t in config.output] == [[-1, 4]]


def test_dims_that_disagree_on_batching_are_refused():
    config = parse_config(BARE + 'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [4] } ]'
                                 '\noutput [ { name: "OUTPUT0", data_type: TYPE_FP32, '
                                 'dims: [ -1, 4 ] } ]')
    with pytest.raises(InferenceServerError, match="disagree on batching"):
        complete_config(config, batching_engine((8,)), "m")


def test_batching_dims_for_an_engine_that_cannot_batch_are_refused():
    engine = EngineIO((tensor("INPUT0", (3, 4), profiles=[((3, 4),) * 3]),
                       tensor("OUTPUT0", (3, 4), is_input=False)))
    config = parse_config(BARE + 'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [4] } ]')
    with pytest.raises(InferenceServerError, match="the TensorRT engine cannot batch"):
        complete_config(config, engine, "m")


def test_a_max_batch_size_above_the_profiles_is_refused():
    config = parse_config(BARE + "max_batch_size: 32")
    with pytest.raises(InferenceServerError) as caught:
        complete_config(config, batching_engine((4, 64)), "m")
    assert caught.value.message == (
        "model 'm': max_batch_size is 32, but the TensorRT engine's optimization profiles "
        "used by the instance groups accept batches of at most 4")


def test_tensor_names_the_engine_lacks_are_refused():
    config = parse_config(BARE + 'input [ { name: "IMAGE" } ]')
    with pytest.raises(InferenceServerError) as caught:
        complete_config(config, batching_engine(), "resnet")
    assert caught.value.message == (
        "model 'resnet': configuration input 'IMAGE' is not an input of the TensorRT engine, "
        "whose inputs are 'INPUT0'")


@pytest.mark.parametrize(("flag", "expected"), [
    ({"is_shape_tensor": True}, "is a shape tensor"),
    ({"layout": "CHW32"}, "uses the I/O format CHW32; rebuild the engine with the LINEAR"),
    ({"layout": "HWC"}, "uses the I/O format HWC"),  # not vectorized, still not row-major
])
def test_io_the_backend_cannot_feed_is_refused(flag, expected):
    engine = EngineIO((tensor("INPUT0", (2,), profiles=[((2,),) * 3], **flag),
                       tensor("OUTPUT0", (2,), is_input=False)))
    with pytest.raises(InferenceServerError) as caught:
        complete_config(parse_config(BARE), engine, "m")
    assert caught.value.status is Status.UNSUPPORTED
    assert f"model 'm': input 'INPUT0' {expected}" in caught.value.message


def test_fp8_outputs_are_refused():
    engine = EngineIO((tensor("INPUT0", (2,), profiles=[((2,),) * 3]),
                       tensor("OUTPUT0", (2,), dtype="FP8", is_input=False)))
    with pytest.raises(InferenceServerError, match="output 'OUTPUT0' has TensorRT type FP8"):
        complete_config(parse_config(BARE), engine, "m")


# --- check_config: a given config against the engine -------------------------------------

CHECKED = (BARE + "max_batch_size: 8\n"
           'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
           'output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n')


def test_a_matching_config_passes():
    check_config(parse_config(CHECKED), batching_engine((8,)), "m")


@pytest.mark.parametrize(("change", "expected"), [
    (("TYPE_FP32, dims: [ 4 ] } ]\noutput", "TYPE_FP16, dims: [ 4 ] } ]\noutput"),
     "input 'INPUT0' has data_type TYPE_FP16 in the configuration, but the TensorRT engine's "
     "tensor is FLOAT, which is TYPE_FP32"),
    (("dims: [ 4 ] } ]\noutput", "dims: [ 5 ] } ]\noutput"),
     "input 'INPUT0': the configuration gives the engine the shape [-1,5] (the batch "
     "dimension -1 and dims), but the TensorRT engine's tensor has shape [-1,4]"),
    (("dims: [ 4 ] } ]\noutput", "dims: [ -1 ] } ]\noutput"),
     "shape [-1,-1]"),  # a -1 where the engine is fixed would let bad requests through
    (("max_batch_size: 8", "max_batch_size: 9"), "accept batches of at most 8"),
])
def test_a_config_that_disagrees_with_the_engine_is_refused(change, expected):
    assert change[0] in CHECKED
    config = parse_config(CHECKED.replace(*change))
    with pytest.raises(InferenceServerError) as caught:
        check_config(config, batching_engine((8,)), "m")
    assert expected in caught.value.message
    assert "model 'm'" in caught.value.message


def test_every_engine_input_must_be_configured():
    engine = EngineIO((*batching_engine().tensors,
                       tensor("MASK", (-1, 4), dtype="BOOL", profiles=[((1, 4), (4, 4),
                                                                        (8, 4))])))
    with pytest.raises(InferenceServerError, match="needs input\\(s\\) 'MASK'"):
        check_config(parse_config(CHECKED), engine, "m")


def test_outputs_may_be_a_subset():
    engine = EngineIO((*batching_engine().tensors,
                       tensor("EXTRA", (-1, 2), is_input=False)))
    check_config(parse_config(CHECKED), engine, "m")


# --- output shapes with reshape ---------------------------------------------------------

@pytest.mark.parametrize(("engine_shape", "dims", "reshape", "batching", "expected"), [
    ((5,), (1,), (), True, (5, 1)),  # batching scalar: [batch] -> [batch, 1]
    ((5, 2, 3), (6,), (2, 3), True, (5, 6)),
    ((2, 7), (-1, 2), (2, -1), False, (7, 2)),  # the -1 takes the engine's dynamic size
    ((3, 4), (12,), (3, 4), False, (12,)),
])
def test_client_shape(engine_shape, dims, reshape, batching, expected):
    assert client_shape(engine_shape, dims, reshape, batching) == expected

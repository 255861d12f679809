"""validate_config: the load-time checks of tritonserver 2.51, with messages naming the model,
the tensor and what was expected. "Triton:" comments quote what 2.51 answered for the same
config (from its load error), to show the rule is Triton's."""

from __future__ import annotations

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.config.defaults import fill_defaults
from naiad.config.parse import parse_config_text
from naiad.config.platforms import resolve_backend
from naiad.config.validate import validate_config
from naiad.errors import InferenceServerError, Status

INPUTS = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
OUTPUTS = """
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
IO = INPUTS + OUTPUTS


def configure(text: str, name: str = "m", gpus: tuple[int, ...] = ()) -> ModelConfig:
    """Parse, resolve the backend, fill defaults and validate, as the manager does."""
    config = parse_config_text(text, f"{name}/config.pbtxt")
    resolve_backend(config, name)
    fill_defaults(config, name, gpus=gpus)
    validate_config(config, name)
    return config


GOOD = {
    "minimal": 'backend: "python"' + IO,
    "no inputs at all": 'backend: "python"',
    "batching": 'backend: "python" max_batch_size: 8 dynamic_batching { }' + IO,
    # Triton 2.51 loads dynamic batching on a non-batching model (requests then run alone).
    "dynamic batching without batching": 'backend: "python" dynamic_batching { }' + IO,
    "variable dims": """backend: "python" max_batch_size: 4
        input [ { name: "T" data_type: TYPE_STRING dims: [ -1, -1 ] optional: true } ]""",
    "reshape with wildcards": """backend: "python"
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 2, 4, -1, 6 ]
                  reshape { shape: [ 8, -1, 1, 6 ] } } ]""",
    "scalar per batch item": """backend: "python" max_batch_size: 8
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } } ]""",
    "specific versions ignoring impossible ones": """backend: "python"
        version_policy { specific { versions: [ -1, 1 ] } }""",
    "kind model": 'backend: "python" instance_group [ { kind: KIND_MODEL } ]',
    "sequence controls": """backend: "python" max_batch_size: 8
        sequence_batching {
          oldest { preferred_batch_size: [ 4 ] }
          control_input [
            { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] },
            { name: "ID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ]
        }""",
    "priorities": """backend: "python" max_batch_size: 8
        dynamic_batching { priority_levels: 3 default_priority_level: 2
                           priority_queue_policy { key: 3 value { max_queue_size: 4 } } }""",
    "ensemble": """platform: "ensemble"
        input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
        ensemble_scheduling { step [ { model_name: "add_sub"
          input_map { key: "INPUT0" value: "A" } output_map { key: "OUTPUT0" value: "B" } } ] }""",
}


@pytest.mark.parametrize("text", list(GOOD.values()), ids=list(GOOD))
def test_good_configs_pass(text: str) -> None:
    configure(text)


def test_gpu_group_passes_when_a_gpu_is_there() -> None:
    configure('backend: "python" instance_group [ { kind: KIND_GPU } ]' + IO, gpus=(0,))


BAD = {
    # Triton: unexpected directory name 'm' for model 'other', directory name must equal ...
    "name mismatch": ('name: "other" backend: "python"' + IO,
                      ["'other'", "folder is 'm'", "must equal"]),
    # Triton: 'max_batch_size' must be non-negative value for m
    "negative max_batch_size": ('backend: "python" max_batch_size: -1' + IO,
                                ["max_batch_size must be >= 0", "got -1"]),
    # Triton: model input must specify 'name' for m
    "input without name": ('backend: "python" input [ { data_type: TYPE_FP32 dims: [ 4 ] } ]',
                           ["an input has no 'name'"]),
    # Triton: model input 'INPUT0' must specify 'data_type' for m
    "input without data_type": ('backend: "python" input [ { name: "INPUT0" dims: [ 4 ] } ]',
                                ["input 'INPUT0'", "no 'data_type'"]),
    # Triton: model input 'INPUT0' must specify 'dims' for m  (also with max_batch_size > 0)
    "empty dims": ('backend: "python" max_batch_size: 8 '
                   'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ ] } ]',
                   ["input 'INPUT0'", "no 'dims'"]),
    # Triton: model output 'OUTPUT0' dimension must be integer >= 1, or -1 to indicate ...
    "zero dim": ('backend: "python" output [ { name: "OUTPUT0" data_type: TYPE_FP32 '
                 'dims: [ 0, 4 ] } ]', ["output 'OUTPUT0'", ">= 1 or -1", "[0, 4]"]),
    "dim below -1": ('backend: "python" input [ { name: "X" data_type: TYPE_FP32 dims: [ -2 ] } ]',
                     ["input 'X'", ">= 1 or -1", "[-2]"]),
    # naiad only: Triton 2.51 loads duplicate names, leaving requests ambiguous.
    "duplicate input": ('backend: "python" input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] },'
                        '{ name: "A" data_type: TYPE_FP32 dims: [ 1 ] } ]',
                        ["input 'A'", "declared twice", "unique"]),
    "duplicate output": ('backend: "python" output [ { name: "B" data_type: TYPE_FP32 dims: [1] },'
                         '{ name: "B" data_type: TYPE_INT8 dims: [ 1 ] } ]',
                         ["output 'B'", "declared twice"]),
    # Triton: model input 'INPUT0' has different size for dims and reshape for m
    "bad reshape": ('backend: "python" input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] '
                    'reshape { shape: [ 3 ] } } ]', ["input 'INPUT0'", "[4]", "[3]"]),
    "reshape with misplaced wildcard": (
        'backend: "python" input [ { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1, 4 ] '
        'reshape { shape: [ 4, -1 ] } } ]', ["input 'INPUT1'", "[-1, 4]", "[4, -1]"]),
    "reshape zero": ('backend: "python" output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] '
                     'reshape { shape: [ 0 ] } } ]', ["output 'Y'", "reshape shape", "[0]"]),
    # Triton: ... cannot have empty reshape for non-batching model as scalar tensors are not ...
    "empty reshape without batching": (
        'backend: "python" input [ { name: "S" data_type: TYPE_FP32 dims: [ 1 ] '
        'reshape { shape: [ ] } } ]', ["input 'S'", "empty reshape", "max_batch_size > 0"]),
    "empty reshape of many elements": (
        'backend: "python" max_batch_size: 2 input [ { name: "S" data_type: TYPE_FP32 '
        'dims: [ 2 ] reshape { shape: [ ] } } ]', ["input 'S'", "exactly 1 element", "[2]"]),
    # Triton: model input NHWC/NCHW require 3 dims for m
    "nhwc needs 3 dims": ('backend: "python" input [ { name: "IMG" data_type: TYPE_UINT8 '
                          'format: FORMAT_NHWC dims: [ 4 ] } ]',
                          ["input 'IMG'", "FORMAT_NHWC", "3 dims"]),
    # Triton: shape tensors are only supported for TensorRT platform for m
    "shape tensor outside tensorrt": (
        'backend: "python" input [ { name: "SH" data_type: TYPE_INT32 dims: [ 2 ] '
        'is_shape_tensor: true } ]', ["input 'SH'", "is_shape_tensor", "TensorRT"]),
    # Triton: dynamic batching preferred size must be <= max batch size for m
    "preferred above max": ('backend: "python" max_batch_size: 4 '
                            'dynamic_batching { preferred_batch_size: [ 2, 8 ] }' + IO,
                            ["preferred_batch_size 8", "max_batch_size 4"]),
    # Triton: dynamic batching preferred size must be positive for m
    "preferred zero": ('backend: "python" max_batch_size: 4 '
                       'dynamic_batching { preferred_batch_size: [ 0 ] }' + IO,
                       ["preferred_batch_size must be positive", "got 0"]),
    "preferred without batching": ('backend: "python" '
                                   'dynamic_batching { preferred_batch_size: [ 2 ] }' + IO,
                                   ["preferred_batch_size 2", "max_batch_size 0"]),
    # Triton: default priority level must be in range [1, 2] for m
    "default priority level": ('backend: "python" max_batch_size: 4 '
                               'dynamic_batching { priority_levels: 2 }' + IO,
                               ["default_priority_level", "[1, 2]", "got 0"]),
    "queue policy level": ('backend: "python" max_batch_size: 4 dynamic_batching { '
                           'priority_levels: 2 default_priority_level: 1 '
                           'priority_queue_policy { key: 5 value { } } }' + IO,
                           ["priority_queue_policy level 5", "[1, 2]"]),
    "preserve ordering with delay": (
        'backend: "python" max_batch_size: 4 dynamic_batching { preserve_ordering: true '
        'default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }' + IO,
        ["preserve_ordering", "DELAY"]),
    # Triton: unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed ...
    "corrid of floats": ('backend: "python" max_batch_size: 8 sequence_batching { control_input '
                         '[ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID '
                         'data_type: TYPE_FP32 } ] } ] }' + IO,
                         ["control tensor 'CORRID'", "TYPE_UINT64", "got TYPE_FP32"]),
    "start without values": ('backend: "python" max_batch_size: 8 sequence_batching { '
                             'control_input [ { name: "S" control [ { kind: '
                             'CONTROL_SEQUENCE_START } ] } ] }' + IO,
                             ["control tensor 'S'", "CONTROL_SEQUENCE_START",
                              "exactly one of int32_false_true"]),
    "start with three values": ('backend: "python" max_batch_size: 8 sequence_batching { '
                                'control_input [ { name: "S" control [ { kind: '
                                'CONTROL_SEQUENCE_START bool_false_true: [ false, true, true ] '
                                '} ] } ] }' + IO, ["control tensor 'S'", "exactly 2 entries"]),
    "two start controls": ('backend: "python" max_batch_size: 8 sequence_batching { '
                           'control_input [ { name: "S1" control [ { kind: CONTROL_SEQUENCE_START '
                           'int32_false_true: [ 0, 1 ] } ] }, { name: "S2" control [ { kind: '
                           'CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }' + IO,
                           ["more than one CONTROL_SEQUENCE_START"]),
    "oldest preferred above max": ('backend: "python" max_batch_size: 2 sequence_batching { '
                                   'oldest { preferred_batch_size: [ 4 ] } }' + IO,
                                   ["sequence_batching oldest", "preferred_batch_size 4",
                                    "max_batch_size 2"]),
    "slot utilization": ('backend: "python" max_batch_size: 2 sequence_batching { '
                         'direct { minimum_slot_utilization: 1.5 } }' + IO,
                         ["minimum_slot_utilization", "[0.0, 1.0]", "1.5"]),
    # Triton: instance group m_0 of model m has kind KIND_GPU but no GPUs are available
    "gpu group without gpu": ('backend: "python" instance_group [ { kind: KIND_GPU } ]' + IO,
                              ["instance group 'm_0'", "KIND_GPU", "no GPU"]),
    # Triton: instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs
    "cpu group with gpus": ('backend: "python" instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]'
                            + IO, ["instance group 'm_0'", "KIND_CPU", "gpus [0]"]),
    "auto group with a missing gpu": ('backend: "python" instance_group [ { gpus: [ 0 ] } ]' + IO,
                                      ["instance group 'm_0'", "KIND_CPU", "gpus [0]"]),
    "unknown kind number": ('backend: "python" instance_group [ { kind: 9 } ]' + IO,
                            ["instance group 'm_0'", "unknown kind 9"]),
    "profile outside tensorrt": ('backend: "python" instance_group [ { profile: [ "0" ] } ]'
                                 + IO, ["instance group 'm_0'", "profile", "TensorRT"]),
    # Triton: at least one version must be available under the version policy of model 'm'
    "latest zero": ('backend: "python" version_policy { latest { num_versions: 0 } }' + IO,
                    ["num_versions must be >= 1", "got 0"]),
    "specific nothing": ('backend: "python" version_policy { specific { versions: [ 0 ] } }' + IO,
                         ["specific must list at least one version >= 1", "[0]"]),
    "batch input of unknown source": (
        'backend: "python" max_batch_size: 4 batch_input [ { kind: BATCH_ELEMENT_COUNT '
        'target_name: "BI" data_type: TYPE_INT32 source_input: "NOPE" } ]' + IO,
        ["batch_input ['BI']", "'NOPE'", "INPUT0"]),
    "batch output of unknown target": (
        'backend: "python" max_batch_size: 4 batch_output [ { target_name: "NOPE" '
        'kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT0" } ]' + IO,
        ["target_name 'NOPE'", "OUTPUT0"]),
    "ensemble without steps": ('platform: "ensemble" ensemble_scheduling { }',
                               ["at least one step"]),
    "ensemble with instance groups": (
        'platform: "ensemble" instance_group [ { count: 1 } ] ensemble_scheduling { step [ { '
        'model_name: "x" input_map { key: "a" value: "b" } output_map { key: "c" value: "d" } '
        '} ] }', ["ensemble must not have instance_group"]),
    "ensemble step without model": (
        'platform: "ensemble" ensemble_scheduling { step [ { input_map { key: "a" value: "b" } '
        'output_map { key: "c" value: "d" } } ] }', ["ensemble step 0", "'model_name'"]),
    "ensemble scheduling outside an ensemble": (
        'backend: "python" ensemble_scheduling { step [ { model_name: "x" } ] }',
        ["ensemble_scheduling needs platform 'ensemble'"]),
    "ensemble without scheduling": ('platform: "ensemble"', ["needs an ensemble_scheduling"]),
    "cache with decoupled": ('backend: "python" response_cache { enable: true } '
                             'model_transaction_policy { decoupled: true }' + IO,
                             ["response cache", "decoupled"]),
}


@pytest.mark.parametrize(("text", "expected"), list(BAD.values()), ids=list(BAD))
def test_bad_configs_name_model_tensor_and_expectation(text: str, expected: list[str]) -> None:
    with pytest.raises(InferenceServerError) as info:
        configure(text)
    assert info.value.status == Status.INVALID_ARG
    message = info.value.message
    assert message.startswith("model 'm': ")
    for fragment in expected:
        assert fragment in message, message


def test_validation_does_not_change_the_config() -> None:
    config = configure('backend: "python" max_batch_size: 8 dynamic_batching { }' + IO)
    before = config.SerializeToString(deterministic=True)
    validate_config(config, "m")
    assert config.SerializeToString(deterministic=True) == before


def test_an_empty_name_is_not_a_mismatch() -> None:
    # The manager (and fill_defaults) give an unnamed config its folder's name.
    config = ModelConfig(backend="python")
    fill_defaults(config, "m", gpus=[])
    config.name = ""
    validate_config(config, "m")

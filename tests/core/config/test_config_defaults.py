"""Triton's defaults (fill_defaults) and the JSON of GET /v2/models/{m}/config (config_to_json).

Every ``*_TRITON`` value is the body tritonserver 2.51 answered for the config above it, captured
byte for byte (``serve.sh`` + ``curl /v2/models/NAME/config``, no GPU on the machine).
"""

from __future__ import annotations

import json

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from naiad.config.defaults import fill_defaults
from naiad.config.parse import parse_config_text
from naiad.config.platforms import resolve_backend
from naiad.config.render import config_to_json
from naiad.config.validate import validate_config

ADD_SUB_IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def loaded(text: str, name: str, gpus: tuple[int, ...] = ()) -> ModelConfig:
    """What the manager does with a config.pbtxt, on a machine with ``gpus``."""
    config = parse_config_text(text, f"{name}/config.pbtxt")
    if not config.name:
        config.name = name
    resolve_backend(config, name)
    fill_defaults(config, name, gpus=gpus)
    validate_config(config, name)
    return config


def rendered(text: str, name: str) -> str:
    """The compact JSON naiad sends, to compare byte for byte (key order included)."""
    return json.dumps(config_to_json(loaded(text, name)), separators=(",", ":"))


# --- captured from tritonserver 2.51 -------------------------------------------------------

# A minimal Python model: max_batch_size 0, no instance_group, no version_policy.
ADD_SUB_PBTXT = """\
name: "add_sub"
backend: "python"
""" + ADD_SUB_IO
ADD_SUB_TRITON = (
    '{"name":"add_sub","platform":"","backend":"python","runtime":"",'
    '"version_policy":{"latest":{"num_versions":1}},"max_batch_size":0,'
    '"input":[{"name":"INPUT0","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[4],'
    '"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,'
    '"is_non_linear_format_io":false},{"name":"INPUT1","data_type":"TYPE_FP32",'
    '"format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,"allow_ragged_batch":false,'
    '"optional":false,"is_non_linear_format_io":false}],"output":[{"name":"OUTPUT0",'
    '"data_type":"TYPE_FP32","dims":[4],"label_filename":"","is_shape_tensor":false,'
    '"is_non_linear_format_io":false},{"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[4],'
    '"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],'
    '"batch_input":[],"batch_output":[],"optimization":{"priority":"PRIORITY_DEFAULT",'
    '"input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},'
    '"gather_kernel_buffer_threshold":0,"eager_batching":false},'
    '"instance_group":[{"name":"add_sub","kind":"KIND_CPU","count":1,"gpus":[],'
    '"secondary_devices":[],"profile":[],"passive":false,"host_policy":""}],'
    '"default_model_filename":"model.py","cc_model_filenames":{},"metric_tags":{},'
    '"parameters":{},"model_warmup":[]}'
)

# max_batch_size 8 and an empty dynamic_batching: preferred_batch_size becomes [8].
ADD_SUB_BATCH_PBTXT = """\
name: "add_sub_batch"
backend: "python"
max_batch_size: 8
dynamic_batching {}
""" + ADD_SUB_IO
ADD_SUB_BATCH_TRITON = (
    '{"name":"add_sub_batch","platform":"","backend":"python","runtime":"",'
    '"version_policy":{"latest":{"num_versions":1}},"max_batch_size":8,'
    '"input":[{"name":"INPUT0","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[4],'
    '"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,'
    '"is_non_linear_format_io":false},{"name":"INPUT1","data_type":"TYPE_FP32",'
    '"format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,"allow_ragged_batch":false,'
    '"optional":false,"is_non_linear_format_io":false}],"output":[{"name":"OUTPUT0",'
    '"data_type":"TYPE_FP32","dims":[4],"label_filename":"","is_shape_tensor":false,'
    '"is_non_linear_format_io":false},{"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[4],'
    '"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],'
    '"batch_input":[],"batch_output":[],"optimization":{"priority":"PRIORITY_DEFAULT",'
    '"input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},'
    '"gather_kernel_buffer_threshold":0,"eager_batching":false},'
    '"dynamic_batching":{"preferred_batch_size":[8],"max_queue_delay_microseconds":0,'
    '"preserve_ordering":false,"priority_levels":0,"default_priority_level":0,'
    '"priority_queue_policy":{}},"instance_group":[{"name":"add_sub_batch",'
    '"kind":"KIND_CPU","count":1,"gpus":[],"secondary_devices":[],"profile":[],'
    '"passive":false,"host_policy":""}],"default_model_filename":"model.py",'
    '"cc_model_filenames":{},"metric_tags":{},"parameters":{},"model_warmup":[]}'
)

# No name, a BYTES input, an optional input, a reshape, an unnamed group, specific versions.
ADD_SUB_BYTES_PBTXT = """\
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] } } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy { specific { versions: [ 1 ] } }
"""
ADD_SUB_BYTES_TRITON = (
    '{"name":"add_sub_bytes","platform":"","backend":"python","runtime":"",'
    '"version_policy":{"specific":{"versions":[1]}},"max_batch_size":8,'
    '"input":[{"name":"INPUT0","data_type":"TYPE_STRING","format":"FORMAT_NONE",'
    '"dims":[-1],"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,'
    '"is_non_linear_format_io":false},{"name":"INPUT1","data_type":"TYPE_FP32",'
    '"format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,"allow_ragged_batch":false,'
    '"optional":true,"is_non_linear_format_io":false}],"output":[{"name":"OUTPUT0",'
    '"data_type":"TYPE_FP32","dims":[4],"label_filename":"","is_shape_tensor":false,'
    '"is_non_linear_format_io":false},{"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[2,'
    '2],"reshape":{"shape":[4]},"label_filename":"","is_shape_tensor":false,'
    '"is_non_linear_format_io":false}],"batch_input":[],"batch_output":[],'
    '"optimization":{"priority":"PRIORITY_DEFAULT","input_pinned_memory":{"enable":true},'
    '"output_pinned_memory":{"enable":true},"gather_kernel_buffer_threshold":0,'
    '"eager_batching":false},"instance_group":[{"name":"add_sub_bytes_0","kind":"KIND_CPU",'
    '"count":2,"gpus":[],"secondary_devices":[],"profile":[],"passive":false,'
    '"host_policy":""}],"default_model_filename":"model.py","cc_model_filenames":{},'
    '"metric_tags":{},"parameters":{},"model_warmup":[]}'
)

# An empty sequence_batching: one second of idle time, no strategy chosen.
ADD_SUB_SEQ_PBTXT = """\
name: "add_sub_seq"
backend: "python"
max_batch_size: 8
sequence_batching { }
""" + ADD_SUB_IO
ADD_SUB_SEQ_TRITON = (
    '{"name":"add_sub_seq","platform":"","backend":"python","runtime":"",'
    '"version_policy":{"latest":{"num_versions":1}},"max_batch_size":8,'
    '"input":[{"name":"INPUT0","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[4],'
    '"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,'
    '"is_non_linear_format_io":false},{"name":"INPUT1","data_type":"TYPE_FP32",'
    '"format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,"allow_ragged_batch":false,'
    '"optional":false,"is_non_linear_format_io":false}],"output":[{"name":"OUTPUT0",'
    '"data_type":"TYPE_FP32","dims":[4],"label_filename":"","is_shape_tensor":false,'
    '"is_non_linear_format_io":false},{"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[4],'
    '"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],'
    '"batch_input":[],"batch_output":[],"optimization":{"priority":"PRIORITY_DEFAULT",'
    '"input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},'
    '"gather_kernel_buffer_threshold":0,"eager_batching":false},'
    '"sequence_batching":{"max_sequence_idle_microseconds":1000000,"control_input":[],'
    '"state":[],"iterative_sequence":false},"instance_group":[{"name":"add_sub_seq",'
    '"kind":"KIND_CPU","count":1,"gpus":[],"secondary_devices":[],"profile":[],'
    '"passive":false,"host_policy":""}],"default_model_filename":"model.py",'
    '"cc_model_filenames":{},"metric_tags":{},"parameters":{},"model_warmup":[]}'
)

# Triton leaves initial_state dims as strings, and prints the scalar oneof (zero_data) last.
SEQ_DIRECT_PBTXT = """\
backend: "python"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 5000
  direct { minimum_slot_utilization: 0.3 max_queue_delay_microseconds: 7 }
  state [ { input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "init" } } ]
}
""" + ADD_SUB_IO
SEQ_DIRECT_TRITON = (
    '{"name":"seqdirect","platform":"","backend":"python","runtime":"",'
    '"version_policy":{"latest":{"num_versions":1}},"max_batch_size":8,'
    '"input":[{"name":"INPUT0","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[4],'
    '"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,'
    '"is_non_linear_format_io":false},{"name":"INPUT1","data_type":"TYPE_FP32",'
    '"format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,"allow_ragged_batch":false,'
    '"optional":false,"is_non_linear_format_io":false}],"output":[{"name":"OUTPUT0",'
    '"data_type":"TYPE_FP32","dims":[4],"label_filename":"","is_shape_tensor":false,'
    '"is_non_linear_format_io":false},{"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[4],'
    '"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],'
    '"batch_input":[],"batch_output":[],"optimization":{"priority":"PRIORITY_DEFAULT",'
    '"input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},'
    '"gather_kernel_buffer_threshold":0,"eager_batching":false},'
    '"sequence_batching":{"direct":{"max_queue_delay_microseconds":7,'
    '"minimum_slot_utilization":0.3},"max_sequence_idle_microseconds":5000,'
    '"control_input":[],"state":[{"input_name":"IN_STATE","output_name":"OUT_STATE",'
    '"data_type":"TYPE_INT32","dims":[1],"initial_state":[{"data_type":"TYPE_INT32",'
    '"dims":["1"],"name":"init","zero_data":true}],'
    '"use_same_buffer_for_input_output":false,"use_growable_memory":false}],'
    '"iterative_sequence":false},"instance_group":[{"name":"seqdirect","kind":"KIND_CPU",'
    '"count":1,"gpus":[],"secondary_devices":[],"profile":[],"passive":false,'
    '"host_policy":""}],"default_model_filename":"model.py","cc_model_filenames":{},'
    '"metric_tags":{},"parameters":{},"model_warmup":[]}'
)

# uint64 fields become numbers, integer map keys come in numeric order.
QUEUE_POLICY_PBTXT = """\
backend: "python"
max_batch_size: 8
dynamic_batching {
  max_queue_delay_microseconds: 100
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 50 }
  priority_levels: 12
  default_priority_level: 1
  priority_queue_policy [ { key: 10 value { max_queue_size: 3 } },
                          { key: 2 value { allow_timeout_override: true } } ]
}
model_warmup [ { name: "w" batch_size: 1
  inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
  inputs { key: "INPUT1" value { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } } ]
""" + ADD_SUB_IO
QUEUE_POLICY_TRITON = (
    '{"name":"queuepol","platform":"","backend":"python","runtime":"",'
    '"version_policy":{"latest":{"num_versions":1}},"max_batch_size":8,'
    '"input":[{"name":"INPUT0","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[4],'
    '"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,'
    '"is_non_linear_format_io":false},{"name":"INPUT1","data_type":"TYPE_FP32",'
    '"format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,"allow_ragged_batch":false,'
    '"optional":false,"is_non_linear_format_io":false}],"output":[{"name":"OUTPUT0",'
    '"data_type":"TYPE_FP32","dims":[4],"label_filename":"","is_shape_tensor":false,'
    '"is_non_linear_format_io":false},{"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[4],'
    '"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],'
    '"batch_input":[],"batch_output":[],"optimization":{"priority":"PRIORITY_DEFAULT",'
    '"input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},'
    '"gather_kernel_buffer_threshold":0,"eager_batching":false},'
    '"dynamic_batching":{"preferred_batch_size":[8],"max_queue_delay_microseconds":100,'
    '"preserve_ordering":false,"priority_levels":12,"default_priority_level":1,'
    '"default_queue_policy":{"timeout_action":"DELAY","default_timeout_microseconds":50,'
    '"allow_timeout_override":false,"max_queue_size":0},'
    '"priority_queue_policy":{"2":{"timeout_action":"REJECT",'
    '"default_timeout_microseconds":0,"allow_timeout_override":true,"max_queue_size":0},'
    '"10":{"timeout_action":"REJECT","default_timeout_microseconds":0,'
    '"allow_timeout_override":false,"max_queue_size":3}}},'
    '"instance_group":[{"name":"queuepol","kind":"KIND_CPU","count":1,"gpus":[],'
    '"secondary_devices":[],"profile":[],"passive":false,"host_policy":""}],'
    '"default_model_filename":"model.py","cc_model_filenames":{},"metric_tags":{},'
    '"parameters":{},"model_warmup":[{"name":"w","batch_size":1,'
    '"inputs":{"INPUT0":{"data_type":"TYPE_FP32","dims":[4],"zero_data":true},'
    '"INPUT1":{"data_type":"TYPE_FP32","dims":[4],"random_data":true}},"count":0}]}'
)

# Most remaining sections; the CUDA graph shapes stay strings in Triton's answer.
KITCHEN_PBTXT = """\
backend: "python"
max_batch_size: 8
batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "BI" data_type: TYPE_INT32
                source_input: "INPUT0" } ]
batch_output [ { target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE
                 source_input: "INPUT0" } ]
optimization {
  cuda { graphs: false graph_spec [ { batch_size: 1 input { key: "INPUT0" value { dim: [ 4 ] } }
         graph_lower_bound { batch_size: 1 input { key: "INPUT0" value { dim: [ 4 ] } } } } ] }
  execution_accelerators { cpu_execution_accelerator [
    { name: "openvino" parameters { key: "k" value: "v" } } ] }
}
instance_group [ { count: 1 kind: KIND_CPU
                   rate_limiter { resources [ { name: "R" count: 1 } ] priority: 1 } } ]
model_operations { op_library_filename: [] }
model_transaction_policy { }
response_cache { enable: false }
metric_tags { key: "t" value: "v" }
cc_model_filenames { key: "7.5" value: "x.py" }
""" + ADD_SUB_IO
KITCHEN_TRITON = (
    '{"name":"kitchen","platform":"","backend":"python","runtime":"",'
    '"version_policy":{"latest":{"num_versions":1}},"max_batch_size":8,'
    '"input":[{"name":"INPUT0","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[4],'
    '"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,'
    '"is_non_linear_format_io":false},{"name":"INPUT1","data_type":"TYPE_FP32",'
    '"format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,"allow_ragged_batch":false,'
    '"optional":false,"is_non_linear_format_io":false}],"output":[{"name":"OUTPUT0",'
    '"data_type":"TYPE_FP32","dims":[4],"label_filename":"","is_shape_tensor":false,'
    '"is_non_linear_format_io":false},{"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[4],'
    '"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],'
    '"batch_input":[{"kind":"BATCH_ELEMENT_COUNT","target_name":["BI"],'
    '"data_type":"TYPE_INT32","source_input":["INPUT0"]}],'
    '"batch_output":[{"target_name":["OUTPUT0"],"kind":"BATCH_SCATTER_WITH_INPUT_SHAPE",'
    '"source_input":["INPUT0"]}],"optimization":{"priority":"PRIORITY_DEFAULT",'
    '"cuda":{"graphs":false,"busy_wait_events":false,"graph_spec":[{"batch_size":1,'
    '"input":{"INPUT0":{"dim":["4"]}},"graph_lower_bound":{"batch_size":1,'
    '"input":{"INPUT0":{"dim":["4"]}}}}],"output_copy_stream":false},'
    '"execution_accelerators":{"gpu_execution_accelerator":[],'
    '"cpu_execution_accelerator":[{"name":"openvino","parameters":{"k":"v"}}]},'
    '"input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},'
    '"gather_kernel_buffer_threshold":0,"eager_batching":false},'
    '"instance_group":[{"name":"kitchen_0","kind":"KIND_CPU","count":1,'
    '"rate_limiter":{"resources":[{"name":"R","global":false,"count":1}],"priority":1},'
    '"gpus":[],"secondary_devices":[],"profile":[],"passive":false,"host_policy":""}],'
    '"default_model_filename":"model.py","cc_model_filenames":{"7.5":"x.py"},'
    '"metric_tags":{"t":"v"},"parameters":{},"model_warmup":[],'
    '"model_operations":{"op_library_filename":[]},'
    '"model_transaction_policy":{"decoupled":false},"response_cache":{"enable":false}}'
)

# An ensemble: no optimization, no instance group, model_transaction_policy always shown.
ENSEMBLE_PBTXT = """\
platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "S" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "add_sub" model_version: -1
  input_map { key: "INPUT1" value: "B" } input_map { key: "INPUT0" value: "A" }
  output_map { key: "OUTPUT0" value: "S" } } ] }
"""
ENSEMBLE_TRITON = (
    '{"name":"ens","platform":"ensemble","backend":"","runtime":"",'
    '"version_policy":{"latest":{"num_versions":1}},"max_batch_size":0,'
    '"input":[{"name":"A","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[4],'
    '"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,'
    '"is_non_linear_format_io":false},{"name":"B","data_type":"TYPE_FP32",'
    '"format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,"allow_ragged_batch":false,'
    '"optional":false,"is_non_linear_format_io":false}],"output":[{"name":"S",'
    '"data_type":"TYPE_FP32","dims":[4],"label_filename":"","is_shape_tensor":false,'
    '"is_non_linear_format_io":false}],"batch_input":[],"batch_output":[],'
    '"ensemble_scheduling":{"step":[{"model_name":"add_sub","model_version":-1,'
    '"input_map":{"INPUT1":"B","INPUT0":"A"},"output_map":{"OUTPUT0":"S"},'
    '"model_namespace":""}]},"instance_group":[],"default_model_filename":"",'
    '"cc_model_filenames":{},"metric_tags":{},"parameters":{},"model_warmup":[],'
    '"model_transaction_policy":{"decoupled":false}}'
)


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("add_sub", ADD_SUB_PBTXT, ADD_SUB_TRITON),
    ("add_sub_batch", ADD_SUB_BATCH_PBTXT, ADD_SUB_BATCH_TRITON),
    ("add_sub_bytes", ADD_SUB_BYTES_PBTXT, ADD_SUB_BYTES_TRITON),
    ("add_sub_seq", ADD_SUB_SEQ_PBTXT, ADD_SUB_SEQ_TRITON),
    ("seqdirect", SEQ_DIRECT_PBTXT, SEQ_DIRECT_TRITON),
    ("queuepol", QUEUE_POLICY_PBTXT, QUEUE_POLICY_TRITON),
    ("kitchen", KITCHEN_PBTXT, KITCHEN_TRITON),
])
def test_config_json_is_byte_for_byte_what_triton_sends(name: str, text: str,
                                                        expected: str) -> None:
    assert rendered(text, name) == expected


def test_ensemble_config_json_matches_triton() -> None:
    # Compared as data: Triton prints map entries in hash order (here input_map INPUT1 first),
    # naiad sorts them.
    config = loaded(ENSEMBLE_PBTXT, "ens")
    assert config_to_json(config) == json.loads(ENSEMBLE_TRITON)
    # tritonclient's newer schema has max_inflight_requests; 2.51 does not print it.
    assert "max_inflight_requests" not in config_to_json(config)["ensemble_scheduling"]


def test_int64_fields_triton_leaves_as_strings_stay_strings() -> None:
    # Captured from tritonserver 2.51: secondary_devices device_id "3" (a string), parameters
    # in key order, a partial optimization kept and completed.
    config = loaded("""
        backend: "python"
        optimization { priority: PRIORITY_MAX input_pinned_memory { enable: false } }
        parameters [ { key: "zeta" value { string_value: "1" } },
                     { key: "alpha" value { string_value: "2" } },
                     { key: "mid" value { string_value: "3" } } ]
        instance_group [ { count: 2 secondary_devices [ { kind: KIND_NVDLA device_id: 3 } ] } ]
        """ + ADD_SUB_IO, "optpartial")
    body = config_to_json(config)
    assert body["instance_group"] == [{
        "name": "optpartial_0", "kind": "KIND_CPU", "count": 2, "gpus": [],
        "secondary_devices": [{"kind": "KIND_NVDLA", "device_id": "3"}], "profile": [],
        "passive": False, "host_policy": ""}]
    assert json.dumps(body["parameters"], separators=(",", ":")) == (
        '{"alpha":{"string_value":"2"},"mid":{"string_value":"3"},"zeta":{"string_value":"1"}}')
    assert body["optimization"] == {
        "priority": "PRIORITY_MAX", "input_pinned_memory": {"enable": False},
        "output_pinned_memory": {"enable": True}, "gather_kernel_buffer_threshold": 0,
        "eager_batching": False}


def test_sequence_oldest_and_whole_floats_match_triton() -> None:
    # Captured from tritonserver 2.51: oldest gets preferred_batch_size [max_batch_size];
    # fp32_false_true prints [0,1], not [0.0,1.0].
    config = loaded("""
        backend: "python"
        max_batch_size: 8
        sequence_batching {
          oldest { max_candidate_sequences: 4 }
          control_input [
            { name: "START"
              control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
            { name: "CORRID"
              control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] } ]
        }
        """ + ADD_SUB_IO, "seqoldest")
    assert json.dumps(config_to_json(config)["sequence_batching"], separators=(",", ":")) == (
        '{"oldest":{"max_candidate_sequences":4,"preferred_batch_size":[8],'
        '"max_queue_delay_microseconds":0,"preserve_ordering":false},'
        '"max_sequence_idle_microseconds":1000000,"control_input":[{"name":"START",'
        '"control":[{"kind":"CONTROL_SEQUENCE_START","int32_false_true":[],'
        '"fp32_false_true":[0,1],"bool_false_true":[],"data_type":"TYPE_INVALID"}]},'
        '{"name":"CORRID","control":[{"kind":"CONTROL_SEQUENCE_CORRID","int32_false_true":[],'
        '"fp32_false_true":[],"bool_false_true":[],"data_type":"TYPE_UINT64"}]}],"state":[],'
        '"iterative_sequence":false}')


# --- fill_defaults rules -------------------------------------------------------------------

def test_instance_count_below_one_becomes_the_default() -> None:
    # Triton 2.51 silently turns count 0 and negative counts into 1 (observed).
    config = loaded('backend: "python" instance_group [ { count: 0 }, '
                    '{ name: "named" count: -3 kind: KIND_CPU } ]' + ADD_SUB_IO, "count0")
    groups = [(g.name, g.count, g.kind) for g in config.instance_group]
    assert groups == [("count0_0", 1, ModelInstanceGroup.KIND_CPU),
                      ("named", 1, ModelInstanceGroup.KIND_CPU)]


def test_cpu_groups_of_onnxruntime_and_tensorflow_get_two_instances() -> None:
    config = ModelConfig(name="m", backend="onnxruntime", platform="onnxruntime_onnx")
    config.instance_group.add(kind=ModelInstanceGroup.KIND_CPU)
    config.instance_group.add(kind=ModelInstanceGroup.KIND_MODEL)
    fill_defaults(config, "m", gpus=[])
    assert [g.count for g in config.instance_group] == [2, 1]
    assert config.default_model_filename == "model.onnx"


def test_kind_auto_resolves_against_the_gpus_present() -> None:
    on_gpus = ModelConfig(name="m", backend="python")
    fill_defaults(on_gpus, "m", gpus=[0, 1])
    (group,) = on_gpus.instance_group
    assert (group.kind, list(group.gpus)) == (ModelInstanceGroup.KIND_GPU, [0, 1])

    missing_gpu = ModelConfig(name="m", backend="python")
    missing_gpu.instance_group.add(gpus=[3])
    fill_defaults(missing_gpu, "m", gpus=[0])
    # Triton falls back to KIND_CPU and keeps the gpus, which validation then rejects.
    assert missing_gpu.instance_group[0].kind == ModelInstanceGroup.KIND_CPU


def test_kind_gpu_without_gpus_gets_every_gpu() -> None:
    config = ModelConfig(name="m", backend="python")
    config.instance_group.add(kind=ModelInstanceGroup.KIND_GPU, count=2)
    fill_defaults(config, "m", gpus=[0, 1])
    assert list(config.instance_group[0].gpus) == [0, 1]


def test_dynamic_batching_without_batching_keeps_no_preferred_size() -> None:
    # Triton 2.51 loads this (observed): preferred_batch_size stays [].
    config = loaded('backend: "python" dynamic_batching { }' + ADD_SUB_IO, "dyn")
    assert config_to_json(config)["dynamic_batching"]["preferred_batch_size"] == []


def test_given_values_are_kept() -> None:
    config = loaded("""
        backend: "python"
        max_batch_size: 8
        version_policy { all { } }
        dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100 }
        default_model_filename: "other.py"
        """ + ADD_SUB_IO, "keep")
    body = config_to_json(config)
    assert body["version_policy"] == {"all": {}}
    assert body["dynamic_batching"]["preferred_batch_size"] == [2, 4]
    assert body["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert body["default_model_filename"] == "other.py"
    sequence = loaded('backend: "python" sequence_batching { max_sequence_idle_microseconds: 7 }'
                      + ADD_SUB_IO, "keep")
    assert config_to_json(sequence)["sequence_batching"]["max_sequence_idle_microseconds"] == 7


@pytest.mark.parametrize(("backend", "platform", "filename"), [
    ("python", "", "model.py"),
    ("onnxruntime", "onnxruntime_onnx", "model.onnx"),
    ("pytorch", "pytorch_libtorch", "model.pt"),
    ("tensorrt", "tensorrt_plan", "model.plan"),
    ("tensorflow", "tensorflow_savedmodel", "model.savedmodel"),
    ("tensorflow", "tensorflow_graphdef", "model.graphdef"),
    ("mycustom", "", ""),
])
def test_default_model_filename_per_backend(backend: str, platform: str, filename: str) -> None:
    config = ModelConfig(name="m", backend=backend, platform=platform)
    fill_defaults(config, "m", gpus=[])
    assert config.default_model_filename == filename


def test_fill_defaults_is_idempotent() -> None:
    config = loaded(KITCHEN_PBTXT, "kitchen")
    before = config.SerializeToString(deterministic=True)
    fill_defaults(config, "kitchen", gpus=[])
    assert config.SerializeToString(deterministic=True) == before


def test_empty_config_gets_the_model_name() -> None:
    config = ModelConfig(backend="python")
    fill_defaults(config, "named_by_folder", gpus=[])
    assert config.name == "named_by_folder"
    assert config.instance_group[0].name == "named_by_folder"

"""The HTTP half of the malformed-request corpus: one row per kind of bad request, as data.

Each row is sent on its own connection to a server that serves the hardening repository
(tests/hardening/conftest.py) and must be answered, within a bounded time, with a 4xx (the
row's exact status when it names one) whose body contains every one of ``fragments``
(case-insensitive): the thing that was wrong, named. ``EVIL`` is a Python file outside the
repository that must never be imported (it writes ``EVIL_MARKER`` when it is), ``REGION`` a
64-byte system shared memory region (key ``/REGION``) registered for the corpus; the corpus
test makes both.

Repository control rows aim at ``identity_bool``, which nothing else in the corpus uses: a
row that a server wrongly accepts reloads that model and no other.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ADD_SUB = "/v2/models/add_sub/infer"
FP32_ID = "/v2/models/identity_fp32/infer"
LOAD = "/v2/repository/models/identity_bool/load"
REGISTER = "/v2/systemsharedmemory/region/corpus_bad/register"
EVIL_DIR = Path(tempfile.gettempdir()) / f"naiad-corpus-evil-{os.getpid()}"
EVIL = str(EVIL_DIR / "evil.py")
EVIL_MARKER = EVIL_DIR / "imported"
REGION = f"corpus_{os.getpid()}"
GIB = 1 << 30


@dataclass(frozen=True)
class HTTPKind:
    """One kind of malformed HTTP request and what its answer must hold."""

    id: str
    method: str = "POST"
    path: str = ADD_SUB
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    status: int | None = None  # None: any 4xx
    fragments: tuple[str, ...] = ()
    raw: bytes | None = None  # sent as is instead of method/path/headers/body


def js(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def tensor(name: str = "INPUT0", datatype: str = "FP32", shape: Any = (4,),
           data: Any = (1, 2, 3, 4), **extra: Any) -> dict:
    """An input as JSON; a field given as None is left out."""
    item = {"name": name, "datatype": datatype,
            "shape": list(shape) if isinstance(shape, tuple) else shape,
            "data": list(data) if isinstance(data, tuple) else data, **extra}
    return {key: value for key, value in item.items() if value is not None}


def add_sub(*first: dict, **extra: Any) -> bytes:
    """An add_sub request: ``first`` replaces INPUT0 (INPUT1 stays good)."""
    inputs = list(first) or [tensor()]
    return js({"inputs": [*inputs, tensor("INPUT1")], **extra})


def one(item: dict, **extra: Any) -> bytes:
    return js({"inputs": [item], **extra})


def binary(header: dict, tail: bytes, length: int | None = None) -> tuple[bytes, dict]:
    """A binary-extension body and its headers (``length`` overrides the true one)."""
    head = js(header)
    return head + tail, {"Inference-Header-Content-Length":
                         str(len(head) if length is None else length)}


def binary_kind(id_: str, header: dict, tail: bytes, *fragments: str,
                path: str = ADD_SUB, length: int | None = None) -> HTTPKind:
    body, headers = binary(header, tail, length)
    return HTTPKind(id_, path=path, body=body, headers=headers, status=400,
                    fragments=fragments)


def raw_input(name: str, size: Any, datatype: str = "FP32", shape: Any = (4,)) -> dict:
    return {"name": name, "datatype": datatype, "shape": list(shape),
            "parameters": {"binary_data_size": size}}


TWO_RAW = {"inputs": [raw_input("INPUT0", 16), raw_input("INPUT1", 16)]}
ZEROS_32 = bytes(32)
GOOD = add_sub()
DEEP = b'{"inputs": [' * 5000
EVIL_CONFIG = {"name": "identity_bool", "backend": "python",
               "default_model_filename": EVIL}
# relative to the model's folder, climbing out of it
ESCAPING_CONFIG = {**EVIL_CONFIG, "default_model_filename": "../" * 24 + EVIL.lstrip("/")}


def _load_config(config: dict) -> bytes:
    return js({"parameters": {"config": json.dumps(config)}})


HTTP_KINDS: list[HTTPKind] = [
    # --- the JSON document --------------------------------------------------------------
    HTTPKind("json_not_json", body=b"{not json", status=400,
             fragments=("not valid JSON", "add_sub")),
    HTTPKind("json_empty_body", body=b"", status=400, fragments=("JSON", "add_sub")),
    HTTPKind("json_array", body=b"[]", status=400, fragments=("JSON object", "add_sub")),
    HTTPKind("json_string", body=b'"inputs"', status=400, fragments=("JSON object",)),
    HTTPKind("json_nan_literal", body=add_sub().replace(b"1, 2", b"NaN, 2"), status=400,
             fragments=("not valid JSON",)),
    HTTPKind("json_too_deep", body=DEEP, status=400, fragments=("JSON", "add_sub")),
    HTTPKind("json_invalid_utf8", body=b'{"inputs": [{"name": "\xff\xfe"}]}', status=400,
             fragments=("UTF-8",)),
    HTTPKind("inputs_missing", body=b"{}", status=400, fragments=("'inputs'",)),
    HTTPKind("inputs_not_a_list", body=js({"inputs": {}}), status=400,
             fragments=("'inputs'",)),
    HTTPKind("inputs_empty", body=js({"inputs": []}), status=400,
             fragments=("INPUT0", "INPUT1")),
    HTTPKind("input_not_an_object", body=js({"inputs": [1]}), status=400,
             fragments=("'inputs'",)),
    HTTPKind("input_without_name", body=add_sub(tensor(name=None)), status=400,
             fragments=("'name'",)),
    HTTPKind("input_name_a_number", body=add_sub(tensor(name=5)), status=400,
             fragments=("'name'",)),
    HTTPKind("input_unknown", body=add_sub(tensor(), tensor("EXTRA")), status=400,
             fragments=("EXTRA", "add_sub")),
    HTTPKind("input_missing", body=one(tensor()), status=400, fragments=("INPUT1", "add_sub")),
    HTTPKind("input_twice", body=add_sub(tensor(), tensor("INPUT1")), status=400,
             fragments=("INPUT1", "twice")),
    HTTPKind("input_name_with_nul", body=add_sub(tensor(name="INPUT0\u0000")), status=400,
             fragments=("INPUT0", "add_sub")),
    # --- datatypes --------------------------------------------------------------------------
    HTTPKind("datatype_unknown", body=add_sub(tensor(datatype="FLOAT")), status=400,
             fragments=("FLOAT", "INPUT0")),
    HTTPKind("datatype_lowercase", body=add_sub(tensor(datatype="fp32")), status=400,
             fragments=("fp32", "INPUT0")),
    HTTPKind("datatype_missing", body=add_sub(tensor(datatype=None)), status=400,
             fragments=("datatype", "INPUT0")),
    HTTPKind("datatype_wrong_for_model", body=add_sub(tensor(datatype="INT32")), status=400,
             fragments=("INT32", "FP32", "INPUT0")),
    # --- shapes -------------------------------------------------------------------------------
    HTTPKind("shape_missing", body=add_sub(tensor(shape=None)), status=400,
             fragments=("shape", "INPUT0")),
    HTTPKind("shape_a_string", body=add_sub(tensor(shape="4")), status=400,
             fragments=("shape", "INPUT0")),
    HTTPKind("shape_negative", body=one(tensor(shape=[-1], data=[1])), path=FP32_ID,
             status=400, fragments=("shape", "INPUT0")),
    HTTPKind("shape_float", body=add_sub(tensor(shape=[4.0])), status=400,
             fragments=("shape", "INPUT0")),
    HTTPKind("shape_bool", body=add_sub(tensor(shape=[True, 4])), status=400,
             fragments=("shape", "INPUT0")),
    HTTPKind("shape_wrong_for_model", body=add_sub(tensor(shape=[2, 2])), status=400,
             fragments=("[4]", "[2,2]", "INPUT0")),
    HTTPKind("shape_overflowing_product", path=FP32_ID,
             body=one(tensor(shape=[0, 2**62, 2**62], data=[])), fragments=("INPUT0",)),
    HTTPKind("shape_huge_without_data", path=FP32_ID,
             body=one(tensor(shape=[2**62], data=[])), fragments=("INPUT0",)),
    HTTPKind("shape_too_many_dims", path=FP32_ID, body=one(tensor(shape=[1] * 40, data=[1])),
             status=400, fragments=("INPUT0",)),
    # --- data -----------------------------------------------------------------------------
    HTTPKind("data_missing", body=add_sub(tensor(data=None)), status=400,
             fragments=("'data'", "INPUT0")),
    HTTPKind("data_not_a_list", body=add_sub(tensor(data="1234")), status=400,
             fragments=("'data'", "INPUT0")),
    HTTPKind("data_too_few", body=add_sub(tensor(data=[1, 2, 3])), status=400,
             fragments=("3 values", "INPUT0")),
    HTTPKind("data_too_many", body=add_sub(tensor(data=[1, 2, 3, 4, 5])), status=400,
             fragments=("5 values", "INPUT0")),
    HTTPKind("data_strings_for_fp32", body=add_sub(tensor(data=["a", "b", "c", "d"])),
             status=400, fragments=("FP32", "INPUT0")),
    HTTPKind("data_null_for_fp32", body=add_sub(tensor(data=[1, 2, None, 4])), status=400,
             fragments=("FP32", "INPUT0")),
    HTTPKind("data_bool_for_fp32", body=add_sub(tensor(data=[1, 2, True, 4])), status=400,
             fragments=("FP32", "INPUT0")),
    HTTPKind("int8_out_of_range", path="/v2/models/identity_int8/infer",
             body=one(tensor(datatype="INT8", shape=[1], data=[300])), status=400,
             fragments=("INT8", "INPUT0")),
    HTTPKind("uint64_negative", path="/v2/models/identity_uint64/infer",
             body=one(tensor(datatype="UINT64", shape=[1], data=[-1])), status=400,
             fragments=("UINT64", "INPUT0")),
    HTTPKind("bool_not_a_bool", path="/v2/models/identity_bool/infer",
             body=one(tensor(datatype="BOOL", shape=[1], data=[2])), status=400,
             fragments=("BOOL", "INPUT0")),
    HTTPKind("bytes_not_a_string", path="/v2/models/identity_bytes/infer",
             body=one(tensor(datatype="BYTES", shape=[1], data=[1])), status=400,
             fragments=("BYTES", "INPUT0")),
    HTTPKind("fp32_out_of_range", path=FP32_ID, body=one(tensor(shape=[1], data=[1e39])),
             status=400, fragments=("FP32", "INPUT0")),
    HTTPKind("fp16_out_of_range", path="/v2/models/identity_fp16/infer",
             body=one(tensor(datatype="FP16", shape=[1], data=[70000])), status=400,
             fragments=("FP16", "INPUT0")),
    # --- parameters ---------------------------------------------------------------------------
    HTTPKind("request_parameters_not_an_object", body=add_sub(parameters=[1]), status=400,
             fragments=("'parameters'",)),
    HTTPKind("input_parameters_not_an_object", body=add_sub(tensor(parameters=[1])),
             status=400, fragments=("'parameters'", "INPUT0")),
    HTTPKind("priority_a_string", body=add_sub(parameters={"priority": "high"}), status=400,
             fragments=("priority",)),
    HTTPKind("timeout_negative", body=add_sub(parameters={"timeout": -1}), status=400,
             fragments=("timeout",)),
    HTTPKind("sequence_id_a_list", body=add_sub(parameters={"sequence_id": [1]}), status=400,
             fragments=("sequence_id",)),
    HTTPKind("binary_data_output_a_string",
             body=add_sub(parameters={"binary_data_output": "no"}), status=400,
             fragments=("binary_data_output",)),
    HTTPKind("request_id_a_number", body=add_sub(id=5), status=400, fragments=("id",)),
    HTTPKind("request_parameters_an_empty_list", body=add_sub(parameters=[]), status=400,
             fragments=("'parameters'",)),
    # --- requested outputs --------------------------------------------------------------------
    HTTPKind("outputs_not_a_list", body=add_sub(outputs={"name": "OUTPUT0"}), status=400,
             fragments=("'outputs'",)),
    HTTPKind("output_without_name", body=add_sub(outputs=[{"nome": "OUTPUT0"}]), status=400,
             fragments=("'name'",)),
    HTTPKind("output_unknown", body=add_sub(outputs=[{"name": "OUTPUT9"}]), status=400,
             fragments=("OUTPUT9", "add_sub")),
    HTTPKind("output_classification_zero", status=400, fragments=("classification", "OUTPUT0"),
             body=add_sub(outputs=[{"name": "OUTPUT0", "parameters": {"classification": 0}}])),
    HTTPKind("output_binary_data_a_string", status=400, fragments=("binary_data", "OUTPUT0"),
             body=add_sub(outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": "yes"}}])),
    # --- the binary tensor data extension -----------------------------------------------------
    binary_kind("header_length_negative", TWO_RAW, ZEROS_32, "Inference-Header-Content-Length",
                length=-5),
    binary_kind("header_length_past_the_body", TWO_RAW, ZEROS_32,
                "Inference-Header-Content-Length", length=99999),
    binary_kind("header_length_inside_the_json", TWO_RAW, ZEROS_32, "JSON", length=10),
    binary_kind("binary_size_past_the_data", TWO_RAW, ZEROS_32[:20], "INPUT1",
                "binary_data_size"),
    binary_kind("binary_size_negative", {"inputs": [raw_input("INPUT0", -16),
                                                    raw_input("INPUT1", 16)]}, ZEROS_32,
                "binary_data_size", "INPUT0"),
    binary_kind("binary_size_a_string", {"inputs": [raw_input("INPUT0", "16"),
                                                    raw_input("INPUT1", 16)]}, ZEROS_32,
                "binary_data_size", "INPUT0"),
    binary_kind("binary_size_a_bool", {"inputs": [raw_input("INPUT0", True),
                                                  raw_input("INPUT1", 16)]}, ZEROS_32,
                "binary_data_size", "INPUT0"),
    binary_kind("binary_size_wrong_for_shape", {"inputs": [raw_input("INPUT0", 16),
                                                           raw_input("INPUT1", 12)]},
                ZEROS_32[:28], "INPUT1", "16 bytes"),
    binary_kind("binary_data_left_over", TWO_RAW, bytes(40), "8 bytes"),
    binary_kind("bytes_length_prefix_lies",
                {"inputs": [raw_input("INPUT0", 8, "BYTES", (1,))]},
                b"\x10\x00\x00\x00abcd", "BYTES", "INPUT0",
                path="/v2/models/identity_bytes/infer"),
    binary_kind("bytes_length_prefix_cut",
                {"inputs": [raw_input("INPUT0", 2, "BYTES", (1,))]}, b"\x01\x00", "BYTES",
                "INPUT0", path="/v2/models/identity_bytes/infer"),
    # --- framing and content encodings ------------------------------------------------------
    HTTPKind("encoding_unknown", body=GOOD, headers={"Content-Encoding": "br"}, status=400,
             fragments=("Content-Encoding", "br")),
    HTTPKind("encoding_gzip_garbage", body=b"\x1f\x8b\x08garbage", status=400,
             headers={"Content-Encoding": "gzip"}, fragments=("gzip",)),
    HTTPKind("encoding_deflate_garbage", body=b"\x78\x9cgarbage", status=400,
             headers={"Content-Encoding": "deflate"}, fragments=("deflate",)),
    HTTPKind("encoding_gzip_truncated", body=gzip.compress(GOOD)[:30], status=400,
             headers={"Content-Encoding": "gzip"}, fragments=("gzip", "truncated")),
    HTTPKind("content_length_negative", body=GOOD, headers={"Content-Length": "-1"},
             status=400, fragments=("Invalid HTTP request",)),
    HTTPKind("content_length_not_a_number", body=GOOD, headers={"Content-Length": "abc"},
             status=400, fragments=("Invalid HTTP request",)),
    HTTPKind("content_length_over_the_limit", body=GOOD,
             headers={"Content-Length": str(GIB)}, status=413,
             fragments=("--http-max-input-size",)),
    HTTPKind("chunked_garbage", body=b"5\r\nhello\r\nzz\r\n",
             headers={"Transfer-Encoding": "chunked"}, status=400,
             fragments=("Invalid HTTP request",)),
    HTTPKind("request_line_garbage", raw=b"GARBAGE\r\n\r\n", status=400,
             fragments=("Invalid HTTP request",)),
    HTTPKind("http_version_unknown", raw=b"GET /v2/health/live HTTP/9.9\r\nHost: x\r\n\r\n",
             status=400, fragments=("Invalid HTTP request",)),
    HTTPKind("header_with_nul", method="GET", path="/v2/health/live",
             headers={"X-Probe": "a\x00b"}, status=400, fragments=("Invalid HTTP request",)),
    HTTPKind("header_value_of_one_mib", method="GET", path="/v2/health/live",
             headers={"X-Probe": "a" * (1 << 20)}, fragments=("header",)),
    # --- models, versions and paths -----------------------------------------------------------
    HTTPKind("model_unknown", path="/v2/models/no_such_model/infer", body=GOOD, status=404,
             fragments=("no_such_model",)),
    HTTPKind("version_unknown", path="/v2/models/add_sub/versions/7/infer", body=GOOD,
             status=404, fragments=("add_sub", "7")),
    HTTPKind("version_not_a_number", path="/v2/models/add_sub/versions/abc/infer", body=GOOD,
             status=400, fragments=("add_sub", "abc")),
    HTTPKind("version_negative", method="GET", path="/v2/models/add_sub/versions/-1",
             status=404, fragments=("add_sub", "-1")),
    HTTPKind("version_huge", method="GET",
             path="/v2/models/add_sub/versions/99999999999999999999999", status=404,
             fragments=("add_sub",)),
    HTTPKind("version_fractional", method="GET", path="/v2/models/add_sub/versions/1.5/ready",
             status=400, fragments=("add_sub", "1.5")),
    HTTPKind("path_traversal_encoded_infer", path="/v2/models/..%2F..%2Fetc/infer", body=GOOD,
             status=404, fragments=("not found",)),
    HTTPKind("path_traversal_encoded_metadata", method="GET",
             path="/v2/models/..%2F..%2Fetc%2Fpasswd", status=404, fragments=("not found",)),
    HTTPKind("path_traversal_plain", method="GET", path="/v2/models/../../etc/passwd",
             status=404, fragments=("not found",)),
    HTTPKind("path_traversal_config", method="GET", path="/v2/models/..%2Fadd_sub/config",
             status=404, fragments=("not found",)),
    HTTPKind("model_name_oversized", path="/v2/models/" + "a" * 5000 + "/infer", body=GOOD,
             status=404, fragments=("unknown model",)),
    HTTPKind("model_name_with_nul", path="/v2/models/add%00sub/infer", body=GOOD, status=404,
             fragments=("unknown model",)),
    HTTPKind("model_name_invalid_utf8", path="/v2/models/%ff%fe/infer", body=GOOD,
             status=404, fragments=("unknown model",)),
    # --- methods ------------------------------------------------------------------------------
    HTTPKind("method_put_on_infer", method="PUT", body=GOOD, status=405,
             fragments=("Method Not Allowed",)),
    HTTPKind("method_get_on_infer", method="GET", status=405,
             fragments=("Method Not Allowed",)),
    HTTPKind("method_delete_on_health", method="DELETE", path="/v2/health/live", status=405,
             fragments=("Method Not Allowed",)),
    HTTPKind("method_unknown_token", method="FOO", path="/v2/health/live",
             fragments=("Invalid HTTP request",)),
    HTTPKind("path_unknown", method="GET", path="/v2/nothing/here", status=404,
             fragments=("Not Found",)),
    # --- repository control -------------------------------------------------------------------
    HTTPKind("load_body_not_json", path=LOAD, body=b"not json", status=400,
             fragments=("JSON",)),
    HTTPKind("load_body_an_array", path=LOAD, body=b"[1]", status=400,
             fragments=("JSON object",)),
    HTTPKind("load_parameters_a_list", path=LOAD, body=js({"parameters": [1]}), status=400,
             fragments=("'parameters'",)),
    HTTPKind("load_parameters_an_empty_list", path=LOAD, body=js({"parameters": []}),
             status=400, fragments=("'parameters'",)),
    HTTPKind("load_config_a_number", path=LOAD, body=js({"parameters": {"config": 5}}),
             status=400, fragments=("'config'",)),
    HTTPKind("load_config_not_json", path=LOAD, body=js({"parameters": {"config": "{bad"}}),
             status=400, fragments=("identity_bool", "JSON")),
    HTTPKind("load_as_text_plain", path=LOAD, body=js({"parameters": {}}),
             headers={"Content-Type": "text/plain", "Origin": "https://elsewhere.example"},
             fragments=("json",)),
    HTTPKind("load_file_not_base64", path=LOAD, status=400, fragments=("base64",),
             body=js({"parameters": {"config": "{}", "file:1/model.py": "!!"}})),
    HTTPKind("load_file_leaving_the_folder", path=LOAD, status=400, fragments=("file:../x.py",),
             body=js({"parameters": {"config": "{}", "file:../x.py": "aGk="}})),
    HTTPKind("load_file_absolute", path=LOAD, status=400, fragments=("file:/etc/passwd",),
             body=js({"parameters": {"config": "{}", "file:/etc/passwd": "aGk="}})),
    HTTPKind("load_model_file_absolute", path=LOAD, body=_load_config(EVIL_CONFIG),
             status=400, fragments=("default_model_filename",)),
    HTTPKind("load_model_file_escaping", path=LOAD, body=_load_config(ESCAPING_CONFIG),
             status=400, fragments=("default_model_filename",)),
    HTTPKind("unload_body_not_json", path="/v2/repository/models/identity_bool/unload",
             body=b"{x", status=400, fragments=("JSON",)),
    HTTPKind("index_body_an_array", path="/v2/repository/index", body=b"[1]", status=400,
             fragments=("JSON object",)),
    HTTPKind("index_ready_a_string", path="/v2/repository/index", body=js({"ready": "maybe"}),
             status=400, fragments=("ready",)),
    # --- shared memory ------------------------------------------------------------------------
    HTTPKind("shm_register_empty_body", path=REGISTER, body=b"{}", status=400,
             fragments=("'key'",)),
    HTTPKind("shm_register_not_json", path=REGISTER, body=b"{x", status=400,
             fragments=("JSON",)),
    HTTPKind("shm_register_unknown_key", path=REGISTER, status=400, fragments=("/h4_no_such",),
             body=js({"key": "/h4_no_such", "offset": 0, "byte_size": 16})),
    HTTPKind("shm_register_key_with_dots", path=REGISTER, status=400,
             fragments=("/dev/../etc/passwd",),
             body=js({"key": "/dev/../etc/passwd", "offset": 0, "byte_size": 16})),
    # its own region name: a server that took true for 1 registers it, and no other row
    HTTPKind("shm_register_offset_a_boolean", status=400, fragments=("offset",),
             path="/v2/systemsharedmemory/region/corpus_bool/register",
             body=js({"key": "/" + REGION, "offset": True, "byte_size": 16})),
    HTTPKind("shm_register_negative_sizes", path=REGISTER, status=400,
             fragments=("offset", "byte_size"),
             body=js({"key": "/x", "offset": -5, "byte_size": -1})),
    HTTPKind("shm_register_past_the_object", path=REGISTER, status=400, fragments=("corpus",),
             body=js({"key": "/" + REGION, "offset": 0, "byte_size": 2**40})),
    HTTPKind("shm_register_name_oversized", status=400, fragments=("/x",),
             path="/v2/systemsharedmemory/region/" + "r" * 5000 + "/register",
             body=js({"key": "/x", "offset": 0, "byte_size": 16})),
    HTTPKind("shm_input_unregistered", status=404, fragments=("not_registered", "INPUT0"),
             body=add_sub(tensor(data=None, parameters={
                 "shared_memory_region": "not_registered", "shared_memory_byte_size": 16}))),
    HTTPKind("shm_input_past_the_region", status=400, fragments=(REGION, "INPUT0"),
             body=add_sub(tensor(data=None, parameters={
                 "shared_memory_region": REGION, "shared_memory_byte_size": 16,
                 "shared_memory_offset": 60}))),
    HTTPKind("shm_input_negative_offset", status=400, fragments=("INPUT0",),
             body=add_sub(tensor(data=None, parameters={
                 "shared_memory_region": REGION, "shared_memory_byte_size": 16,
                 "shared_memory_offset": -16}))),
    HTTPKind("shm_input_size_wrong_for_shape", status=400, fragments=("INPUT0",),
             body=add_sub(tensor(data=None, parameters={
                 "shared_memory_region": REGION, "shared_memory_byte_size": 12}))),
    HTTPKind("shm_status_unknown", method="GET",
             path="/v2/systemsharedmemory/region/nope/status", status=404,
             fragments=("'nope'",)),
    HTTPKind("cuda_shm_register", path="/v2/cudasharedmemory/region/c/register", status=400,
             body=js({"raw_handle": {"b64": "!!"}, "device_id": -1, "byte_size": 4}),
             fragments=("CUDA shared memory", "'c'")),
    # --- generate, logging, trace -------------------------------------------------------------
    HTTPKind("generate_not_json", path="/v2/models/add_sub/generate", body=b"{bad",
             status=400, fragments=("JSON", "add_sub")),
    HTTPKind("generate_an_array", path="/v2/models/add_sub/generate_stream", body=b"[1]",
             status=400, fragments=("JSON object", "add_sub")),
    HTTPKind("generate_wrong_type", path="/v2/models/add_sub/generate",
             body=js({"INPUT0": "text", "INPUT1": [1, 2, 3, 4]}), status=400,
             fragments=("INPUT0",)),
    HTTPKind("logging_wrong_type", path="/v2/logging", status=400,
             body=js({"log_verbose_level": "loud"}), fragments=("log_verbose_level",)),
    HTTPKind("logging_bool_a_number", path="/v2/logging", body=js({"log_info": 7}),
             status=400, fragments=("log_info",)),
    HTTPKind("trace_rate_not_a_number", path="/v2/trace/setting", status=400,
             body=js({"trace_rate": "fast"}), fragments=("trace_rate",)),
    HTTPKind("trace_level_unknown", path="/v2/trace/setting", status=400,
             body=js({"trace_level": ["LOUD"]}), fragments=("LOUD",)),
    HTTPKind("trace_unknown_model", method="GET", path="/v2/models/nope/trace/setting",
             status=400, fragments=("nope",)),
]

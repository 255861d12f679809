"""Shapes checked before numpy sees them (issue 17, item 7): naiad.frontends.tensors'
check_shape, through every decoder entry point (raw bytes, lists, shared memory) and the
gRPC codec. Each refusal is INVALID_ARG naming the model, the tensor and the shape."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from expect import rejected
from tritonclient.grpc import service_pb2 as pb

from naiad.frontends.grpc.codec import decode_request
from naiad.frontends.tensors import from_list, read_shm_input
from naiad.wire_tensors import NUMPY_MAX_DIMS, check_shape, from_raw

MIB = 1024 * 1024
HUGE = 2**62


@pytest.mark.parametrize("datatype", ["FP32", "INT8", "BOOL", "BYTES", "BF16"])
@pytest.mark.parametrize("shape", [(0, HUGE, HUGE), (HUGE, 0, 2), (0, 2**32, 2**31),
                                   (0,) + (2**16,) * 4])
def test_an_empty_shape_numpy_cannot_make_is_refused(datatype, shape):
    # numpy raises "array is too big" for these even though they hold no element.
    shown = "[" + ",".join(map(str, shape)) + "]"
    rejected(lambda: from_raw("m", "X", datatype, shape, b""), "input 'X' of model 'm'",
             shown, "numpy can address")
    rejected(lambda: from_list("m", "X", datatype, shape, []), "input 'X' of model 'm'", shown)


def test_an_empty_shape_numpy_can_make_still_decodes():
    assert from_raw("m", "X", "FP32", (0, 2**20, 2**20), b"").data.shape == (0, 2**20, 2**20)
    assert from_list("m", "X", "BYTES", (3, 0), []).data.shape == (3, 0)


def test_the_request_limit_bounds_what_a_shape_describes():
    # Empty, and within numpy's reach, but more than a request of 1 MiB could ever carry.
    rejected(lambda: from_raw("m", "X", "FP32", (0, MIB), b"", max_bytes=MIB),
             "input 'X' of model 'm'", f"[0,{MIB}]", f"the {MIB} bytes a request may carry",
             "--http-max-input-size")
    assert from_raw("m", "X", "FP32", (0, MIB // 4), b"", max_bytes=MIB).data.size == 0
    # BYTES elements take 4 bytes at the least (their length prefix).
    rejected(lambda: from_list("m", "X", "BYTES", (0, MIB // 4 + 1), [], max_bytes=MIB),
             "--http-max-input-size")


def test_a_shape_with_data_may_describe_what_the_data_holds():
    data = np.arange(6, dtype=np.float32)
    assert from_raw("m", "X", "FP32", (2, 3), data.tobytes(), max_bytes=8).data.shape == (2, 3)


@pytest.mark.parametrize("shape", [(-1, 4), (2, -3), (-2, -2)])
def test_negative_dimensions_are_refused(shape):
    # (-2, -2) has a positive product: the dimensions themselves are checked.
    rejected(lambda: from_raw("m", "X", "FP32", shape, b"\0" * 16), "input 'X' of model 'm'",
             "negative dimension")


def test_more_dimensions_than_numpy_allows_are_refused():
    shape = (1,) * (NUMPY_MAX_DIMS + 1)
    rejected(lambda: from_raw("m", "X", "FP32", shape, b"\0" * 4), "input 'X' of model 'm'",
             f"{NUMPY_MAX_DIMS + 1} dimensions")
    assert check_shape("m", "X", "FP32", (1,) * NUMPY_MAX_DIMS) == 1


def test_check_shape_counts_elements_exactly():
    assert check_shape("m", "X", "FP64", (3, 0, 7)) == 0
    assert check_shape("m", "X", "FP64", (3, 5, 7), max_bytes=3 * 5 * 7 * 8) == 105
    rejected(lambda: check_shape("m", "X", "FP64", (3, 5, 7), max_bytes=3 * 5 * 7 * 8 - 1),
             "[3,5,7]")


@pytest.fixture
def shm_key() -> Iterator[str]:
    key = f"/naiad-unit-shape-{uuid.uuid4().hex}"
    with open("/dev/shm" + key, "wb") as f:
        f.write(b"\0" * 64)
    try:
        yield key
    finally:
        os.unlink("/dev/shm" + key)


def test_shared_memory_inputs_may_exceed_the_request_limit(registry, shm_key):
    registry.register("r", shm_key, 0, 64)
    params = {"shared_memory_region": "r", "shared_memory_byte_size": 64}
    # Data in shared memory is not part of the request: 64 bytes against a 16-byte limit.
    tensor = read_shm_input(registry, "m", "X", "FP32", (16,), params, max_bytes=16)
    assert tensor.data.shape == (16,)
    rejected(lambda: read_shm_input(registry, "m", "X", "FP32", (0, HUGE), params,
                                    max_bytes=16), "input 'X' of model 'm'", f"[0,{HUGE}]")


def test_the_grpc_codec_bounds_shapes_by_the_request_limit(registry):
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="X", datatype="FP32", shape=[0, MIB])
    msg.raw_input_contents.append(b"")
    rejected(lambda: decode_request("m", 1, msg, registry, MIB), "input 'X' of model 'm'",
             "--http-max-input-size")
    msg = pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="X", datatype="INT32", shape=[0, HUGE, HUGE])
    msg.inputs[0].contents.int_contents.extend([])
    rejected(lambda: decode_request("m", 1, msg, registry, MIB), "input 'X' of model 'm'")

"""Turning wire tensors into numpy and back, shared by the HTTP and gRPC frontends.

Raw bytes (HTTP binary data, gRPC raw contents, shared memory) become ``np.frombuffer``
views without a copy; JSON lists and gRPC typed contents go through ``np.asarray``.
Every size mismatch is an INVALID_ARG error naming the model, the tensor and the numbers,
and a shape is checked (:func:`check_shape`) before numpy is asked for anything.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from naiad.datatypes import (
    ITEM_SIZES,
    NUMPY_DTYPES,
    deserialize_bytes,
    serialize_bytes,
)
from naiad.errors import InferenceServerError, Status, invalid_arg, unsupported
from naiad.models.signature import format_shape
from naiad.shm import Region, SharedMemoryRegistry
from naiad.types import Tensor

# What numpy refuses with a ValueError, even for an array with no element: more dimensions
# than this, or dimensions whose product (zeros left out) times the item size does not fit
# in a signed machine word.
NUMPY_MAX_DIMS = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32
_NUMPY_MAX_BYTES = int(np.iinfo(np.intp).max)
# Bytes per element that a shape describes at the least: a BYTES element is a 4-byte length
# prefix on the wire (and an 8-byte object pointer in numpy).
_WIRE_ITEM_SIZES = {**ITEM_SIZES, "BYTES": 4}
# The most elements numpy can address per datatype.
_NUMPY_ELEMENTS = {datatype: _NUMPY_MAX_BYTES // size for datatype, size in
                   {**ITEM_SIZES, "BYTES": np.dtype(object).itemsize}.items()}


def check_header(model: str, name: Any, datatype: Any, shape: Any) -> tuple[int, ...]:
    """Validate an input's name, datatype and shape fields; return the shape as a tuple."""
    if not isinstance(name, str) or not name:
        raise invalid_arg(f"model '{model}': every input needs a 'name' string")
    if datatype not in NUMPY_DTYPES:
        raise invalid_arg(f"input '{name}' of model '{model}': unknown datatype {datatype!r}; "
                          f"expected one of {', '.join(sorted(NUMPY_DTYPES))}")
    if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise invalid_arg(f"input '{name}' of model '{model}': 'shape' must be a list of "
                          f"non-negative integers, got {shape!r}")
    return tuple(shape)


def check_shape(model: str, name: str, datatype: str, shape: tuple[int, ...],
                max_bytes: int | None = None) -> int:
    """The element count of input ``name``'s ``shape``, once it is safe to hand to numpy;
    INVALID_ARG naming the model, tensor and shape otherwise.

    Refused: a negative dimension, more dimensions than numpy allows, and a shape whose
    dimensions describe more than ``max_bytes`` (the most a request may carry; None: what
    numpy can address) at the datatype's element size, dimensions of 0 counted as 1 (numpy
    refuses ``[0, 2**62, 2**62]`` even though it holds nothing). Python integers do not
    overflow: the product is checked against the bound, never wrapped.
    """
    if len(shape) > NUMPY_MAX_DIMS:
        raise invalid_arg(f"input '{name}' of model '{model}': shape has {len(shape)} "
                          f"dimensions, more than the {NUMPY_MAX_DIMS} a tensor may have")
    numpy_limit = _NUMPY_ELEMENTS[datatype]
    limit = (numpy_limit if max_bytes is None
             else min(numpy_limit, max_bytes // _WIRE_ITEM_SIZES[datatype]))
    count = math.prod(shape)
    if 0 < count <= limit and (not shape or min(shape) > 0):
        return count  # the usual case, decided in C: no zero, no negative, within bounds
    span = count = 1
    for dim in shape:
        if dim < 0:
            raise invalid_arg(f"input '{name}' of model '{model}': shape "
                              f"{format_shape(shape)} has a negative dimension")
        count *= dim
        if dim:
            span *= dim
            if span > limit:
                bound = ("numpy can address" if limit == numpy_limit else
                         f"the {max_bytes} bytes a request may carry (--http-max-input-size)")
                raise invalid_arg(
                    f"input '{name}' of model '{model}': shape {format_shape(shape)} of "
                    f"{datatype} describes more data than {bound}")
    return count


def from_raw(model: str, name: str, datatype: str, shape: tuple[int, ...],
             raw: bytes | bytearray | memoryview, max_bytes: int | None = None) -> Tensor:
    """A tensor from its raw little-endian bytes (or the length-prefixed BYTES form).
    ``max_bytes``: the most a request may carry (see :func:`check_shape`)."""
    count = check_shape(model, name, datatype, shape,
                        None if max_bytes is None else max(max_bytes, len(raw)))
    if datatype == "BYTES":
        what = f"input '{name}' of model '{model}'"
        data = deserialize_bytes(raw, count, what).reshape(shape)
        return Tensor(name, datatype, shape, data)
    expected = count * ITEM_SIZES[datatype]
    if len(raw) != expected:
        raise invalid_arg(
            f"input '{name}' of model '{model}': shape {format_shape(shape)} of {datatype} "
            f"needs {expected} bytes of tensor data, got {len(raw)}")
    data = np.frombuffer(raw, dtype=NUMPY_DTYPES[datatype]).reshape(shape)
    return Tensor(name, datatype, shape, data)


def _flatten(values: Any) -> list:
    if not values or not isinstance(values[0], list):
        return values  # type: ignore[no-any-return]
    flat: list = []
    stack = [values]
    while stack:  # iterative, in order: a deeply nested body must not blow the stack
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            flat.append(item)
    return flat


def from_list(model: str, name: str, datatype: str, shape: tuple[int, ...], values: Any,
              max_bytes: int | None = None) -> Tensor:
    """A tensor from a JSON list (flat or nested, row-major) or gRPC typed contents.
    ``max_bytes``: the most a request may carry (see :func:`check_shape`)."""
    what = f"input '{name}' of model '{model}'"
    count = check_shape(model, name, datatype, shape, max_bytes)
    if not isinstance(values, list):
        try:  # gRPC repeated fields
            if isinstance(values, (str, bytes, dict)):
                raise TypeError
            values = list(values)
        except TypeError:
            raise invalid_arg(f"{what}: 'data' must be a list") from None
    flat = _flatten(values)
    if len(flat) != count:
        raise invalid_arg(f"{what}: shape {format_shape(shape)} has {count} elements but "
                          f"{len(flat)} values were given")
    try:
        if datatype == "BYTES":
            data = np.empty(count, dtype=object)
            for i, item in enumerate(flat):
                if isinstance(item, str):
                    item = item.encode("utf-8")
                elif not isinstance(item, bytes):
                    raise TypeError(f"element {i} is {type(item).__name__}, not a string")
                data[i] = item
        else:
            data = _numbers(flat, datatype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise invalid_arg(f"{what}: data does not fit datatype {datatype}: {exc}") from None
    return Tensor(name, datatype, shape, data.reshape(shape))


# The Python types a JSON list may hold for each kind of datatype: no strings or nulls, no
# floats for integers (1.5 must not become 1), booleans only for BOOL.
_ACCEPTED_TYPES = {"b": {bool}, "i": {int}, "u": {int}, "f": {int, float}}
_EXPECTED = {"b": "true or false", "i": "numbers (integers)", "u": "numbers (integers)",
             "f": "numbers"}


def _numbers(flat: list, datatype: str) -> np.ndarray:
    """A numeric array from a flat list, refusing values the datatype cannot hold."""
    dtype = NUMPY_DTYPES[datatype]
    assert dtype is not None
    kind = "f" if datatype in ("BF16", "FP16") else dtype.kind
    if not set(map(type, flat)) <= _ACCEPTED_TYPES[kind]:
        raise TypeError(f"{datatype} values must be {_EXPECTED[kind]}")
    if kind in "iu" and flat:
        # numpy would wrap out-of-range integers silently
        info = np.iinfo(dtype)
        low, high = min(flat), max(flat)
        if low < info.min or high > info.max:
            raise OverflowError(f"values from {low} to {high} do not fit in {datatype} "
                                f"({info.min} to {info.max})")
    if kind != "f" or datatype == "FP64":  # JSON numbers are doubles: FP64 holds them all
        return np.asarray(flat, dtype=dtype)
    # A finite value too large for the datatype would silently become infinity (then null
    # in a JSON answer): refuse it. FP16/FP32 casts signal it; bfloat16's do not.
    try:
        with np.errstate(over="raise"):
            data = np.asarray(flat, dtype=dtype)
    except FloatingPointError:
        data = None
    if data is None or (datatype == "BF16" and np.isinf(data).any()):
        raise OverflowError(_float_overflow(flat, datatype))
    return data


def _float_overflow(flat: list, datatype: str) -> str:
    """What is wrong with the first value of ``flat`` that overflows ``datatype``."""
    wide = np.asarray(flat, dtype=np.float64)
    with np.errstate(over="ignore"):
        narrow = wide.astype(NUMPY_DTYPES[datatype])
    index = int(np.flatnonzero(np.isinf(narrow) & np.isfinite(wide))[0])
    largest = float(ml_dtypes.finfo(NUMPY_DTYPES[datatype]).max)  # bfloat16 included
    return (f"value {flat[index]!r} (element {index}) is out of range for {datatype} "
            f"(largest magnitude {largest:.8g})")


def to_raw(tensor: Tensor) -> bytes | memoryview:
    """The raw wire bytes of a tensor (no copy for contiguous numeric arrays)."""
    if tensor.datatype == "BYTES":
        return serialize_bytes(tensor.data)
    data = tensor.data
    if not data.size:
        return b""
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    # A uint8 view: memoryview cannot export every dtype (ml_dtypes' bfloat16 among them).
    return memoryview(data.reshape(-1).view(np.uint8))


def to_list(tensor: Tensor) -> list:
    """A flat list for JSON: numbers, booleans, or strings for BYTES."""
    if tensor.datatype == "BYTES":
        out = []
        for item in tensor.data.reshape(-1):
            if isinstance(item, bytes):
                try:
                    item = item.decode("utf-8")
                except UnicodeDecodeError:
                    item = item.decode("latin-1")
            out.append(item if isinstance(item, str) else str(item))
        return out
    if tensor.datatype in ("BF16", "FP16"):
        return tensor.data.astype(np.float32).reshape(-1).tolist()  # type: ignore[no-any-return]
    return tensor.data.reshape(-1).tolist()  # type: ignore[no-any-return]


def read_shm_input(registry: SharedMemoryRegistry, model: str, name: str, datatype: str,
                   shape: tuple[int, ...], params: dict, max_bytes: int | None = None
                   ) -> Tensor:
    """An input whose data lives in a registered shared memory region. ``max_bytes``: the
    most a request may carry; the shape may describe more when the region holds it (data
    in shared memory is not part of the request)."""
    region = params.get("shared_memory_region")
    size = params.get("shared_memory_byte_size")
    offset = params.get("shared_memory_offset", 0)
    what = f"input '{name}' of model '{model}'"
    if not isinstance(region, str):
        raise invalid_arg(f"{what}: 'shared_memory_region' must be a region name (a string)")
    if not isinstance(size, int) or not isinstance(offset, int):
        raise invalid_arg(f"{what}: shared memory input needs integer "
                          f"'shared_memory_byte_size' (and optional 'shared_memory_offset')")
    # Checked before reading: a shape refused must not cost a copy of the region.
    check_shape(model, name, datatype, shape,
                None if max_bytes is None else max(max_bytes, size))
    raw = registry.read(region, offset, size, what)
    return from_raw(model, name, datatype, shape, raw)


def shm_output_target(model: str, name: str, params: dict) -> tuple[str, int, int] | None:
    """(region, offset, byte_size) when an output goes to shared memory, else None."""
    region = params.get("shared_memory_region")
    if region is None:
        return None
    if not isinstance(region, str):
        raise invalid_arg(f"output '{name}' of model '{model}': 'shared_memory_region' must be "
                          f"a region name (a string)")
    size = params.get("shared_memory_byte_size")
    offset = params.get("shared_memory_offset", 0)
    if not isinstance(size, int) or not isinstance(offset, int):
        raise invalid_arg(f"output '{name}' of model '{model}': shared memory output needs "
                          f"integer 'shared_memory_byte_size' (and optional "
                          f"'shared_memory_offset')")
    return region, offset, size


def requested_output_target(registry: SharedMemoryRegistry, model: str, name: str,
                            params: dict) -> tuple[Region, int, int] | None:
    """Check a requested output's parameters before the request runs, as tritonserver does;
    return its shared memory target (region, offset, byte_size) or None. The request holds
    the :class:`Region` itself, so unregistering it meanwhile does not fail the request.

    A target must lie in a registered region (else NOT_FOUND, Triton's status), so a request
    whose answer could not be written fails without running the model. ``classification``
    is refused: naiad does not implement the classification extension."""
    if "classification" in params:
        raise unsupported(f"output '{name}' of model '{model}': classification outputs are "
                          f"not supported (naiad does not implement the classification "
                          f"extension)")
    target = shm_output_target(model, name, params)
    if target is None:
        return None
    region, offset, size = target
    return (registry.target(region, offset, size, f"output '{name}' of model '{model}'"),
            offset, size)


def response_too_large(model: str, output: str, output_bytes: int, total_bytes: int,
                       limit: int) -> InferenceServerError:
    """RESOURCE_EXHAUSTED for a response of ``total_bytes`` over ``limit``
    (``--max-response-size``), naming the model and its largest output."""
    return InferenceServerError(
        f"model '{model}': the response would be {total_bytes} bytes (output '{output}' "
        f"alone {output_bytes}), more than --max-response-size={limit} bytes; ask for the "
        f"output in shared memory or raise --max-response-size", Status.RESOURCE_EXHAUSTED)

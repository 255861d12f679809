"""Turning wire tensors into numpy and back, shared by the HTTP and gRPC frontends: JSON
lists and gRPC typed contents, shared memory inputs and outputs, the response size limit.

JSON lists and gRPC typed contents go through ``np.asarray``; raw bytes are the job of
:mod:`naiad.wire_tensors` (shared with the response cache). Every size mismatch is an
INVALID_ARG error naming the model, the tensor and the numbers, and a shape is checked
(:func:`naiad.wire_tensors.check_shape`) before numpy is asked for anything.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from naiad.datatypes import NUMPY_DTYPES, format_shape
from naiad.errors import InferenceServerError, Status, invalid_arg
from naiad.shm import Region, SharedMemoryRegistry
from naiad.types import Tensor
from naiad.wire_tensors import check_shape, from_raw


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
            data = numbers(flat, datatype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise invalid_arg(f"{what}: data does not fit datatype {datatype}: {exc}") from None
    return Tensor(name, datatype, shape, data.reshape(shape))


# The Python types a JSON list may hold for each kind of datatype: no strings or nulls, no
# floats for integers (1.5 must not become 1), booleans only for BOOL.
_ACCEPTED_TYPES = {"b": {bool}, "i": {int}, "u": {int}, "f": {int, float}}
_EXPECTED = {"b": "true or false", "i": "numbers (integers)", "u": "numbers (integers)",
             "f": "numbers"}


# The largest finite FP16 and FP32 values: a list within them converts without overflow.
_LARGEST = {name: float(np.finfo(NUMPY_DTYPES[name]).max) for name in ("FP16", "FP32")}


def numbers(flat: list, datatype: str) -> np.ndarray:
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
    largest = _LARGEST.get(datatype)
    if largest is not None and flat and -largest <= min(flat) and max(flat) <= largest:
        # Nothing can overflow (a NaN fails a comparison and takes the checked way below):
        # numpy's errstate costs more than the conversion itself.
        return np.asarray(flat, dtype=dtype)
    # A finite value too large for the datatype would silently become infinity (then null
    # in a JSON answer): refuse it. FP16/FP32 casts signal it; bfloat16's do not.
    try:
        with np.errstate(over="raise"):
            data = np.asarray(flat, dtype=dtype)
    except FloatingPointError:
        data = None
    if data is None or (datatype == "BF16" and _finite_became_infinite(flat, data)):
        raise OverflowError(_float_overflow(flat, datatype))
    return data


def _finite_became_infinite(flat: list, data: np.ndarray) -> bool:
    """Whether a finite value of ``flat`` is infinite in ``data`` (an infinity given as
    one, by a caller that is not JSON, stays one)."""
    infinite = np.isinf(data)
    return bool(infinite.any() and np.isfinite(np.asarray(flat, dtype=np.float64)[infinite]).any())


def _float_overflow(flat: list, datatype: str) -> str:
    """What is wrong with the first value of ``flat`` that overflows ``datatype``."""
    wide = np.asarray(flat, dtype=np.float64)
    with np.errstate(over="ignore"):
        narrow = wide.astype(NUMPY_DTYPES[datatype])
    index = int(np.flatnonzero(np.isinf(narrow) & np.isfinite(wide))[0])
    largest = float(ml_dtypes.finfo(NUMPY_DTYPES[datatype]).max)  # bfloat16 included
    return (f"value {flat[index]!r} (element {index}) is out of range for {datatype} "
            f"(largest magnitude {largest:.8g})")


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
    whose answer could not be written fails without running the model. A ``classification``
    output (naiad.classification) cannot go to shared memory, as in Triton."""
    target = shm_output_target(model, name, params)
    if target is None:
        return None
    if "classification" in params:
        raise invalid_arg(f"output '{name}' of model '{model}': a classification output "
                          f"cannot be written to shared memory")
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

"""The headers of the worker protocol's frames (``naiad_stub_wire``): JSON, or, for the two
messages every request makes in their plain form, a fixed binary layout.

Like every module here it runs in the worker under any Python 3.9+ with only numpy and the
standard library, and is imported by its top-level name (``import naiad_stub_headers``).
"""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

Descriptor = List[Any]

# # The binary headers (all integers little-endian):
#   execute: <B 1> <q batch id> <q out offset, -1: none> <I requests>, then per request
#            <H id bytes> <h requested outputs, -1: all> <H inputs> <id> <outputs> <inputs>
#   result:  <B 2> <q batch id> <I responses>, then per response <H outputs> <outputs>
#   a requested output: <H name bytes> <name>
#   a tensor: <H name bytes> <B datatype code> <B dims> <B place> <Q offset> <Q bytes>
#             <name> <q dim> * dims
# Measured (issue 26): packing and reading these in Python costs about what orjson takes for
# the same JSON, and a quarter of the standard library's json, which a worker in a model's
# own environment would otherwise fall back to.

_EXECUTE, _RESULT = 1, 2
_EXECUTE_HEAD = struct.Struct("<Bqql")
_RESULT_HEAD = struct.Struct("<BqI")
_REQUEST_HEAD = struct.Struct("<HhH")
_COUNT = struct.Struct("<H")
_TENSOR_HEAD = struct.Struct("<HBBBQQ")
_DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
              "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES")
_DATATYPE_CODES = {name: code for code, name in enumerate(_DATATYPES)}
_PLACES = {"s": ord("s"), "p": ord("p")}
_SHAPES: Dict[int, struct.Struct] = {}
_EXECUTE_KEYS = frozenset(("op", "id", "requests", "out"))
_RESULT_KEYS = frozenset(("op", "id", "responses"))


def _shape_struct(dims: int) -> struct.Struct:
    layout = _SHAPES.get(dims)
    if layout is None:
        layout = _SHAPES[dims] = struct.Struct(f"<{dims}q")
    return layout


def _pack_text(parts: List[bytes], text: str) -> None:
    data = text.encode("utf-8")
    parts.append(_COUNT.pack(len(data)))
    parts.append(data)


def _pack_tensor(parts: List[bytes], descriptor: Descriptor) -> None:
    name, datatype, shape, place, offset, size = descriptor
    data = name.encode("utf-8")
    parts.append(_TENSOR_HEAD.pack(len(data), _DATATYPE_CODES[datatype], len(shape),
                                   _PLACES[place], offset, size))
    parts.append(data)
    parts.append(_shape_struct(len(shape)).pack(*shape))


def pack_execute(batch: int, out: Optional[int],
                 requests: Sequence[Tuple[str, Optional[Sequence[str]], Sequence[Descriptor]]]
                 ) -> bytes:
    """The binary header of a plain ``execute`` (no request parameters, no trace), from
    what the sender holds, without a dict: per request its id, the outputs it asks for
    (None: all) and its inputs' descriptors; ``out``: where the outputs may start in the
    region (None: no region). ``struct.error`` (``KeyError`` for an unknown datatype) when
    a field does not fit the layout."""
    parts: List[bytes] = [_EXECUTE_HEAD.pack(_EXECUTE, batch, -1 if out is None else out,
                                             len(requests))]
    for request_id, outputs, inputs in requests:
        data = request_id.encode("utf-8")
        parts.append(_REQUEST_HEAD.pack(len(data), -1 if outputs is None else len(outputs),
                                        len(inputs)))
        parts.append(data)
        for name in outputs or ():
            _pack_text(parts, name)
        for descriptor in inputs:
            _pack_tensor(parts, descriptor)
    return b"".join(parts)


def _binary_header(header: dict) -> bytes | None:
    """The binary form of a plain ``execute`` or ``result`` header, or None for every other
    header (JSON carries those)."""
    op = header.get("op")
    if op == "execute" and header.keys() == _EXECUTE_KEYS:
        messages = header["requests"]
        if any(message["parameters"] or "trace" in message for message in messages):
            return None
        return pack_execute(header["id"], header["out"],
                            [(message["id"], message["outputs"], message["inputs"])
                             for message in messages])
    if op == "result" and header.keys() == _RESULT_KEYS:
        responses = header["responses"]
        parts: List[bytes] = [_RESULT_HEAD.pack(_RESULT, header["id"], len(responses))]
        for response in responses:
            if response["parameters"] or response["error"] is not None:
                return None
            outputs = response["outputs"]
            parts.append(_COUNT.pack(len(outputs)))
            for descriptor in outputs:
                _pack_tensor(parts, descriptor)
        return b"".join(parts)
    return None


def encode_header(header: dict) -> bytes:
    """A frame's header: binary for a plain ``execute`` or ``result``, else JSON."""
    try:
        binary = _binary_header(header)
    except (KeyError, TypeError, struct.error):  # a field out of the layout's range
        binary = None
    if binary is not None:
        return binary
    return json.dumps(header, separators=(",", ":")).encode("utf-8")


def _read_tensor(data: Any, position: int) -> Tuple[Descriptor, int]:
    size, code, dims, place, offset, nbytes = _TENSOR_HEAD.unpack_from(data, position)
    position += _TENSOR_HEAD.size
    name = bytes(data[position:position + size]).decode("utf-8")
    position += size
    layout = _shape_struct(dims)
    shape = list(layout.unpack_from(data, position))
    return [name, _DATATYPES[code], shape, chr(place), offset, nbytes], position + layout.size


def _read_text(data: Any, position: int) -> Tuple[str, int]:
    (size,) = _COUNT.unpack_from(data, position)
    position += _COUNT.size
    return bytes(data[position:position + size]).decode("utf-8"), position + size


def is_plain_result(data: Any) -> bool:
    """Whether a frame's header is a plain ``result`` in the binary layout (its first
    byte): ``naiad_stub_plain.read_result`` reads one without a dict."""
    return len(data) > 0 and data[0] == _RESULT


def read_result(data: Any) -> Tuple[int, List[List[Descriptor]]]:
    """The batch id of a plain ``result`` header and, per response, its outputs'
    descriptors: what :func:`decode_header` makes its dict of. Raises ValueError (a broken
    peer) when it cannot."""
    try:
        _op, batch, count = _RESULT_HEAD.unpack_from(data, 0)
        position = _RESULT_HEAD.size
        responses = []
        for _ in range(count):
            (output_count,) = _COUNT.unpack_from(data, position)
            position += _COUNT.size
            outputs = []
            for _ in range(output_count):
                descriptor, position = _read_tensor(data, position)
                outputs.append(descriptor)
            responses.append(outputs)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"a broken message header: {exc}") from None
    return batch, responses


def decode_header(data: Any) -> Any:
    """The header :func:`encode_header` made, as a dict (JSON: whatever the JSON holds).
    Raises ValueError (``struct.error``, ``IndexError``: a broken peer) when it cannot."""
    first = data[0] if len(data) else 0
    try:
        if first == _EXECUTE:
            _op, batch, out, count = _EXECUTE_HEAD.unpack_from(data, 0)
            position = _EXECUTE_HEAD.size
            requests = []
            for _ in range(count):
                id_size, output_count, input_count = _REQUEST_HEAD.unpack_from(data, position)
                position += _REQUEST_HEAD.size
                request_id = bytes(data[position:position + id_size]).decode("utf-8")
                position += id_size
                outputs: Optional[List[str]] = None
                if output_count >= 0:
                    outputs = []
                    for _ in range(output_count):
                        name, position = _read_text(data, position)
                        outputs.append(name)
                inputs = []
                for _ in range(input_count):
                    descriptor, position = _read_tensor(data, position)
                    inputs.append(descriptor)
                requests.append({"id": request_id, "parameters": None, "outputs": outputs,
                                 "inputs": inputs})
            return {"op": "execute", "id": batch, "requests": requests,
                    "out": None if out < 0 else out}
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"a broken message header: {exc}") from None
    if first == _RESULT:
        batch, responses = read_result(data)
        return {"op": "result", "id": batch,
                "responses": [{"outputs": outputs, "parameters": None, "error": None}
                              for outputs in responses]}
    return json.loads(data)

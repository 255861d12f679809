"""The usual batch's two messages, made and read in one pass each.

``naiad_stub_headers`` lays out a plain ``execute`` and ``result`` in binary, and
``naiad_stub_wire`` frames messages with its general tools: descriptors, a ``Packer``, a
header dict on the receiving side. For the usual batch, one whose tensors all travel in the
message's payload (no shared memory region), those layers cost more Python than the model's
own call: packing one result took 540 of a worker's 2,003 opcodes per request (issue 26,
``benchmarks/results/issue26-session13-2026-11-29.md``). The functions here make and read
the same bytes directly, from and to arrays; anything else (a region, parameters, an error,
a response sent later) takes the general way, and tests hold the two ways to the same bytes.

Like every module here it runs in the worker under any Python 3.9+ with only numpy and the
standard library, and is imported by its top-level name (``import naiad_stub_plain``).
"""

from __future__ import annotations

import struct
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from naiad_stub_headers import (
    _COUNT,
    _DATATYPE_CODES,
    _DATATYPES,
    _EXECUTE,
    _EXECUTE_HEAD,
    _REQUEST_HEAD,
    _RESULT,
    _RESULT_HEAD,
    _SHAPES,
    _TENSOR_HEAD,
    _shape_struct,
)
from naiad_stub_wire import (
    _PREFIX,
    ALIGNMENT,
    FRAME_MAGIC,
    NUMPY_DTYPES,
    deserialize_bytes,
    tensor_buffer,
)

_PAYLOAD = ord("p")
_ALIGNED = ALIGNMENT - 1
# A tensor in the order the frames carry it: name, datatype, array.
Named = Tuple[str, str, Any]
# NUMPY_DTYPES by the layout's datatype code (None: BYTES, or one this Python cannot read)
_DTYPES = tuple(NUMPY_DTYPES.get(name) for name in _DATATYPES)
_BYTES_CODE = _DATATYPE_CODES["BYTES"]
# Where a header's bytes after its operation and batch id begin (both layouts put the
# batch id right after the one-byte operation).
_AFTER_BATCH = 9
_BATCH = struct.Struct("<q")
# After the batch id of an ``execute``: where its tensors are (-1: the payload), how many
# requests, then the first request's id size, outputs asked for (-1: all) and inputs.
_ONE_REQUEST = struct.Struct("<qlHhH")
_FIRST_ID = _EXECUTE_HEAD.size + _REQUEST_HEAD.size  # where the first request's id begins
#: How many header layouts each reader remembers (see _Layouts).
LAYOUTS_REMEMBERED = 64
# A tensor record as a remembered layout holds it: name, datatype, dtype, element count,
# offset in the payload, shape.
_Record = Tuple[str, str, Any, int, int, Tuple[int, ...]]


class _Layouts:
    """Headers read before, by their bytes (but the batch id and the request's id), with
    the payload size their tensors need. A model is asked and answers with the same header
    bytes request after request (the same names, datatypes and shapes), so reading its
    records again is waste: a known header only makes the arrays over the new payload.
    Only headers whose tensors are all numbers are kept (BYTES tensors are read from the
    payload each time), and at most ``LAYOUTS_REMEMBERED`` (varying shapes stop adding,
    they do not evict). A dict shared by threads: its single operations are atomic under
    the GIL."""

    def __init__(self) -> None:
        self.known: Dict[bytes, Tuple[Any, int]] = {}

    def get(self, key: bytes) -> Optional[Tuple[Any, int]]:
        return self.known.get(key)

    def keep(self, key: bytes, layout: Any, records: Iterable[_Record]) -> None:
        known = self.known
        if len(known) >= LAYOUTS_REMEMBERED:
            return
        end = 0
        for _name, _datatype, dtype, count, offset, _shape in records:
            if dtype is None:
                return
            end = max(end, offset + count * dtype.itemsize)
        known[key] = (layout, end)


_EXECUTE_LAYOUTS = _Layouts()
_RESULT_LAYOUTS = _Layouts()


class _Headers:
    """The writers' side of :class:`_Layouts`: header bytes made before, by the names,
    datatypes, dtypes and shapes (and request id and outputs asked for) they were made of
    (the sizes in the records follow from them). Only
    headers of number tensors are kept (a BYTES tensor's size depends on its values), at
    most ``LAYOUTS_REMEMBERED``."""

    def __init__(self) -> None:
        self.known: Dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        return self.known.get(key)

    def keep(self, key: Any, made: Any, tensors: Iterable[Named]) -> None:
        known = self.known
        if len(known) >= LAYOUTS_REMEMBERED:
            return
        for _name, datatype, _array in tensors:
            if datatype == "BYTES":
                return
        known[key] = made


_EXECUTE_HEADERS = _Headers()
_RESULT_HEADERS = _Headers()


def _arrays(payload: Any, records: Iterable[_Record]) -> List[Named]:
    """The tensors of remembered ``records`` over ``payload``."""
    frombuffer = np.frombuffer
    return [(name, datatype, frombuffer(payload, dtype, count, offset).reshape(shape))
            for name, datatype, dtype, count, offset, shape in records]


def _tensors(head: List[Any], payload: List[Any], offset: int, tensors: Iterable[Named]
             ) -> int:
    """Append the header records of ``tensors`` to ``head`` and their bytes to ``payload``
    (from ``offset`` on); the payload's size after them."""
    pack = _TENSOR_HEAD.pack
    for name, datatype, array in tensors:
        data = tensor_buffer(datatype, array)
        size = len(data)
        encoded = name.encode("utf-8")
        shape = array.shape
        dims = len(shape)
        head += (pack(len(encoded), _DATATYPE_CODES[datatype], dims, _PAYLOAD, offset, size),
                 encoded, (_SHAPES.get(dims) or _shape_struct(dims)).pack(*shape))
        payload.append(data)
        offset += size
    return offset


def execute_frame(request_id: str, outputs: Optional[Sequence[str]], inputs: Sequence[Named]
                  ) -> Tuple[List[Any], int]:
    """The frame of a plain ``execute`` of one request whose inputs travel in the payload,
    to be :func:`numbered` (what ``naiad_stub_wire.frame_parts(pack_execute(...), buffers)``
    makes), and the bytes its inputs would take in a region (the sender decides by them
    whether it should go through one instead). ``outputs``: the names the request asks for
    (None: all). Raises ``struct.error`` (``KeyError`` for an unknown datatype) when a
    field does not fit the layout."""
    encoded = request_id.encode("utf-8")
    request_head = _REQUEST_HEAD.pack(len(encoded), -1 if outputs is None else len(outputs),
                                      len(inputs))
    key = (None if outputs is None else tuple(outputs),
           tuple([(name, datatype, array.dtype, array.shape)
                  for name, datatype, array in inputs]))
    known = _EXECUTE_HEADERS.get(key)
    if known is not None:  # the header after the request's id, as made before
        rest, size, aligned = known
        payload = [tensor_buffer(datatype, array) for _, datatype, array in inputs]
    else:
        head: List[Any] = []
        count = _COUNT.pack
        for name in outputs or ():
            data = name.encode("utf-8")
            head += (count(len(data)), data)
        payload = []
        size = _tensors(head, payload, 0, inputs)
        aligned = 0
        for data in payload:
            aligned += (len(data) + _ALIGNED) & ~_ALIGNED
        rest = b"".join(head)
        _EXECUTE_HEADERS.keep(key, (rest, size, aligned), inputs)
    return [_PREFIX.pack(FRAME_MAGIC, _FIRST_ID + len(encoded) + len(rest), size), None,
            request_head, encoded, rest, *payload], aligned


def numbered(frame: List[Any], batch: int) -> List[Any]:
    """An :func:`execute_frame` given its batch id (the sender numbers a batch once it
    knows it sends it)."""
    frame[1] = _EXECUTE_HEAD.pack(_EXECUTE, batch, -1, 1)
    return frame


def result_frame(batch: int, results: Sequence[Any], deferred: Any) -> Optional[List[Any]]:
    """The frame of a plain ``result`` whose outputs travel in the payload, from the
    runner's results ``(outputs, parameters, error)``; None when one is not plain (it is
    ``deferred``, or has parameters or an error): the general way sends that batch."""
    for result in results:
        if result is deferred or result[1] or result[2] is not None:
            return None
    key = tuple([tuple([(name, datatype, array.dtype, array.shape)
                        for name, datatype, array in result[0]]) for result in results])
    known = _RESULT_HEADERS.get(key)
    if known is not None:
        header, size = known
        payload = [tensor_buffer(datatype, array)
                   for result in results for _, datatype, array in result[0]]
    else:
        head: List[Any] = []
        payload = []
        size = 0
        count = _COUNT.pack
        for result in results:
            outputs = result[0]
            head.append(count(len(outputs)))
            size = _tensors(head, payload, size, outputs)
        header = b"".join(head)
        _RESULT_HEADERS.keep(key, (header, size),
                             [tensor for result in results for tensor in result[0]])
    batch_head = _RESULT_HEAD.pack(_RESULT, batch, len(results))
    return [_PREFIX.pack(FRAME_MAGIC, len(batch_head) + len(header), size), batch_head, header,
            *payload]


def _read_tensors(data: Any, position: int, number: int, payload: Any
                  ) -> Optional[Tuple[List[Named], int, int, List[_Record]]]:
    """``number`` tensor records from ``position``, as arrays over ``payload`` (views, no
    copy), where the records end, the bytes the tensors would take in a region, and the
    records as a layout remembers them; None when one lies in the region, or cannot be
    read (the general way reads that message, and says what is wrong with it)."""
    tensors = []
    records: List[_Record] = []
    taken = 0
    unpack = _TENSOR_HEAD.unpack_from
    record = _TENSOR_HEAD.size
    end = len(payload)
    for _ in range(number):
        size, code, dims, place, offset, nbytes = unpack(data, position)
        if place != _PAYLOAD:
            return None
        position += record
        name = str(data[position:position + size], "utf-8")
        position += size
        layout = _SHAPES.get(dims) or _shape_struct(dims)
        shape = layout.unpack_from(data, position)
        position += layout.size
        if offset + nbytes > end:
            return None  # the general way says what is wrong
        taken += (nbytes + _ALIGNED) & ~_ALIGNED
        dtype = _DTYPES[code]
        try:
            if dtype is not None:
                count = nbytes // dtype.itemsize
                array = np.frombuffer(payload, dtype, count, offset).reshape(shape)
            elif code == _BYTES_CODE:
                elements = 1
                for dim in shape:
                    elements *= dim
                array = deserialize_bytes(memoryview(payload)[offset:offset + nbytes],
                                          elements)
                if array.size != elements:
                    return None
                array = array.reshape(shape)
            else:
                return None  # a datatype this Python cannot read
        except ValueError:  # bytes that do not make the shape
            return None
        datatype = _DATATYPES[code]
        tensors.append((name, datatype, array))
        records.append((name, datatype, dtype if code != _BYTES_CODE else None,
                        array.size, offset, shape))
    return tensors, position, taken, records


def read_execute(head: Any, payload: Any
                 ) -> Optional[Tuple[int, List[Tuple[str, Optional[List[str]], Dict[str, Named]]]]]:
    """A plain ``execute`` header whose tensors travel in ``payload``: the batch id and,
    per request, its id, the outputs it asks for (None: all) and its inputs by name (as
    arrays over ``payload``). None for any other header. Raises ValueError (a broken
    peer) when it cannot read one."""
    if not len(head) or head[0] != _EXECUTE:
        return None
    key = None
    if len(head) >= _FIRST_ID:  # one request's header after its id may be known
        out, number, id_size, output_count, input_count = _ONE_REQUEST.unpack_from(
            head, _AFTER_BATCH)
        if number == 1 and out < 0:
            start = _FIRST_ID + id_size
            key = bytes(head[start:])
            known = _EXECUTE_LAYOUTS.get(key)
            if (known is not None and len(payload) >= known[1]
                    and known[0][:2] == (output_count, input_count)):
                outputs, records = known[0][2:]
                try:
                    request_id = str(head[_FIRST_ID:start], "utf-8")
                except UnicodeDecodeError as exc:
                    raise ValueError(f"a broken message header: {exc}") from None
                return _BATCH.unpack_from(head, 1)[0], [(
                    request_id, None if outputs is None else list(outputs),
                    {named[0]: named for named in _arrays(payload, records)})]
    try:
        _op, batch, out, count = _EXECUTE_HEAD.unpack_from(head, 0)
        if out >= 0:
            return None  # the batch uses the region
        position = _EXECUTE_HEAD.size
        requests = []
        for _ in range(count):
            id_size, output_count, input_count = _REQUEST_HEAD.unpack_from(head, position)
            position += _REQUEST_HEAD.size
            request_id = str(head[position:position + id_size], "utf-8")
            position += id_size
            outputs: Optional[List[str]] = None
            if output_count >= 0:
                outputs = []
                for _ in range(output_count):
                    (size,) = _COUNT.unpack_from(head, position)
                    position += _COUNT.size
                    outputs.append(str(head[position:position + size], "utf-8"))
                    position += size
            read = _read_tensors(head, position, input_count, payload)
            if read is None:
                return None
            inputs, position, _taken, records = read
            requests.append((request_id, outputs, {named[0]: named for named in inputs}))
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"a broken message header: {exc}") from None
    if key is not None and position == len(head):
        _EXECUTE_LAYOUTS.keep(key, (output_count, input_count,
                                    None if outputs is None else tuple(outputs), records),
                              records)
    return batch, requests


def read_result(head: Any, payload: Any) -> Optional[Tuple[int, List[List[Named]], int]]:
    """A plain ``result`` header whose outputs travel in ``payload``: the batch id, per
    response its outputs as arrays over ``payload`` (views: the server's payload is a
    buffer of its own), and the bytes the outputs would take in a region (what the
    server sizes the next one by). None when an output lies in the region (the general way
    reads those). Raises ValueError (a broken peer) when it cannot read it."""
    key = bytes(head[_AFTER_BATCH:])
    known = _RESULT_LAYOUTS.get(key)
    if known is not None and len(payload) >= known[1]:
        layout, taken = known[0]
        return (_BATCH.unpack_from(head, 1)[0],
                [_arrays(payload, records) for records in layout], taken)
    try:
        _op, batch, count = _RESULT_HEAD.unpack_from(head, 0)
        position = _RESULT_HEAD.size
        responses = []
        layout = []
        every_record: List[_Record] = []
        taken = 0
        for _ in range(count):
            (output_count,) = _COUNT.unpack_from(head, position)
            read = _read_tensors(head, position + _COUNT.size, output_count, payload)
            if read is None:
                return None
            outputs, position, size, records = read
            responses.append(outputs)
            layout.append(records)
            every_record += records
            taken += size
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"a broken message header: {exc}") from None
    if position == len(head):  # a header with bytes after its records is not a layout
        _RESULT_LAYOUTS.keep(key, (layout, taken), every_record)
    return batch, responses, taken

"""The message protocol between naiad and a Python model's worker process (version 1).

Both ends import this module: the server as ``naiad_backend_python.stub.naiad_stub_wire``,
the worker, which may run another Python (3.9 or newer) with only numpy installed, as the
top-level ``naiad_stub_wire``. It uses nothing but the standard library and numpy.

A message is one frame on a Unix stream socket::

    <u32 FRAME_MAGIC> <u32 header length> <u32 payload length> <header> <payload bytes>

The magic makes a peer that writes anything else (a model writing to the socket, a half
message) a :class:`ProtocolError` at the next frame, instead of lengths that would have the
reader wait for bytes that never come.

and may carry file descriptors (SCM_RIGHTS) with its first byte. The header is a JSON
object whose ``op`` says what it is (``naiad_stub_main`` lists them), except for the two
messages every request makes in its plain form, which have a fixed binary layout
(:func:`encode_header`; the first byte tells them apart from ``{``): ``execute`` when no
request carries parameters or a trace and no region comes with it, and ``result`` when
no response carries parameters or an error. Either way the receiver gets the same dict.
The usual batch and answer, whose tensors travel in the payload, are made and read in one
pass each without the dict (``naiad_stub_plain``).
No pickle: either end may be any Python.

Tensors travel as descriptors ``[name, datatype, shape, place, offset, nbytes]``:

- place ``"s"``: in the instance's shared memory region, at ``offset`` (64-byte aligned);
  the worker reads its inputs there as numpy views, without a copy;
- place ``"p"``: in this frame's payload, at ``offset``: the fallback when the region is
  missing or too small.

BYTES tensors are in Triton's serialized form (each element a 4-byte little-endian length
and its bytes).
"""

from __future__ import annotations

import array
import mmap
import os
import socket
import struct
import threading
from collections.abc import Sequence
from typing import Any, List, Tuple

import numpy as np

# pack_execute and is_plain_result are for the server, which packs its plain batches and
# tells their plain results with them through this module
from naiad_stub_headers import (  # noqa: F401
    decode_header,
    encode_header,
    is_plain_result,
    pack_execute,
)

PROTOCOL_VERSION = 3
ALIGNMENT = 64
# The largest header accepted: a frame announcing more is a broken peer, not a message.
MAX_HEADER_BYTES = 256 * 1024 * 1024
# Every frame starts with these four bytes ("NAD3", little-endian).
FRAME_MAGIC = 0x3344414E
_PREFIX = struct.Struct("<III")
_LENGTH = struct.Struct("<I")
_MAX_FDS = 4
_ANCILLARY = socket.CMSG_SPACE(_MAX_FDS * 4)
# Messages up to about this size are read with one system call.
RECEIVE_BUFFER_BYTES = 64 * 1024

try:  # BF16 needs ml_dtypes (tritonclient and the server have it); a worker may not
    import ml_dtypes

    _BF16: Any = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the worker's environment
    _BF16 = None

# V2 datatype -> numpy dtype; None for BYTES (an object array of bytes).
NUMPY_DTYPES = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": _BF16,
    "BYTES": None,
}
if _BF16 is None:
    del NUMPY_DTYPES["BF16"]

Descriptor = List[Any]


class PeerGone(ConnectionError):
    """The other end closed the socket (the worker ended, or the server went away)."""


class ProtocolError(ValueError):
    """The other end sent something that is not a message of this protocol: the stream
    cannot be read any further (the server ends such a worker and starts a new one)."""


# --- BYTES tensors ----------------------------------------------------------------------


def serialize_bytes(array: np.ndarray) -> bytes:
    """A BYTES tensor (object or ``np.bytes_`` array) in Triton's serialized form. Items
    that are not bytes are ``str()``-ed and UTF-8 encoded."""
    parts = []
    pack = _LENGTH.pack
    for item in array.reshape(-1, order="C"):
        if type(item) is not bytes:
            if isinstance(item, (bytearray, memoryview, np.bytes_)):
                item = bytes(item)
            else:
                item = str(item).encode("utf-8")
        parts.append(pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def deserialize_bytes(buffer: Any, count: int = -1) -> np.ndarray:
    """Triton's serialized form -> a flat object array of ``bytes``; ``count`` elements
    (or as many as the buffer holds when -1)."""
    view = memoryview(buffer)
    items = []
    offset, end = 0, len(view)
    unpack = _LENGTH.unpack_from
    while offset < end and count != len(items):
        (length,) = unpack(view, offset)
        offset += 4
        if offset + length > end:
            raise ValueError("a BYTES element runs past the end of its tensor")
        items.append(bytes(view[offset:offset + length]))
        offset += length
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


# --- shared memory ----------------------------------------------------------------------


class Region:
    """A shared memory region mapped into this process."""

    def __init__(self, fd: int, size: int) -> None:
        self.size = size
        self.memory = mmap.mmap(fd, size)

    def close(self) -> None:
        try:
            self.memory.close()
        except BufferError:  # numpy views of it are still alive: the GC unmaps it later
            pass


def create_region(directory: str, size: int) -> tuple[Region, int]:
    """A region of ``size`` bytes backed by a file in ``directory`` (``/dev/shm``), with its
    pages reserved now, so that running out of space is an error here and not a SIGBUS
    later. The file is unlinked at once: nothing is left behind whatever happens to either
    process. Returns the region and its descriptor (to send to the worker, then close).
    Raises OSError when the directory is missing or too small."""
    path = os.path.join(directory, f"naiad-{os.getpid()}-{next(_region_numbers)}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.unlink(path)
        os.posix_fallocate(fd, 0, size)
        return Region(fd, size), fd
    except BaseException:
        os.close(fd)
        raise


class _Counter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    def __next__(self) -> int:
        with self._lock:
            self._value += 1
            return self._value


_region_numbers = _Counter()


def align(offset: int) -> int:
    return (offset + ALIGNMENT - 1) & ~(ALIGNMENT - 1)


# --- packing tensors --------------------------------------------------------------------


def tensor_buffer(datatype: str, array: np.ndarray) -> memoryview:
    """The bytes of a tensor as they travel (row-major; BYTES serialized)."""
    if datatype == "BYTES":
        return memoryview(serialize_bytes(array))
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    if not array.size:
        return memoryview(b"")
    try:  # the buffer's own bytes: a quarter of the cost of a uint8 view
        return array.data.cast("B")
    except ValueError:  # the buffer protocol does not know every dtype (bfloat16)
        return memoryview(array.reshape(-1).view(np.uint8))


class Packer:
    """Lays out the tensors of one message: into ``region`` from ``start`` while they fit,
    else into the frame's payload."""

    def __init__(self, region: Region | None, start: int = 0) -> None:
        self.region = region
        self.offset = align(start)
        self.payload: list[memoryview] = []
        self.payload_size = 0
        # Bytes that did not fit in the region (the region should grow by this much).
        self.overflow = 0

    def add(self, name: str, datatype: str, array: np.ndarray) -> Descriptor:
        return self.add_buffer(name, datatype, array.shape, tensor_buffer(datatype, array))

    def add_buffer(self, name: str, datatype: str, shape: Sequence[int],
                   data: memoryview) -> Descriptor:
        """Place a tensor whose bytes are ``data`` (see :func:`tensor_buffer`)."""
        size = len(data)
        region = self.region
        if region is not None and self.offset + size <= region.size:
            offset = self.offset
            region.memory[offset:offset + size] = data
            self.offset = align(offset + size)
            return [name, datatype, list(shape), "s", offset, size]
        self.overflow += size
        offset = self.payload_size
        self.payload.append(data)
        self.payload_size += size
        return [name, datatype, list(shape), "p", offset, size]


def pack_tensors(tensors: Sequence[Tuple[str, str, np.ndarray]], directory: str | None,
                 inline_max: int) -> Tuple[List[Descriptor], List[memoryview], List[int], int]:
    """Lay out the tensors of a message that stands alone (a BLS call, its answers, a
    decoupled model's response): together at least ``inline_max`` bytes, they go into a
    fresh region of their own in ``directory`` (the receiver maps it and reads them in
    place; the mapping lives as long as its arrays), else into the payload. Returns the
    descriptors, the payload buffers, the region's descriptor (to send, then close) and
    the region's size (0: none)."""
    staged = [(name, datatype, array.shape, tensor_buffer(datatype, array))
              for name, datatype, array in tensors]
    total = 0
    for _name, _datatype, _shape, data in staged:
        total += align(len(data))
    region = None
    fds: List[int] = []
    if directory and total and total >= inline_max:
        try:
            region, fd = create_region(directory, total)
            fds = [fd]
        except OSError:  # no room in /dev/shm: the payload carries them
            region = None
    packer = Packer(region)
    descriptors = [packer.add_buffer(name, datatype, shape, data)
                   for name, datatype, shape, data in staged]
    size = 0
    if region is not None:
        size = region.size
        region.close()  # this side is done with it; the receiver maps its own
    return descriptors, packer.payload, fds, size


def close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)


def open_region(header: dict, fds: Sequence[int]) -> Region | None:
    """The region a message of :func:`pack_tensors` brought (its descriptor is closed:
    the mapping stays valid), or None."""
    if not fds:
        return None
    try:
        return Region(fds[0], int(header["region_size"]))
    finally:
        for fd in fds:
            os.close(fd)


def unpack(descriptor: Descriptor, region: Region | None, payload: Any,
           copy: bool) -> tuple[str, str, np.ndarray]:
    """``(name, datatype, array)`` for a descriptor. Fixed-size tensors are views of the
    region or payload unless ``copy`` (the server copies what the region holds: the region
    is reused by the next message)."""
    name, datatype, shape, place, offset, size = descriptor
    if place == "s":
        if region is None or offset + size > region.size:
            raise ValueError(f"tensor '{name}' lies outside the shared memory region")
        source: Any = region.memory
    else:
        source = payload
        copy = False
        if offset + size > len(payload):
            raise ValueError(f"tensor '{name}' lies outside the message payload")
    shape = tuple(shape)
    if datatype == "BYTES":
        count = 1
        for dim in shape:
            count *= dim
        array = deserialize_bytes(memoryview(source)[offset:offset + size], count)
        if array.size != count:
            raise ValueError(f"BYTES tensor '{name}' holds {array.size} elements, its shape "
                             f"{list(shape)} needs {count}")
        return name, datatype, array.reshape(shape)
    dtype = NUMPY_DTYPES.get(datatype)
    if dtype is None:
        hint = " (install ml_dtypes in its environment)" if datatype == "BF16" else ""
        raise ValueError(f"tensor '{name}' has datatype {datatype}, which this worker cannot "
                         f"read{hint}")
    count = size // dtype.itemsize
    array = np.frombuffer(source, dtype, count, offset).reshape(shape)
    return name, datatype, (array.copy() if copy else array)


# --- frames ---------------------------------------------------------------------------

PREFIX_SIZE = _PREFIX.size
ANCILLARY_SPACE = _ANCILLARY


def frame_parts(header: dict | bytes, buffers: Sequence[memoryview] = (),
                fds: Sequence[int] = ()) -> List[Any]:
    """The pieces of one frame, to write in order (``sendmsg``). ``header``: a dict, or
    bytes :func:`naiad_stub_headers.pack_execute` encoded (no descriptors come with
    those). A frame that carries descriptors says how many in its header: the receiver
    takes that many of those that arrived, in order (they come with the frame's first
    byte, which one read may take together with the end of the frame before)."""
    if type(header) is bytes:
        if fds:
            raise ValueError("descriptors need a header that counts them (a dict)")
        head = header
    else:
        if fds:
            header = dict(header, fds=len(fds))
        head = encode_header(header)
    payload_size = 0
    for buffer in buffers:
        payload_size += len(buffer)
    parts: List[Any] = [_PREFIX.pack(FRAME_MAGIC, len(head), payload_size), head]
    parts.extend(buffers)
    return parts


def unpack_prefix(data: Any, offset: int) -> Tuple[int, int]:
    """(header size, payload size) of the frame starting at ``offset``. Raises
    :class:`ProtocolError` when no frame starts there."""
    magic, head_size, payload_size = _PREFIX.unpack_from(data, offset)
    if magic != FRAME_MAGIC:
        raise ProtocolError(f"bytes that do not start a message "
                            f"({bytes(data[offset:offset + 12])[:12]!r}...)")
    if head_size > MAX_HEADER_BYTES:
        raise ProtocolError(f"a message header of {head_size} bytes is over the limit of "
                            f"{MAX_HEADER_BYTES}")
    return head_size, payload_size


def check_header(header: Any, fds_arrived: int) -> int:
    """How many of the descriptors that arrived a decoded header takes. Raises
    :class:`ProtocolError` for a header that is not an object, or that announces
    descriptors that did not come."""
    if type(header) is not dict:
        raise ProtocolError(f"a message header that is not an object: {str(header)[:80]!r}")
    count = header.get("fds", 0)
    if type(count) is not int or not 0 <= count <= fds_arrived:
        raise ProtocolError(f"a message announces {count!r} descriptors, {fds_arrived} "
                            f"arrived")
    return count


def fd_array(fds: Sequence[int]) -> array.array:
    return array.array("i", fds)


def fds_from(ancillary: Sequence[Tuple[int, int, bytes]]) -> List[int]:
    """The descriptors in ``recvmsg``'s ancillary data."""
    fds: List[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", data[:len(data) - len(data) % 4]))
    return fds


class Connection:
    """One end of the worker socket: whole messages in, whole messages out. ``send`` may
    be called from several threads; ``receive`` from one at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()
        self._buffer = bytearray(RECEIVE_BUFFER_BYTES)
        self._view = memoryview(self._buffer)
        self._start = 0  # unread bytes are self._buffer[self._start:self._end]
        self._end = 0
        self._fds: list[int] = []  # descriptors received and not yet taken by a message

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, header: dict, buffers: Sequence[memoryview] = (),
             fds: Sequence[int] = ()) -> None:
        self.send_frame(frame_parts(header, buffers, fds), fds)

    def send_frame(self, parts: List[Any], fds: Sequence[int] = ()) -> None:
        """Send a frame made whole already (``frame_parts``, ``naiad_stub_plain``)."""
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fd_array(fds))] if fds else []
        total = sum(map(len, parts))
        with self._send_lock:
            try:
                sent = self.sock.sendmsg(parts, ancillary)
                if sent < total:  # a partial write: the rest goes without descriptors
                    self._send_rest(parts, sent)
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise PeerGone(str(exc)) from None

    def _send_rest(self, parts: list[Any], sent: int) -> None:
        for part in parts:
            size = len(part)
            if sent >= size:
                sent -= size
                continue
            self.sock.sendall(memoryview(part)[sent:])
            sent = 0

    def has_frame(self) -> bool:
        """Whether a whole frame is buffered already (a read took it with the one before):
        :meth:`receive` then returns without touching the socket."""
        buffered = self._end - self._start
        if buffered < _PREFIX.size:
            return False
        head_size, payload_size = unpack_prefix(self._buffer, self._start)
        return buffered >= _PREFIX.size + head_size + payload_size

    def receive(self) -> tuple[dict, memoryview, list[int]]:
        """The next message: its header, its payload and the descriptors it carried.
        Raises :class:`PeerGone` at the end of the stream.

        Reads go into a buffer of ``RECEIVE_BUFFER_BYTES``, so a small message (most are)
        takes one system call; the payload gets a buffer of its own, since the tensors in it
        are handed on as views. Descriptors arrive with the first byte of their message,
        which one read may take together with the end of the message before: they queue
        here, and a message takes as many as its header's ``fds`` says."""
        head, payload = self.receive_raw()
        header, fds = self.decode(head)
        return header, payload, fds

    def receive_raw(self) -> tuple[bytearray, memoryview]:
        """The next message's header, undecoded, and its payload; the descriptors that
        came stay queued for :meth:`decode`. Raises :class:`PeerGone` at the end of the
        stream."""
        fds = self._fds
        self._fill(_PREFIX.size, fds)
        start = self._start
        head_size, payload_size = unpack_prefix(self._buffer, start)
        start += _PREFIX.size
        end = start + head_size + payload_size
        if end <= self._end:  # the whole frame is buffered (most are: one read took it)
            view = self._view
            self._start = end
            return (bytearray(view[start:start + head_size]),
                    memoryview(bytearray(view[start + head_size:end])))
        self._start = start
        head = self._take(head_size, fds)
        payload = self._take(payload_size, fds) if payload_size else bytearray()
        return head, memoryview(payload)

    def decode(self, head: Any) -> tuple[dict, list[int]]:
        """A header :meth:`receive_raw` read, and the descriptors its message took."""
        try:
            header = decode_header(head)
        except ValueError as exc:
            raise ProtocolError(str(exc)) from None
        fds = self._fds
        count = check_header(header, len(fds))
        mine = fds[:count]
        del fds[:count]
        return header, mine

    def _take(self, size: int, fds: list[int]) -> bytearray:
        """The next ``size`` bytes of the stream, in a bytearray of their own."""
        out = bytearray(size)
        buffered = min(self._end - self._start, size)
        out[:buffered] = self._view[self._start:self._start + buffered]
        self._start += buffered
        rest = size - buffered
        if rest and rest < len(self._buffer):  # small: through the buffer
            self._fill(rest, fds)
            out[buffered:] = self._view[self._start:self._start + rest]
            self._start += rest
        elif rest:  # large: straight into place
            view = memoryview(out)[buffered:]
            while len(view):
                view = view[self._recv(view, fds):]
        return out

    def _fill(self, need: int, fds: list[int]) -> None:
        """Read until the buffer holds at least ``need`` unread bytes."""
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._buffer) - self._start < need:  # move what is left to the front
            left = self._end - self._start
            self._view[:left] = self._view[self._start:self._end]
            self._start, self._end = 0, left
        while self._end - self._start < need:
            self._end += self._recv(self._view[self._end:], fds)

    def _recv(self, view: memoryview, fds: list[int]) -> int:
        received, ancillary, _flags, _address = self.sock.recvmsg_into([view], _ANCILLARY)
        fds.extend(fds_from(ancillary))
        if received == 0:
            for fd in fds:
                os.close(fd)
            fds.clear()
            raise PeerGone("the other end of the worker socket closed it")
        return received

    def detach(self) -> Tuple[bytes, List[int]]:
        """What was read and not yet taken by a message (bytes and descriptors), for
        whoever reads this socket next."""
        left = bytes(self._view[self._start:self._end])
        fds, self._fds = self._fds, []
        self._start = self._end = 0
        return left, fds

    def close(self) -> None:
        self.sock.close()

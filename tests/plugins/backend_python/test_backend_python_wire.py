"""The worker message protocol (``naiad_stub_wire``): frames, descriptors passed along,
tensors in the shared memory region and in the payload, and the checks on what arrives."""

from __future__ import annotations

import os
import socket
import threading

import ml_dtypes
import numpy as np
import pytest

from naiad_backend_python.stub import naiad_stub_headers as headers
from naiad_backend_python.stub import naiad_stub_wire as wire


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    left, right = wire.Connection(a), wire.Connection(b)
    yield left, right
    left.close()
    right.close()


def test_a_frame_round_trips_with_its_payload(pair):
    left, right = pair
    left.send({"op": "x", "n": [1, 2]}, [memoryview(b"abc"), memoryview(b"defg")])
    header, payload, fds = right.receive()
    assert header == {"op": "x", "n": [1, 2]}
    assert bytes(payload) == b"abcdefg"
    assert fds == []


def test_many_small_frames_in_one_read_come_apart(pair):
    left, right = pair
    for i in range(50):
        left.send({"i": i}, [memoryview(bytes([i]) * i)])
    for i in range(50):
        header, payload, _ = right.receive()
        assert header == {"i": i} and bytes(payload) == bytes([i]) * i


def test_a_payload_larger_than_the_receive_buffer(pair):
    left, right = pair
    data = os.urandom(wire.RECEIVE_BUFFER_BYTES * 5 + 17)
    sender = threading.Thread(target=left.send, args=({"big": True}, [memoryview(data)]))
    sender.start()  # the socket's buffer is smaller than the frame: send and read at once
    header, payload, _ = right.receive()
    sender.join()
    assert header == {"big": True} and bytes(payload) == data


def test_a_descriptor_travels_with_its_frame(pair, tmp_path):
    left, right = pair
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    fd = os.open(path, os.O_RDONLY)
    try:
        left.send({"op": "fd"}, fds=[fd])
    finally:
        os.close(fd)
    header, _, fds = right.receive()
    assert header == {"op": "fd", "fds": 1} and len(fds) == 1
    assert os.read(fds[0], 5) == b"hello"
    os.close(fds[0])


def test_the_end_of_the_stream_is_peer_gone(pair):
    left, right = pair
    left.close()
    with pytest.raises(wire.PeerGone):
        right.receive()


def test_a_header_over_the_limit_is_refused(pair):
    left, right = pair
    left.sock.sendall(wire._PREFIX.pack(wire.FRAME_MAGIC, wire.MAX_HEADER_BYTES + 1, 0))
    with pytest.raises(wire.ProtocolError, match="over the limit"):
        right.receive()


@pytest.mark.parametrize("junk", [
    b"\x07" * 12,  # lengths that would have the reader wait for 117 MB that never come
    b"\x00" * 3,  # half of a prefix, then a real message
])
def test_bytes_that_are_not_a_message_are_a_protocol_error(pair, junk):
    left, right = pair
    left.sock.sendall(junk)
    left.send({"op": "log", "message": "after the junk"})
    with pytest.raises(wire.ProtocolError, match="do not start a message"):
        right.receive()


@pytest.mark.parametrize(("head", "match"), [
    (b"{not json", "broken|Expecting"),
    (b"[1, 2]", "not an object"),
    (b'{"op": "x", "fds": 2}', "announces 2 descriptors"),
])
def test_a_header_that_cannot_be_read_is_a_protocol_error(pair, head, match):
    left, right = pair
    left.sock.sendall(wire._PREFIX.pack(wire.FRAME_MAGIC, len(head), 0) + head)
    with pytest.raises(wire.ProtocolError, match=match):
        right.receive()


ARRAYS = [
    ("FP32", np.arange(12, dtype=np.float32).reshape(3, 4)),
    ("INT64", np.array(7, dtype=np.int64)),  # 0-d
    ("BOOL", np.array([True, False])),
    ("FP16", np.zeros((0, 3), np.float16)),  # empty
    ("BF16", np.arange(4).astype(ml_dtypes.bfloat16)),
    ("BYTES", np.array([[b"a", b""], [b"\x00\xff", b"text"]], dtype=object)),
    ("UINT8", np.arange(10, dtype=np.uint8)[::2]),  # not contiguous
]


@pytest.mark.parametrize(("datatype", "array"), ARRAYS, ids=[a[0] + str(a[1].shape)
                                                             for a in ARRAYS])
@pytest.mark.parametrize("in_region", [True, False])
def test_tensors_round_trip(datatype, array, in_region, tmp_path):
    region, fd = wire.create_region(str(tmp_path), 1 << 16) if in_region else (None, -1)
    if fd >= 0:
        os.close(fd)
    packer = wire.Packer(region)
    descriptor = packer.add("T", datatype, array)
    assert descriptor[3] == ("s" if in_region else "p")
    payload = b"".join(bytes(b) for b in packer.payload)
    name, got_type, got = wire.unpack(descriptor, region, payload, copy=True)
    assert (name, got_type, got.shape) == ("T", datatype, array.shape)
    np.testing.assert_array_equal(got, array)


def test_a_region_that_is_too_small_sends_the_rest_in_the_payload(tmp_path):
    region, fd = wire.create_region(str(tmp_path), 128)
    os.close(fd)
    packer = wire.Packer(region)
    small = packer.add("A", "FP32", np.ones(8, np.float32))
    large = packer.add("B", "FP32", np.ones(64, np.float32))
    assert (small[3], large[3]) == ("s", "p")
    assert packer.overflow == 256


def test_regions_leave_nothing_in_their_folder(tmp_path):
    region, fd = wire.create_region(str(tmp_path), 4096)
    os.close(fd)
    assert list(tmp_path.iterdir()) == []  # unlinked at once
    region.close()


def test_a_region_larger_than_the_folder_is_an_error_not_a_crash(tmp_path):
    statvfs = os.statvfs(tmp_path)
    too_big = statvfs.f_bavail * statvfs.f_frsize * 4 + (1 << 30)
    with pytest.raises(OSError):
        wire.create_region(str(tmp_path), too_big)
    with pytest.raises(OSError):
        wire.create_region(str(tmp_path / "missing"), 4096)


@pytest.mark.parametrize(("descriptor", "message"), [
    (["T", "FP32", [4], "p", 0, 16], "outside the message payload"),
    (["T", "FP32", [4], "s", 0, 16], "outside the shared memory region"),
    (["T", "BYTES", [3], "p", 0, 7], "holds 1 elements, its shape [3] needs 3"),
    (["T", "NOPE", [1], "p", 0, 0], "datatype NOPE"),
])
def test_a_descriptor_that_does_not_fit_is_refused(descriptor, message):
    payload = b"\x03\x00\x00\x00abc" if descriptor[1] == "BYTES" else b""
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        wire.unpack(descriptor, None, payload, copy=False)


def test_bytes_elements_running_past_their_tensor_are_refused():
    with pytest.raises(ValueError, match="runs past"):
        wire.deserialize_bytes(b"\x09\x00\x00\x00abc")


def test_descriptors_belong_to_their_own_message_when_reads_span_messages(pair, tmp_path):
    """One read may take a message's end and the next one's start, with the next one's
    descriptors: they must still go to the message that carried them."""
    left, right = pair
    path = tmp_path / "f"
    path.write_bytes(b"x")
    for i in range(20):
        fd = os.open(path, os.O_RDONLY)
        try:
            left.send({"i": i}, [memoryview(b"p" * 100)], fds=[fd] if i % 3 == 2 else [])
        finally:
            os.close(fd)
    for i in range(20):
        header, _, fds = right.receive()
        assert header["i"] == i
        assert len(fds) == (1 if i % 3 == 2 else 0)
        for fd in fds:
            os.close(fd)


def test_a_standalone_message_takes_a_region_of_its_own_from_the_inline_limit(tmp_path):
    big = np.arange(20_000, dtype=np.float32)  # 80 000 bytes
    small = np.arange(4, dtype=np.int32)
    tensors = [("BIG", "FP32", big), ("SMALL", "INT32", small)]
    descriptors, buffers, fds, size = wire.pack_tensors(tensors, str(tmp_path), 64 * 1024)
    assert len(fds) == 1 and size >= big.nbytes and not buffers
    assert [d[3] for d in descriptors] == ["s", "s"]
    region = wire.open_region({"region_size": size}, fds)
    arrays = [wire.unpack(d, region, b"", copy=False)[2] for d in descriptors]
    np.testing.assert_array_equal(arrays[0], big)
    np.testing.assert_array_equal(arrays[1], small)
    assert list(tmp_path.iterdir()) == []  # unlinked at once
    # Below the limit, or with no folder to put a region in: the payload carries them.
    descriptors, buffers, fds, size = wire.pack_tensors(tensors, str(tmp_path), 1 << 20)
    assert (fds, size) == ([], 0) and [d[3] for d in descriptors] == ["p", "p"]
    _, _, fds, size = wire.pack_tensors(tensors, str(tmp_path / "missing"), 1)
    assert (fds, size) == ([], 0)


# --- headers ----------------------------------------------------------------------------

PLAIN_EXECUTE = {"op": "execute", "id": 7, "out": None, "requests": [
    {"id": "", "parameters": None, "outputs": None,
     "inputs": [["INPUT0", "FP32", [1, 16], "p", 0, 64], ["T", "BYTES", [2], "s", 128, 12]]},
    {"id": "req-é", "parameters": None, "outputs": ["OUTPUT1"],
     "inputs": [["INPUT0", "BF16", [], "s", 192, 2]]},
]}
PLAIN_RESULT = {"op": "result", "id": 7, "responses": [
    {"outputs": [["OUTPUT0", "FP32", [1, 16], "s", 64, 64]], "parameters": None, "error": None},
    {"outputs": [], "parameters": None, "error": None},
]}


@pytest.mark.parametrize("header", [PLAIN_EXECUTE, PLAIN_RESULT, dict(PLAIN_EXECUTE, out=4096)],
                         ids=["execute", "result", "execute-in-region"])
def test_plain_execute_and_result_headers_are_binary_and_read_back_the_same(header):
    data = wire.encode_header(header)
    assert data[:1] != b"{"
    assert wire.decode_header(bytearray(data)) == header


@pytest.mark.parametrize("header", [
    {"op": "execute", "id": 1, "out": None, "requests": [
        {"id": "", "parameters": {"x": 1.5}, "outputs": None, "inputs": []}]},
    {"op": "execute", "id": 1, "out": None, "trace": 3, "requests": []},
    {"op": "execute", "id": 1, "out": None, "requests": [
        {"id": "", "parameters": None, "outputs": None, "inputs": [], "trace": 9}]},
    {"op": "execute", "id": 1, "out": 0, "region_size": 4096, "fds": 1, "requests": []},
    {"op": "execute", "id": 1, "out": None, "requests": [
        {"id": "x" * 70000, "parameters": None, "outputs": None, "inputs": []}]},
    {"op": "result", "id": 1, "responses": [
        {"outputs": [], "parameters": {"p": True}, "error": None}]},
    {"op": "result", "id": 1, "responses": [
        {"outputs": [], "parameters": None, "error": ["INVALID_ARG", "no"]}]},
    {"op": "result", "id": 1, "failure": ["INTERNAL", "broken"]},
    {"op": "result", "id": 1, "retire_region": True, "responses": []},
    {"op": "log", "level": 20, "message": "hello"},
], ids=["parameters", "trace", "request-trace", "region", "long-id", "response-parameters",
        "error", "failure", "retire-region", "log"])
def test_every_other_header_travels_as_json_unchanged(header):
    data = wire.encode_header(header)
    assert data[:1] == b"{"
    assert wire.decode_header(data) == header


def test_a_broken_binary_header_is_a_value_error():
    data = wire.encode_header(PLAIN_EXECUTE)
    with pytest.raises(ValueError, match="broken message header"):
        wire.decode_header(data[:-3])


def test_read_result_is_the_plain_result_without_the_dict():
    """What decode_header reads a plain result's descriptors with (``read_result``) holds
    what its dict does; every other header is not a plain result."""
    data = bytearray(wire.encode_header(PLAIN_RESULT))
    assert wire.is_plain_result(data)
    batch, outputs = headers.read_result(data)
    assert batch == PLAIN_RESULT["id"]
    assert outputs == [r["outputs"] for r in PLAIN_RESULT["responses"]]
    for other in (PLAIN_EXECUTE, {"op": "result", "id": 1, "failure": ["INTERNAL", "x"]},
                  {"op": "log", "level": 20, "message": "hello"}):
        assert not wire.is_plain_result(wire.encode_header(other))
    assert not wire.is_plain_result(b"")
    with pytest.raises(ValueError, match="broken message header"):
        headers.read_result(data[:-3])


def test_a_binary_header_crosses_the_socket_with_its_payload(pair):
    left, right = pair
    payload = np.arange(16, dtype=np.float32)
    left.send(PLAIN_RESULT, [memoryview(payload.view(np.uint8))])
    header, received, fds = right.receive()
    assert header == PLAIN_RESULT and not fds
    np.testing.assert_array_equal(np.frombuffer(received, np.float32), payload)


def test_pack_execute_is_the_plain_execute_header_without_the_dict(pair):
    """What the server sends for the usual batch (naiad_stub_headers.pack_execute) is the
    binary header encode_header makes of the same dict, and reads back as that dict."""
    for header in (PLAIN_EXECUTE, dict(PLAIN_EXECUTE, out=4096)):
        requests = [(m["id"], m["outputs"], m["inputs"]) for m in header["requests"]]
        packed = wire.pack_execute(header["id"], header["out"], requests)
        assert packed == wire.encode_header(header)
    left, right = pair
    left.send(packed, [memoryview(b"x" * 64)])
    received, payload, fds = right.receive()
    assert received == dict(PLAIN_EXECUTE, out=4096) and bytes(payload) == b"x" * 64
    assert not fds


def test_pack_execute_refuses_what_the_layout_cannot_hold():
    # the sender then builds the dict, which goes as JSON ("long-id" above)
    with pytest.raises(wire.struct.error):
        wire.pack_execute(1, None, [("x" * 70000, None, [])])
    with pytest.raises(KeyError):
        wire.pack_execute(1, None, [("", None, [["T", "FP128", [1], "p", 0, 16]])])
    with pytest.raises(ValueError, match="descriptors need a header"):
        wire.frame_parts(wire.pack_execute(1, None, []), [], [3])

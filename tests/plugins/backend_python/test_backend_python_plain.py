"""The usual batch's two messages made and read in one pass (``naiad_stub_plain``): the same
bytes as the general way makes, read back as the general way reads them, and every other
message left to the general way, which says what is wrong with one that cannot be read."""

from __future__ import annotations

import time

import numpy as np
import pytest
from backend_python_helpers import (
    ADD_SUB_PY,
    add_sub_request,
    context_for,
    instance_info,
    write_model,
)

from naiad_backend_python import PythonBackend
from naiad_backend_python.stub import naiad_stub_headers as headers
from naiad_backend_python.stub import naiad_stub_plain as plain
from naiad_backend_python.stub import naiad_stub_wire as wire

TENSORS = [
    ("INPUT0", "FP32", np.arange(16, dtype=np.float32).reshape(1, 16)),
    ("TEXT", "BYTES", np.array([[b"a", b"\xc3\xa9t\xc3\xa9"]], dtype=object)),
    ("EMPTY", "INT64", np.zeros((0, 3), dtype=np.int64)),
    ("SCALAR", "BOOL", np.array(True)),
    ("naïve", "FP16", np.arange(6, dtype=np.float16).reshape(2, 3)[:, ::2]),  # strided
]
DEFERRED = object()


def joined(parts: list) -> bytes:
    return b"".join(bytes(part) for part in parts)


def general_execute(batch: int, request_id: str, outputs: list[str] | None,
                    tensors: list) -> list:
    """The frame the general way sends for the same request (``Packer`` without a region,
    ``pack_execute``, ``frame_parts``)."""
    packer = wire.Packer(None)
    descriptors = [packer.add(name, datatype, array) for name, datatype, array in tensors]
    return wire.frame_parts(wire.pack_execute(batch, None, [(request_id, outputs, descriptors)]),
                            packer.payload)


def general_result(batch: int, results: list) -> list:
    packer = wire.Packer(None)
    header = {"op": "result", "id": batch, "responses": [
        {"outputs": [packer.add(*tensor) for tensor in outputs], "parameters": parameters,
         "error": error} for outputs, parameters, error in results]}
    return wire.frame_parts(header, packer.payload)


def split(frame: list) -> tuple[bytearray, bytearray]:
    """A frame's header and payload, as the receiving side holds them."""
    data = joined(frame)
    head_size, payload_size = wire.unpack_prefix(data, 0)
    start = wire.PREFIX_SIZE
    return (bytearray(data[start:start + head_size]),
            bytearray(data[start + head_size:start + head_size + payload_size]))


def same_tensors(got: list, expected: list) -> None:
    assert [(name, datatype) for name, datatype, _ in got] == \
        [(name, datatype) for name, datatype, _ in expected]
    for (_, datatype, array), (_, _, want) in zip(got, expected, strict=True):
        assert array.shape == want.shape
        if datatype == "BYTES":
            assert array.tolist() == want.tolist()
        else:
            np.testing.assert_array_equal(array, want)


@pytest.mark.parametrize("outputs", [None, [], ["OUTPUT0", "ÜBER"]], ids=["all", "none", "two"])
@pytest.mark.parametrize("count", [0, 1, len(TENSORS)])
def test_execute_frame_is_the_general_ways_message(outputs, count):
    tensors = TENSORS[:count]
    frame, aligned = plain.execute_frame("req-é", outputs, tensors)
    assert joined(plain.numbered(frame, 7)) == joined(general_execute(7, "req-é", outputs, tensors))
    assert aligned == sum(wire.align(len(wire.tensor_buffer(datatype, array)))
                          for _, datatype, array in tensors)


@pytest.mark.parametrize("outputs", [None, ["OUTPUT0"]], ids=["all", "one"])
def test_read_execute_reads_what_the_general_way_reads(outputs):
    frame, _ = plain.execute_frame("r1", outputs, TENSORS)
    head, payload = split(plain.numbered(frame, 41))
    batch, [(request_id, asked, inputs)] = plain.read_execute(head, payload)
    header = wire.decode_header(head)
    [message] = header["requests"]
    assert (batch, request_id, asked) == (header["id"], message["id"], message["outputs"])
    expected = [wire.unpack(d, None, payload, copy=False) for d in message["inputs"]]
    assert list(inputs) == [name for name, _, _ in expected]
    same_tensors(list(inputs.values()), expected)
    same_tensors(list(inputs.values()),
                 [(name, datatype, np.array(array))
                  for name, datatype, array in TENSORS])


def test_read_execute_leaves_every_other_message_to_the_general_way():
    frame, _ = plain.execute_frame("r", None, TENSORS[:1])
    head, payload = split(plain.numbered(frame, 1))
    region_batch = headers.pack_execute(1, 4096, [("r", None, [["INPUT0", "FP32", [4], "p", 0,
                                                                16]])])
    in_region = headers.pack_execute(1, None, [("r", None, [["INPUT0", "FP32", [4], "s", 0,
                                                             16]])])
    not_there = headers.pack_execute(1, None, [("r", None, [["INPUT0", "FP32", [4], "p", 0,
                                                             160]])])
    misshapen = headers.pack_execute(1, None, [("r", None, [["INPUT0", "FP32", [5], "p", 0,
                                                             16]])])
    for other in (wire.encode_header({"op": "execute", "id": 1, "out": None, "requests": [
                      {"id": "r", "parameters": {"p": 1}, "outputs": None, "inputs": []}]}),
                  wire.encode_header({"op": "cancel", "batch": 1, "index": 0}),
                  region_batch, in_region, not_there, misshapen, b""):
        assert plain.read_execute(bytearray(other), payload) is None
    with pytest.raises(ValueError, match="broken message header"):
        plain.read_execute(head[:-3], payload)


def result(*outputs, parameters=None, error=None) -> tuple:
    return list(outputs), parameters, error


def test_result_frame_is_the_general_ways_message_and_reads_back():
    results = [result(*TENSORS), result(), result(TENSORS[0])]
    frame = plain.result_frame(9, results, DEFERRED)
    assert joined(frame) == joined(general_result(9, results))
    head, payload = split(frame)
    assert wire.is_plain_result(head)
    batch, responses, taken = plain.read_result(head, payload)
    assert batch == 9 and len(responses) == 3
    for got, (outputs, _, _) in zip(responses, results, strict=True):
        same_tensors(got, [(name, datatype, np.array(array))
                           for name, datatype, array in outputs])
    assert taken == sum(wire.align(len(wire.tensor_buffer(datatype, array)))
                        for outputs, _, _ in results for _, datatype, array in outputs)


def test_a_result_that_is_not_plain_takes_the_general_way():
    assert plain.result_frame(1, [result(TENSORS[0]), DEFERRED], DEFERRED) is None
    assert plain.result_frame(1, [result(parameters={"p": 1})], DEFERRED) is None
    assert plain.result_frame(1, [result(error=("INTERNAL", "no"))], DEFERRED) is None
    # outputs in the region, or that cannot be read: the general way reads (and refuses) them
    for outputs in ([["OUT", "FP32", [4], "s", 0, 16]], [["OUT", "FP32", [4], "p", 0, 160]],
                    [["OUT", "BYTES", [3], "p", 0, 7]]):
        head = bytearray(wire.encode_header({"op": "result", "id": 1, "responses": [
            {"outputs": outputs, "parameters": None, "error": None}]}))
        assert plain.read_result(head, bytearray(b"\x03\x00\x00\x00abc")) is None
    head, payload = split(plain.result_frame(1, [result(TENSORS[0])], DEFERRED))
    with pytest.raises(ValueError, match="broken message header"):
        plain.read_result(head[:-3], payload)


def test_a_field_the_layout_cannot_hold_is_refused():
    # the senders then take the general way, whose dict goes as JSON
    with pytest.raises(plain.struct.error):
        plain.execute_frame("x" * 70000, None, [])
    with pytest.raises(KeyError):
        plain.execute_frame("", None, [("T", "FP128", np.zeros(1))])
    with pytest.raises(plain.struct.error):
        plain.result_frame(1, [result(("T" * 70000, "FP32", np.zeros(1, np.float32)))],
                           DEFERRED)


def test_a_plain_execute_the_worker_cannot_read_fails_its_batch_and_the_worker_serves_on(
        tmp_path):
    """The worker reads a plain execute in one pass; one whose input lies past its payload
    goes the general way, which fails that batch (and only it) with the reason."""
    from naiad.errors import InferenceServerError

    model_dir = write_model(tmp_path, "add_sub", ADD_SUB_PY)
    instance = PythonBackend({}).create_instance(context_for(model_dir),
                                                 instance_info("add_sub"))
    try:
        channel = instance.worker.channel
        results: list[object] = []
        with channel._lock:
            batch = channel._number(results.append, None)
        frame, _ = plain.execute_frame("bad", None,
                                       [("INPUT0", "FP32", np.ones(4, np.float32))])
        header, _ = split(plain.numbered(frame, batch))
        channel._send_whole([wire._PREFIX.pack(wire.FRAME_MAGIC, len(header), 8),
                             bytes(header), memoryview(bytes(8))])  # 8 of its 16 bytes
        deadline = time.monotonic() + 30
        while not results and time.monotonic() < deadline:
            time.sleep(0.01)
        [failed] = results
        assert isinstance(failed, InferenceServerError)
        assert "could not handle the batch" in failed.message
        assert "outside the message payload" in failed.message
        [response] = instance.execute([add_sub_request()])
        assert response.error is None
        np.testing.assert_array_equal(response.outputs[0].data, [5, 5, 5, 5])
    finally:
        instance.close()


# --- remembered header layouts ---------------------------------------------------------------

NUMBERS = [TENSORS[0], TENSORS[2], TENSORS[4]]  # no BYTES: their layouts are remembered


@pytest.fixture
def no_layouts(monkeypatch):
    """Readers and writers that remember nothing yet (they remember per process)."""
    monkeypatch.setattr(plain, "_EXECUTE_LAYOUTS", plain._Layouts())
    monkeypatch.setattr(plain, "_RESULT_LAYOUTS", plain._Layouts())
    monkeypatch.setattr(plain, "_EXECUTE_HEADERS", plain._Headers())
    monkeypatch.setattr(plain, "_RESULT_HEADERS", plain._Headers())


def scaled(tensors: list, factor: int) -> list:
    return [(name, datatype, (array * factor).astype(array.dtype))
            for name, datatype, array in tensors]


def test_a_remembered_execute_layout_reads_each_payload_as_the_first_read(no_layouts):
    """The second message with the same header bytes (but its batch id) is read from the
    remembered layout: its own values, as views over its own payload."""
    reads = []
    for batch, factor in ((1, 1), (2, 3)):
        frame, _ = plain.execute_frame("r", ["OUTPUT0"], scaled(NUMBERS, factor))
        head, payload = split(plain.numbered(frame, batch))
        reads.append((plain.read_execute(head, payload), payload))
    assert len(plain._EXECUTE_LAYOUTS.known) == 1
    (first, _), (second, payload) = reads
    assert (first[0], second[0]) == (1, 2)
    [(request_id, asked, inputs)] = second[1]
    assert (request_id, asked) == ("r", ["OUTPUT0"])
    same_tensors(list(inputs.values()), [(n, d, np.array(a)) for n, d, a in scaled(NUMBERS, 3)])
    assert all(np.shares_memory(array, np.frombuffer(payload, np.uint8))
               for _, _, array in inputs.values() if array.size)
    asked.append("changed")  # a reader's list is its own
    again = plain.read_execute(*split(plain.numbered(plain.execute_frame(
        "r", ["OUTPUT0"], NUMBERS)[0], 3)))
    assert again[1][0][1] == ["OUTPUT0"]


def test_a_remembered_result_layout_reads_each_payload_as_the_first_read(no_layouts):
    reads = [plain.read_result(*split(plain.result_frame(
        batch, [result(*scaled(NUMBERS, factor)), result(NUMBERS[0])], DEFERRED)))
        for batch, factor in ((5, 1), (6, 2))]
    assert len(plain._RESULT_LAYOUTS.known) == 1
    (_, _, first_taken), (batch, responses, taken) = reads
    assert batch == 6 and taken == first_taken
    same_tensors(responses[0], [(n, d, np.array(a)) for n, d, a in scaled(NUMBERS, 2)])
    same_tensors(responses[1], [(n, d, np.array(a)) for n, d, a in NUMBERS[:1]])


def test_a_remembered_layout_still_refuses_a_payload_too_short_for_it(no_layouts):
    head, payload = split(plain.result_frame(1, [result(NUMBERS[0])], DEFERRED))
    assert plain.read_result(head, payload) is not None
    assert plain.read_result(head, payload[:-4]) is None
    frame, _ = plain.execute_frame("r", None, NUMBERS[:1])
    head, payload = split(plain.numbered(frame, 1))
    assert plain.read_execute(head, payload) is not None
    assert plain.read_execute(head, payload[:-4]) is None


def test_request_ids_share_a_layout_and_are_read_each_time(no_layouts):
    for request_id in ("", "first", "a longer id, é"):
        frame, _ = plain.execute_frame(request_id, None, NUMBERS[:1])
        [(got_id, asked, inputs)] = plain.read_execute(*split(plain.numbered(frame, 1)))[1]
        assert (got_id, asked) == (request_id, None)
        same_tensors(list(inputs.values()), [(n, d, np.array(a)) for n, d, a in NUMBERS[:1]])
    assert len(plain._EXECUTE_LAYOUTS.known) == 1
    assert len(plain._EXECUTE_HEADERS.known) == 1
    frame, _ = plain.execute_frame("é", None, NUMBERS[:1])
    head, payload = split(plain.numbered(frame, 1))
    head[plain._FIRST_ID] = 0xFF  # a broken id in a known layout
    with pytest.raises(ValueError, match="broken message header"):
        plain.read_execute(head, payload)


def test_the_same_names_with_other_counts_are_not_taken_for_a_known_layout(no_layouts):
    """The bytes after the id hold the outputs' names and the tensor records; the counts
    before the id say how to read them, and must match too: no outputs asked for ([]) and
    all of them (None) have the same bytes after the id."""
    for outputs in ([], None, []):
        frame, _ = plain.execute_frame("r", outputs, NUMBERS[:1])
        assert joined(plain.numbered(frame, 1)) == joined(
            general_execute(1, "r", outputs, NUMBERS[:1]))
        [(_, asked, _)] = plain.read_execute(*split(plain.numbered(frame, 1)))[1]
        assert asked == outputs


def test_bytes_tensors_are_read_and_made_each_time_and_layouts_are_bounded(no_layouts,
                                                                            monkeypatch):
    texts = [TENSORS[1]]
    for _ in range(2):
        head, payload = split(plain.result_frame(1, [result(*texts)], DEFERRED))
        same_tensors(plain.read_result(head, payload)[1][0], texts)
        frame, _ = plain.execute_frame("r", None, texts)
        same_tensors(list(plain.read_execute(*split(plain.numbered(frame, 1)))[1][0][2]
                          .values()), texts)
    assert plain._RESULT_LAYOUTS.known == {} and plain._EXECUTE_LAYOUTS.known == {}
    assert plain._RESULT_HEADERS.known == {} and plain._EXECUTE_HEADERS.known == {}
    monkeypatch.setattr(plain, "LAYOUTS_REMEMBERED", 3)
    for rows in range(1, 6):  # a new shape is a new header
        tensors = [("X", "FP32", np.full((rows, 2), rows, np.float32))]
        frame, _ = plain.execute_frame("r", None, tensors)
        assert joined(plain.numbered(frame, rows)) == joined(
            general_execute(rows, "r", None, tensors))
        [(_, _, inputs)] = plain.read_execute(*split(plain.numbered(frame, rows)))[1]
        same_tensors(list(inputs.values()), tensors)
    assert len(plain._EXECUTE_LAYOUTS.known) == 3 and len(plain._EXECUTE_HEADERS.known) == 3


def test_remembered_headers_make_the_general_ways_bytes(no_layouts):
    """A frame made from a remembered header is the one made in full, for each batch and
    request id."""
    for batch, request_id in ((1, "a"), (2, "bb"), (3, "")):
        frame, aligned = plain.execute_frame(request_id, ["OUTPUT0"], NUMBERS)
        assert joined(plain.numbered(frame, batch)) == joined(
            general_execute(batch, request_id, ["OUTPUT0"], NUMBERS))
        assert aligned == sum(wire.align(len(wire.tensor_buffer(datatype, array)))
                              for _, datatype, array in NUMBERS)
        results = [result(*NUMBERS), result(NUMBERS[0])]
        assert joined(plain.result_frame(batch, results, DEFERRED)) == joined(
            general_result(batch, results))
    assert len(plain._EXECUTE_HEADERS.known) == 1 and len(plain._RESULT_HEADERS.known) == 1
    wider = [("INPUT0", "FP32", np.zeros((1, 16), np.float64))]  # another dtype, same name
    frame, _ = plain.execute_frame("a", ["OUTPUT0"], wider)
    assert joined(plain.numbered(frame, 4)) == joined(
        general_execute(4, "a", ["OUTPUT0"], wider))

"""Unit tests of naiad.shm: registering system shared memory regions and bounded access."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from expect import rejected

from naiad.errors import InferenceServerError, Status
from naiad.shm import cuda_register, cuda_status, cuda_unregister

SIZE = 64


@pytest.fixture
def shm_key() -> Iterator[str]:
    """A 64-byte file in /dev/shm holding bytes 0..63, removed afterwards."""
    key = f"/naiad-unit-shm-{uuid.uuid4().hex}"
    with open("/dev/shm" + key, "wb") as f:
        f.write(bytes(range(SIZE)))
    try:
        yield key
    finally:
        os.unlink("/dev/shm" + key)


def test_register_and_status(registry, shm_key):
    registry.register("in0", shm_key, 8, 16)
    assert registry.status() == [{"name": "in0", "key": shm_key, "offset": 8, "byte_size": 16}]
    assert registry.status("in0") == registry.status()


def test_register_accepts_key_without_leading_slash(registry, shm_key):
    registry.register("in0", shm_key.lstrip("/"), 0, SIZE)
    assert registry.read("in0", 0, 4, "t") == bytes([0, 1, 2, 3])


def test_register_whole_file(registry, shm_key):
    registry.register("all", shm_key, 0, SIZE)
    assert registry.read("all", 60, 4, "t") == bytes([60, 61, 62, 63])


def test_register_missing_key_names_region_and_key(registry):
    rejected(lambda: registry.register("in0", "/naiad-unit-does-not-exist", 0, 4),
             "'in0'", "'/naiad-unit-does-not-exist'")
    assert registry.status() == []


@pytest.mark.parametrize(("offset", "byte_size"), [(0, SIZE + 1), (60, 8), (SIZE, 1)])
def test_register_past_the_end_of_the_file_is_rejected(registry, shm_key, offset, byte_size):
    rejected(lambda: registry.register("in0", shm_key, offset, byte_size),
             "'in0'", f"offset {offset}", f"byte_size {byte_size}", f"({SIZE} bytes)")
    assert registry.status() == []


@pytest.mark.parametrize(("offset", "byte_size"), [(-1, 4), (0, 0), (0, -4)])
def test_register_negative_offset_or_empty_size_is_rejected(registry, shm_key, offset, byte_size):
    rejected(lambda: registry.register("in0", shm_key, offset, byte_size), "'in0'", "byte_size")


def test_register_needs_a_name(registry, shm_key):
    rejected(lambda: registry.register("", shm_key, 0, 4), "needs a name")


def test_register_twice_is_already_exists(registry, shm_key):
    registry.register("in0", shm_key, 0, 8)
    rejected(lambda: registry.register("in0", shm_key, 8, 8), "'in0'", "already registered",
             status=Status.ALREADY_EXISTS)
    assert registry.status("in0")[0]["offset"] == 0


@pytest.fixture
def other_key() -> Iterator[str]:
    """A second shared memory object, like ``shm_key``'s."""
    key = f"/naiad-unit-shm-{uuid.uuid4().hex}"
    with open("/dev/shm" + key, "wb") as f:
        f.write(bytes(range(SIZE)))
    try:
        yield key
    finally:
        os.unlink("/dev/shm" + key)


def test_a_key_is_registered_under_one_name_at_a_time(registry, shm_key):
    """As Triton 2.51 (which answers "Invalid shared memory region: 'KEY'")."""
    registry.register("a", shm_key, 0, 8)
    with pytest.raises(InferenceServerError, match="already registered as region 'a'") as err:
        registry.register("b", shm_key, 8, 8)
    assert err.value.status is Status.ALREADY_EXISTS


def test_register_refuses_a_key_that_escapes_dev_shm(registry, tmp_path):
    outside = tmp_path / "not-shared-memory"
    outside.write_bytes(b"\x00" * 16)
    key = "/../.." + str(outside)
    assert os.path.realpath("/dev/shm/" + key.lstrip("/")) == str(outside.resolve())
    rejected(lambda: registry.register("evil", key, 0, 16), "'evil'")


@pytest.mark.parametrize("key", ["", "/", "/a/b", "a/b", "/..", "..", ".", "/.",
                                 "//naiad-unit-x", "/naiad\x00unit"])
def test_register_refuses_keys_that_are_not_object_names(registry, key):
    message = rejected(lambda: registry.register("in0", key, 0, 4), "'in0'")
    assert f"'{key}'" in message
    assert registry.status() == []


def test_register_refuses_a_symlink_in_dev_shm(registry, tmp_path):
    target = tmp_path / "not-shared-memory"
    target.write_bytes(b"\x00" * 16)
    key = f"/naiad-unit-link-{uuid.uuid4().hex}"
    os.symlink(target, "/dev/shm" + key)
    try:
        rejected(lambda: registry.register("link", key, 0, 16), "'link'")
    finally:
        os.unlink("/dev/shm" + key)


def test_read_is_relative_to_the_region_offset(registry, shm_key):
    registry.register("in0", shm_key, 16, 8)
    assert registry.read("in0", 2, 3, "t") == bytes([18, 19, 20])


def test_write_then_read_back(registry, shm_key):
    registry.register("out", shm_key, 32, 16)
    registry.write("out", 4, 8, b"abcd", "t")
    assert registry.read("out", 0, 10, "t") == bytes([32, 33, 34, 35]) + b"abcd" + bytes(
        [40, 41])
    with open("/dev/shm" + shm_key, "rb") as f:
        assert f.read()[36:40] == b"abcd"


@pytest.mark.parametrize(("offset", "byte_size"), [(0, 9), (8, 1), (-1, 2), (4, -1)])
def test_read_outside_the_region_names_tensor_and_region(registry, shm_key, offset, byte_size):
    registry.register("in0", shm_key, 0, 8)
    rejected(lambda: registry.read("in0", offset, byte_size, "input 'X' of model 'm'"),
             "input 'X' of model 'm'", "outside region 'in0'", "(8 bytes)")


def test_read_at_the_exact_end_is_allowed(registry, shm_key):
    registry.register("in0", shm_key, 0, 8)
    assert registry.read("in0", 8, 0, "t") == b""
    assert registry.read("in0", 0, 8, "t") == bytes(range(8))


def test_write_outside_the_region_is_rejected(registry, shm_key):
    registry.register("out", shm_key, 0, 8)
    rejected(lambda: registry.write("out", 6, 4, b"abcd", "output 'Y' of model 'm'"),
             "output 'Y' of model 'm'", "outside region 'out'")


def test_write_larger_than_the_given_size_is_rejected(registry, shm_key):
    registry.register("out", shm_key, 0, 32)
    rejected(lambda: registry.write("out", 0, 4, b"abcdef", "output 'Y' of model 'm'"),
             "output 'Y' of model 'm'", "6 bytes", "holds 4")
    assert registry.read("out", 0, 6, "t") == bytes(range(6))


def test_access_to_unknown_region_is_not_found_and_names_it(registry):
    # NOT_FOUND (404), as tritonserver answers a request naming an unregistered region
    rejected(lambda: registry.read("nope", 0, 1, "input 'X' of model 'm'"),
             "input 'X' of model 'm'", "'nope' is not registered", status=Status.NOT_FOUND)
    rejected(lambda: registry.write("nope", 0, 1, b"x", "output 'Y' of model 'm'"),
             "output 'Y' of model 'm'", "'nope' is not registered", status=Status.NOT_FOUND)
    rejected(lambda: registry.check("nope", 0, 1, "output 'Y' of model 'm'"),
             "output 'Y' of model 'm'", "'nope' is not registered", status=Status.NOT_FOUND)


def test_check_is_a_bounds_check_without_access(registry, shm_key):
    registry.register("out", shm_key, 8, 16)
    registry.check("out", 0, 16, "t")
    rejected(lambda: registry.check("out", 8, 9, "output 'Y' of model 'm'"),
             "output 'Y' of model 'm'", "outside region 'out'", "(16 bytes)")


def test_status_of_unknown_region_is_not_found(registry):
    rejected(lambda: registry.status("nope"),
             "Unable to find system shared memory region: 'nope'", status=Status.NOT_FOUND)


def test_unregister_one_keeps_the_others(registry, shm_key, other_key):
    registry.register("a", shm_key, 0, 8)
    registry.register("b", other_key, 8, 8)
    registry.unregister("a")
    assert [r["name"] for r in registry.status()] == ["b"]
    rejected(lambda: registry.read("a", 0, 1, "t"), "'a' is not registered",
             status=Status.NOT_FOUND)


def test_unregister_unknown_name_is_a_no_op(registry, shm_key):
    registry.register("a", shm_key, 0, 8)
    registry.unregister("nope")
    assert len(registry.status()) == 1


def test_unregister_empty_name_and_unregister_all_drop_every_region(registry, shm_key,
                                                                    other_key):
    registry.register("a", shm_key, 0, 8)
    registry.register("b", other_key, 8, 8)
    registry.unregister("")
    assert registry.status() == []
    registry.register("a", shm_key, 0, 8)
    registry.unregister_all()
    assert registry.status() == []


def test_a_name_can_be_registered_again_after_unregister(registry, shm_key):
    registry.register("a", shm_key, 0, 8)
    registry.unregister("a")
    registry.register("a", shm_key, 8, 8)
    assert registry.read("a", 0, 1, "t") == bytes([8])


# --- CUDA shared memory: never implemented, so no region is ever held ---------------------


def test_cuda_status_lists_no_region_and_a_named_one_is_not_found():
    assert cuda_status() == [] and cuda_status("") == []
    rejected(lambda: cuda_status("r"), "Unable to find cuda shared memory region: 'r'",
             status=Status.NOT_FOUND)


def test_cuda_unregister_has_nothing_to_do():
    assert cuda_unregister() is None
    assert cuda_unregister("r") is None


def test_cuda_register_is_refused_with_the_reason():
    rejected(lambda: cuda_register("r"), "'r'", "CUDA shared memory", "system shared memory",
             status=Status.UNSUPPORTED)

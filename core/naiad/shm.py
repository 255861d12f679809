"""The shared memory extensions.

System shared memory: regions registered by clients, read and written by offset and size
with bounds checks. One registry serves both frontends, as in Triton.

CUDA shared memory: naiad does not implement it (on any machine, with or without a GPU), so
it never holds a CUDA region. The endpoints answer as tritonserver does when it holds none:
the status lists no region (a named one is NOT_FOUND), unregistering has nothing to do and
succeeds (perf_analyzer unregisters every CUDA region when it ends, whatever it used), and a
registration is refused with the reason."""

from __future__ import annotations

import mmap
import os
import threading
from dataclasses import dataclass

from naiad.errors import InferenceServerError, Status, invalid_arg, not_found, unsupported

SHM_ROOT = "/dev/shm"


@dataclass(slots=True)
class Region:
    name: str
    key: str
    offset: int
    byte_size: int
    memory: mmap.mmap

    def status(self) -> dict:
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}


class SharedMemoryRegistry:
    """Registered system shared memory regions, by name."""

    def __init__(self) -> None:
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if not name:
            raise invalid_arg("a shared memory region needs a name")
        if offset < 0 or byte_size <= 0:
            raise invalid_arg(f"shared memory region '{name}': offset must be >= 0 and "
                              f"byte_size > 0 (got offset {offset}, byte_size {byte_size})")
        with self._lock:
            if name in self._regions:
                raise InferenceServerError(
                    f"shared memory region '{name}' is already registered", Status.ALREADY_EXISTS)
            # A key names one object in /dev/shm, as for shm_open(): no path may escape it.
            name_in_root = key[1:] if key.startswith("/") else key
            if not name_in_root or "/" in name_in_root or name_in_root in (".", ".."):
                raise invalid_arg(f"shared memory region '{name}': key '{key}' is not a "
                                  f"shared memory object name (like '/my_region')")
            path = os.path.join(SHM_ROOT, name_in_root)
            try:
                # O_NOFOLLOW as shm_open() does: a planted symlink must not map another file
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
            except OSError as exc:
                raise invalid_arg(f"unable to open shared memory region '{name}' with key "
                                  f"'{key}': {exc.strerror}") from None
            try:
                size = os.fstat(fd).st_size
                if offset + byte_size > size:
                    raise invalid_arg(
                        f"shared memory region '{name}': offset {offset} + byte_size "
                        f"{byte_size} exceeds the size of '{key}' ({size} bytes)")
                memory = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            self._regions[name] = Region(name, key, offset, byte_size, memory)

    def unregister(self, name: str) -> None:
        """Unregister ``name`` (every region when empty), as Triton does."""
        with self._lock:
            names = [name] if name else list(self._regions)
            for n in names:
                region = self._regions.pop(n, None)
                if region is not None:
                    region.memory.close()

    def unregister_all(self) -> None:
        self.unregister("")

    def status(self, name: str = "") -> list[dict]:
        with self._lock:
            if name:
                region = self._regions.get(name)
                if region is None:
                    raise not_found(f"Unable to find system shared memory region: '{name}'")
                return [region.status()]
            return [r.status() for r in self._regions.values()]

    def _span(self, name: str, offset: int, byte_size: int, what: str) -> tuple[Region, int]:
        region = self._regions.get(name)
        if region is None:  # NOT_FOUND (404), as tritonserver answers it
            raise not_found(f"{what}: shared memory region '{name}' is not registered")
        if offset < 0 or byte_size < 0 or offset + byte_size > region.byte_size:
            raise invalid_arg(
                f"{what}: shared memory offset {offset} + byte_size {byte_size} is outside "
                f"region '{name}' ({region.byte_size} bytes)")
        return region, region.offset + offset

    def check(self, name: str, offset: int, byte_size: int, what: str) -> None:
        """Raise unless ``byte_size`` bytes at ``offset`` lie in registered region ``name``:
        for an output, checked before the request runs."""
        with self._lock:
            self._span(name, offset, byte_size, what)

    def read(self, name: str, offset: int, byte_size: int, what: str) -> bytes:
        """A copy of ``byte_size`` bytes at ``offset`` in region ``name``; ``what`` names the
        tensor in errors."""
        with self._lock:
            region, start = self._span(name, offset, byte_size, what)
            return region.memory[start:start + byte_size]

    def write(self, name: str, offset: int, byte_size: int, data: bytes | memoryview,
              what: str) -> None:
        """Write ``data`` into region ``name`` at ``offset``; it must fit in ``byte_size``."""
        if len(data) > byte_size:
            raise invalid_arg(f"{what}: the output is {len(data)} bytes but the shared memory "
                              f"given for it holds {byte_size}")
        with self._lock:
            region, start = self._span(name, offset, byte_size, what)
            region.memory[start:start + len(data)] = data


# --- CUDA shared memory (not implemented: no region is ever registered) -------------------


def cuda_status(name: str = "") -> list[dict]:
    """The CUDA regions: none; a named one is not found (tritonserver's message)."""
    if name:
        raise not_found(f"Unable to find cuda shared memory region: '{name}'")
    return []


def cuda_unregister(name: str = "") -> None:
    """Nothing is registered, so there is nothing to do: success, as tritonserver answers
    for a region it does not hold."""


def cuda_register(name: str) -> None:
    """Refuse: naiad cannot map a CUDA IPC handle."""
    raise unsupported(f"unable to register CUDA shared memory region '{name}': naiad does not "
                      f"implement CUDA shared memory; register the tensors' memory as system "
                      f"shared memory instead")

"""The shared memory extensions.

System shared memory: regions registered by clients, read and written by offset and size
with bounds checks. One registry serves both frontends, as in Triton.

The server never maps a client's region. A region is a file in /dev/shm that its owner may
shrink at any moment (``ftruncate``); touching a mapped page past the new end raises SIGBUS
and kills the process, and no check made before the access can close that race. So a
region is an open file descriptor, read with ``pread`` and written with ``pwrite``, which
the kernel answers with a short count (read) or by growing the file again (write) instead
of a signal. Every access checks the region's span against the file's live size first
(``fstat``), and a read that still comes back short (the file shrank in between) is
refused: the client is told the region, the span and the live size, and the server keeps
serving. A read copies the bytes once, as reading a mapping did.

So a registration holds a descriptor where Triton holds a mapping (and closes its
descriptor): the price of surviving a shrunk file. It is bounded instead: at most
``max_regions`` registrations (``--max-shared-memory-regions``), and a key is registered
once, as tritonserver 2.51 refuses a second name for an active key ("Invalid shared memory
region: 'KEY'", there a 500; here ALREADY_EXISTS, 409), so descriptors never outnumber the
cap however a client loops.

A request keeps what it took from the registry: an input is copied when the request is
decoded, an output target (:meth:`SharedMemoryRegistry.target`) holds the
:class:`Region` itself, whose descriptor stays open until the last holder drops it. So
unregistering a region while a request that uses it is in flight neither fails nor
corrupts that request: its output is written where it asked, as tritonserver (which defers
the unregistration) does; requests decoded afterwards no longer find the name.

CUDA shared memory: naiad does not implement it (on any machine, with or without a GPU), so
it never holds a CUDA region. The endpoints answer as tritonserver does when it holds none:
the status lists no region (a named one is NOT_FOUND), unregistering has nothing to do and
succeeds (perf_analyzer unregisters every CUDA region when it ends, whatever it used), and a
registration is refused with the reason."""

from __future__ import annotations

import os
import stat
import threading
import weakref

from naiad.errors import InferenceServerError, Status, invalid_arg, not_found, unsupported

SHM_ROOT = "/dev/shm"

#: ``--max-shared-memory-regions``: system shared memory regions registered at once (each
#: holds one descriptor). Triton has no bound; about 20,000 exhausted naiad's descriptors.
DEFAULT_MAX_REGIONS = 1024

# Linux moves at most this many bytes per read()/write() call (MAX_RW_COUNT): larger
# transfers take several calls.
_MAX_TRANSFER = 0x7FFFF000


class Region:
    """A registered region: ``byte_size`` bytes at ``offset`` of the shared memory object
    ``key``, through a descriptor closed when the region is no longer referenced (by the
    registry or by a request in flight)."""

    __slots__ = ("__weakref__", "byte_size", "fd", "key", "name", "offset")

    def __init__(self, name: str, key: str, offset: int, byte_size: int, fd: int) -> None:
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        self.fd = fd
        weakref.finalize(self, os.close, fd)

    def status(self) -> dict:
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}

    def span(self, offset: int, byte_size: int, what: str) -> int:
        """The file position of ``byte_size`` bytes at ``offset`` in the region; raise
        INVALID_ARG naming ``what`` unless they lie inside it."""
        if offset < 0 or byte_size < 0 or offset + byte_size > self.byte_size:
            raise invalid_arg(
                f"{what}: shared memory offset {offset} + byte_size {byte_size} is outside "
                f"region '{self.name}' ({self.byte_size} bytes)")
        return self.offset + offset

    def _short_file(self, offset: int, byte_size: int, what: str) -> InferenceServerError:
        live = os.fstat(self.fd).st_size
        return invalid_arg(
            f"{what}: shared memory region '{self.name}' (key '{self.key}') is shorter than "
            f"registered: offset {offset} + byte_size {byte_size} needs "
            f"{self.offset + offset + byte_size} bytes of the file but it now holds {live}")

    def _check_live_size(self, offset: int, byte_size: int, what: str) -> int:
        start = self.span(offset, byte_size, what)
        if start + byte_size > os.fstat(self.fd).st_size:
            raise self._short_file(offset, byte_size, what)
        return start

    def read(self, offset: int, byte_size: int, what: str) -> bytes:
        """A copy of ``byte_size`` bytes at ``offset``; ``what`` names the tensor in errors."""
        start = self._check_live_size(offset, byte_size, what)
        if byte_size <= _MAX_TRANSFER:
            data = os.pread(self.fd, byte_size, start)
        else:
            parts = []
            done = 0
            while done < byte_size:
                part = os.pread(self.fd, min(byte_size - done, _MAX_TRANSFER), start + done)
                if not part:
                    break
                parts.append(part)
                done += len(part)
            data = b"".join(parts)
        if len(data) != byte_size:  # the file shrank after the check
            raise self._short_file(offset, byte_size, what)
        return data

    def write(self, offset: int, byte_size: int, data: bytes | memoryview, what: str) -> None:
        """Write ``data`` at ``offset``; it must fit in ``byte_size``."""
        if len(data) > byte_size:
            raise invalid_arg(f"{what}: the output is {len(data)} bytes but the shared memory "
                              f"given for it holds {byte_size}")
        start = self._check_live_size(offset, byte_size, what)
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            # A file shrunk after the check grows back to what is written (pwrite, unlike
            # a store into a mapping, cannot fault): the client's own file, no signal.
            done += os.pwrite(self.fd, view[done:done + _MAX_TRANSFER], start + done)


def _open_object(name: str, key: str) -> int:
    """A read-write descriptor of the shared memory object ``key``, as shm_open() finds it."""
    # A key names one object in /dev/shm, as for shm_open(): no path may escape it.
    name_in_root = key[1:] if key.startswith("/") else key
    # A NUL byte cannot be in a file name (os.open would raise ValueError: a 500).
    if (not name_in_root or "/" in name_in_root or "\0" in name_in_root
            or name_in_root in (".", "..")):
        raise invalid_arg(f"shared memory region '{name}': key '{key}' is not a "
                          f"shared memory object name (like '/my_region')")
    path = os.path.join(SHM_ROOT, name_in_root)
    try:
        # O_NOFOLLOW as shm_open() does: a planted symlink must not reach another file.
        # O_NONBLOCK: a FIFO planted under the name must not block the open.
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise invalid_arg(f"unable to open shared memory region '{name}' with key "
                          f"'{key}': {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise invalid_arg(f"shared memory region '{name}': '{key}' is not a shared memory "
                          f"object (not a regular file)")
    return fd


def _same_object(key: str, other: str) -> bool:
    """Whether two keys name one shared memory object ('/k' and 'k' do)."""
    return key.removeprefix("/") == other.removeprefix("/")


class SharedMemoryRegistry:
    """Registered system shared memory regions, by name."""

    def __init__(self, max_regions: int = DEFAULT_MAX_REGIONS) -> None:
        if max_regions < 1:
            raise ValueError(f"max_regions must be at least 1, got {max_regions}")
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()
        #: the most regions registered at once (``--max-shared-memory-regions``)
        self.max_regions = max_regions

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
            fd = _open_object(name, key)
            size = os.fstat(fd).st_size
            # The region's own bounds first: a request that is wrong in itself says so
            # whatever else is registered.
            if offset + byte_size > size:
                os.close(fd)
                raise invalid_arg(
                    f"shared memory region '{name}': offset {offset} + byte_size "
                    f"{byte_size} exceeds the size of '{key}' ({size} bytes)")
            holder = next((r.name for r in self._regions.values()
                           if _same_object(r.key, key)), None)
            if holder is not None:
                os.close(fd)
                raise InferenceServerError(
                    f"Invalid shared memory region: '{key}' (shared memory region "
                    f"'{name}': the key is already registered as region '{holder}'; a key "
                    f"may be registered once)", Status.ALREADY_EXISTS)
            if len(self._regions) >= self.max_regions:
                os.close(fd)
                raise InferenceServerError(
                    f"unable to register shared memory region '{name}': "
                    f"{len(self._regions)} regions are registered, the most this server "
                    f"holds (--max-shared-memory-regions={self.max_regions}); unregister "
                    f"one first", Status.RESOURCE_EXHAUSTED)
            self._regions[name] = Region(name, key, offset, byte_size, fd)

    def unregister(self, name: str) -> None:
        """Unregister ``name`` (every region when empty), as Triton does. A request in
        flight keeps the regions it holds (see the module's documentation)."""
        with self._lock:
            if name:
                self._regions.pop(name, None)
            else:
                self._regions.clear()

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

    def _region(self, name: str, what: str) -> Region:
        with self._lock:
            region = self._regions.get(name)
        if region is None:  # NOT_FOUND (404), as tritonserver answers it
            raise not_found(f"{what}: shared memory region '{name}' is not registered")
        return region

    def target(self, name: str, offset: int, byte_size: int, what: str) -> Region:
        """The region ``name`` once ``byte_size`` bytes at ``offset`` are checked to lie in
        it: an output's destination, held by the request until its answer is written."""
        region = self._region(name, what)
        region.span(offset, byte_size, what)
        return region

    def check(self, name: str, offset: int, byte_size: int, what: str) -> None:
        """Raise unless ``byte_size`` bytes at ``offset`` lie in registered region ``name``:
        for an output, checked before the request runs."""
        self.target(name, offset, byte_size, what)

    def read(self, name: str, offset: int, byte_size: int, what: str) -> bytes:
        """A copy of ``byte_size`` bytes at ``offset`` in region ``name``; ``what`` names the
        tensor in errors."""
        return self._region(name, what).read(offset, byte_size, what)

    def write(self, name: str, offset: int, byte_size: int, data: bytes | memoryview,
              what: str) -> None:
        """Write ``data`` into region ``name`` at ``offset``; it must fit in ``byte_size``."""
        if len(data) > byte_size:  # before the lookup, as this error always came first
            raise invalid_arg(f"{what}: the output is {len(data)} bytes but the shared memory "
                              f"given for it holds {byte_size}")
        self._region(name, what).write(offset, byte_size, data, what)


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

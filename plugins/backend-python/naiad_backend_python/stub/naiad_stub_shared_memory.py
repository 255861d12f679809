"""What ``c_python_backend_utils.shared_memory.free_memory()`` answers in naiad: the free
bytes of this instance's shared memory region.

In Triton all of a stub's messages and tensors live in one shared memory pool, and
``shared_memory.free_memory()`` (python_backend says: not public API, for its own testing;
Triton's QA uses it to look for leaks, as L0_backend_python's ``restart`` model does) answers
the pool's free bytes. A naiad worker's region holds one batch's tensors at a time: the server
makes it at the first batch of at least ``shm-inline-max-byte-size`` bytes
(``naiad_backend_python.isolated.regions``), and while a batch runs it holds that batch's
inputs. So ``free_memory()`` is the region's size less the inputs of the batch ``execute`` is
running, the whole region between batches, and 0 while the instance has no region (smaller
batches travel inside their messages; in-process mode never has one).
"""

from __future__ import annotations

from typing import Callable


def _no_region() -> int:
    return 0


class SharedMemory:
    """Triton's ``c_python_backend_utils.SharedMemory``: ``free_memory()``."""

    def __init__(self) -> None:
        self._region_size: Callable[[], int] = _no_region
        self._in_use = 0  # bytes of the running batch's inputs in the region

    def free_memory(self) -> int:
        """Bytes of the instance's region not holding the inputs of the running batch."""
        return max(self._region_size() - self._in_use, 0)

    def _watch(self, region_size: Callable[[], int]) -> None:
        """The worker tells where its region's size is read (it changes as the region grows
        or is retired)."""
        self._region_size = region_size

    def _running(self, in_use: int) -> None:
        """A batch whose inputs take ``in_use`` bytes of the region runs (0: none runs, or
        its inputs travelled in its message)."""
        self._in_use = in_use


shared_memory = SharedMemory()

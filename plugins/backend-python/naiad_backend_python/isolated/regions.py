"""The sizes of an instance's shared memory region, and which batches go through it.

The region itself (creating, mapping, growing) is the wire module's
(``naiad_stub_wire.create_region``); the channel (``channel.py``) holds it, one batch at a
time.
"""

from __future__ import annotations

import os


class RegionPolicy:
    """Sizes of an instance's shared memory region (Triton's ``shm-default-byte-size`` and
    ``shm-growth-byte-size``, and naiad's ``shm-max-byte-size``), and which batches use
    it (``shm-inline-max-byte-size``)."""

    def __init__(self, directory: str, default: int, growth: int, maximum: int,
                 inline_max: int) -> None:
        self.directory = directory
        self.default = default
        self.growth = max(growth, 1)
        self.maximum = maximum
        self.inline_max = inline_max

    def size_for(self, needed: int) -> int:
        """The region size that holds ``needed`` bytes: the default, grown in steps."""
        if needed <= self.default:
            return self.default
        steps = -(-(needed - self.default) // self.growth)
        return min(self.default + steps * self.growth, self.maximum)


def free_space(directory: str) -> str:
    """What a failed region creation's message says about ``directory``."""
    try:
        stat = os.statvfs(directory)
    except OSError:
        return f"{directory} is missing"
    return f"{stat.f_bavail * stat.f_frsize} bytes free there"

"""How many GPUs this machine offers, read without importing a CUDA library.

The lowest layer that knows of GPUs: the config defaults (a KIND_AUTO instance group), the
instance groups and backend plugins (through :mod:`naiad.backend_utils`) all ask here.
"""

from __future__ import annotations

import os
from pathlib import Path


def gpu_count() -> int:
    """NVIDIA GPUs the driver exposes (0 without a driver). No CUDA library is imported."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    gpus = Path("/proc/driver/nvidia/gpus")
    count = len(list(gpus.iterdir())) if gpus.is_dir() else 0
    if visible is not None and count:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return count

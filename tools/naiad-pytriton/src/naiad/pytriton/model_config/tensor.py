"""Model input and output definitions (``pytriton.model_config.tensor``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Tensor:
    """An input or output: shape without the batch axis (-1 for a variable dimension), a
    numpy dtype (``object`` or ``np.bytes_`` for BYTES), an optional name (unnamed inputs
    become ``INPUT_1``..., outputs ``OUTPUT_1``..., in order) and ``optional`` (inputs only)."""

    shape: tuple
    dtype: Any
    name: str | None = None
    optional: bool | None = False

    def __post_init__(self) -> None:
        if isinstance(self.dtype, np.dtype):
            object.__setattr__(self, "dtype", self.dtype.type)

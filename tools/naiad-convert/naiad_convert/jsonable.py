"""Figures as JSON: an error that could not be measured (infinite) is null, since JSON has no
infinity and report.json must load in any JSON reader."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def dumps(data: Any) -> str:
    return json.dumps(finite(data), indent=1)

"""The request and response an inference callable sees (``pytriton.proxy.types``)."""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from naiad.pytriton.proxy.telemetry import traced_span


class _Tensors:
    """The mapping of tensor name to numpy array that a request and a response both are,
    over their ``data``."""

    data: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name]

    def __setitem__(self, name: str, array: np.ndarray) -> None:
        self.data[name] = array

    def __delitem__(self, name: str) -> None:
        del self.data[name]

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.data)

    def items(self):  # type: ignore[no-untyped-def]
        return self.data.items()

    def keys(self):  # type: ignore[no-untyped-def]
        return self.data.keys()

    def values(self):  # type: ignore[no-untyped-def]
        return self.data.values()


@dataclasses.dataclass
class Request(_Tensors):
    """One request: its inputs (``data``, a mapping of name to numpy array; the request is a
    mapping too) and ``parameters``: the request's parameters and the HTTP/gRPC headers the
    server forwards (``http_header_forward_pattern``)."""

    data: dict[str, np.ndarray]
    parameters: dict[str, str | int | bool] | None = None
    span: Any | None = None
    requested_output_names: list[str] | None = None

    def __contains__(self, input_name: object) -> bool:
        return input_name in self.data

    def get(self, input_name: str, default: Any = None) -> Any:
        return self.data.get(input_name, default)

    def traced_span(self, span_name: str) -> AbstractContextManager[None]:
        """PyTriton's span for a block of work on this request: untraced here (``span`` is
        always None; naiad.pytriton.proxy.telemetry)."""
        return traced_span(self, span_name)


Requests = list[Request]


@dataclasses.dataclass
class Response(_Tensors):
    """One response: output name to numpy array."""

    data: dict[str, np.ndarray]


Responses = list[Response]

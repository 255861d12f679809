"""The header of an ``execute`` message: how a batch is announced to its worker.

The usual batch (no request parameters, no trace, no new region) is packed straight to the
protocol's binary layout (``naiad_stub_headers.pack_execute``); any other goes as a dict,
which the wire writes as JSON. The worker reads both forms alike (``naiad_stub_main``).
"""

from __future__ import annotations

import struct
from collections.abc import MutableMapping, Sequence
from typing import Any

from naiad.types import InferenceRequest
from naiad_backend_python.stub import naiad_stub_wire as wire

#: One request as the header lists it: its id, the outputs it asks for (None: all) and the
#: descriptors of its inputs.
RequestEntry = tuple[str, list[str] | None, list[wire.Descriptor]]


def execute_header(batch_id: int, out: int | None, requests: Sequence[InferenceRequest],
                   entries: list[RequestEntry], plain: bool, region_size: int | None,
                   traces: MutableMapping[int, Any]) -> bytes | dict[str, Any]:
    """The header announcing batch ``batch_id``. ``out``: where outputs may start in the
    region (None: no region); ``plain``: no request has parameters or a trace and no
    descriptor goes with the message; ``region_size``: the size of a region sent with it
    (None: none). A traced request is registered in ``traces`` (its model's calls name it)."""
    if plain and region_size is None:
        try:
            return wire.pack_execute(batch_id, out, entries)
        except (KeyError, struct.error):
            pass  # a field beyond the binary layout: JSON carries it
    messages = []
    for request, (request_id, outputs, inputs) in zip(requests, entries, strict=True):
        message = {"id": request_id, "parameters": request.parameters or None,
                   "outputs": outputs, "inputs": inputs}
        if request.trace is not None:
            message["trace"] = request.trace.id
            traces[request.trace.id] = request.trace
        messages.append(message)
    header: dict[str, Any] = {"op": "execute", "id": batch_id, "requests": messages, "out": out}
    if region_size is not None:
        header["region_size"] = region_size
    return header

"""What the codec tests compare when they hold a one-pass reader to the general way
(``naiad.frontends.http.codec`` and ``naiad.frontends.grpc.codec``): a decoded request's
fields, its tensors' bytes among them."""

from __future__ import annotations

from naiad.types import InferenceRequest


def request_fields(request: InferenceRequest) -> tuple:
    """Everything a decoder fills in ``request``, as values that compare equal when two
    decoders made the same request (BYTES tensors by their items, not their pointers)."""
    return (request.model_name, request.model_version, request.id, request.parameters,
            None if request.requested_outputs is None else
            [(o.name, o.parameters) for o in request.requested_outputs],
            [(name, t.name, t.datatype, t.shape, t.data.dtype, t.data.shape,
              t.data.tolist() if t.data.dtype == object else t.data.tobytes())
             for name, t in request.inputs.items()])

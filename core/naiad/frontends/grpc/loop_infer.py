"""A unary ``ModelInfer`` answered on the event loop: decoded and submitted when its
message is in, encoded from its future's completion, with no thread between. naiad's own
gRPC server uses it for its connections (:mod:`.naiad_server`), and the engine for the
``ModelInfer`` calls frontend processes forward (``naiad.frontends.bridge.engine``).

It answers exactly as the servicer's ``ModelInfer`` handler does, from the same steps
(``InferenceServicer.submit_infer`` / ``encode_infer`` / ``infer_failure``). It does not
take a call while the server traces (the handler takes the protocol's timestamps) or when
inference is a restricted API (the handler checks the header): :meth:`LoopInfer.takes` says
so, and the caller runs the handler on a thread instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from naiad.frontends.grpc.calls import CallContext, Metadata, run_call
from naiad.frontends.grpc.loop_stream import LoopStreams
from naiad.frontends.grpc.options import GRPCOptions
from naiad.frontends.grpc.service import InferenceServicer, infer_failure
from naiad.frontends.grpc.status import bounded_message
from naiad.frontends.restrictions import grpc_requirements
from naiad.futures import LoopWaiter

_INFER_REQUEST = service_pb2.ModelInferRequest
#: How a call is answered: (status, details, the serialized response when the status is OK).
OnAnswer = Callable[[grpc.StatusCode, str, "bytes | None"], object]


class LoopInfer:
    """``ModelInfer`` for ``servicer`` on ``loop``; ``restricted``: inference is a restricted
    API (``--grpc-restricted-protocol``), so every call goes to the handler."""

    def __init__(self, servicer: InferenceServicer, loop: asyncio.AbstractEventLoop,
                 restricted: bool) -> None:
        self.servicer = servicer
        self.waiter = LoopWaiter(loop)
        self.restricted = restricted

    def takes(self) -> bool:
        """Whether a call may be answered here now (else: the handler, on a thread)."""
        return not self.restricted and self.servicer.server.tracer is None

    def start(self, message: bytes, metadata: Any, on_answer: OnAnswer
              ) -> Callable[[], object] | None:
        """Run the call whose request is ``message``; ``on_answer`` is called on the loop
        once (at once for a request refused as it arrives). Returns what cancels the
        request while it runs (None when it was answered already)."""
        try:
            request = _INFER_REQUEST.FromString(message)
        except DecodeError as exc:
            on_answer(grpc.StatusCode.INVALID_ARGUMENT, bounded_message(
                f"ModelInfer: the request is not a valid {_INFER_REQUEST.DESCRIPTOR.full_name}"
                f" message ({len(message)} bytes): {exc}"), None)
            return None
        servicer = self.servicer
        try:
            model, infer_request, to_shm = servicer.decode_infer(request, metadata)
            # What cancels it: taken now, since the answer may come before the call returns.
            cancel = infer_request.cancellation.cancel  # type: ignore[union-attr]
            future = servicer.server.infer_on_loop(
                model, infer_request,
                partial(self._answer, on_answer, model, infer_request, to_shm))
        except Exception as exc:
            on_answer(*_failure(request.model_name, exc), None)
            return None
        if future is not None:
            self.waiter.when_done(future, partial(self._finished, on_answer, model,
                                                  infer_request, to_shm))
        return cancel

    def _finished(self, on_answer: OnAnswer, model: Any, request: Any, to_shm: Any,
                  future: Future[Any]) -> None:
        try:
            response = future.result()
        except Exception as exc:
            on_answer(*_failure(request.model_name, exc), None)
            return
        self._answer(on_answer, model, request, to_shm, response)

    def _answer(self, on_answer: OnAnswer, model: Any, request: Any, to_shm: Any,
                response: Any) -> None:
        try:
            payload = self.servicer.encode_infer(model, request, to_shm, response)
        except Exception as exc:
            on_answer(*_failure(request.model_name, exc), None)
            return
        on_answer(grpc.StatusCode.OK, "", payload)


def loop_infer(servicer: InferenceServicer, options: GRPCOptions) -> LoopInfer:
    """The :class:`LoopInfer` of ``servicer``, which the ``--grpc-*`` ``options`` built."""
    return LoopInfer(servicer, servicer.loop,
                     "ModelInfer" in grpc_requirements(options.restricted))


class BridgedInfer:
    """The engine's end of the ``ModelInfer`` calls frontend processes forward on their
    HTTP link (``naiad.frontends.bridge.frames.GRPC_INFER``): answered on the loop, or, when
    :class:`LoopInfer` does not take them, in the method handler on a thread of ``pool``.
    ``streams`` starts the ``ModelStreamInfer`` calls forwarded there (``GRPC_STREAM``,
    ``naiad.frontends.bridge.stream_engine``)."""

    def __init__(self, infer: LoopInfer, handlers: dict[str, grpc.RpcMethodHandler],
                 pool: ThreadPoolExecutor, loop: asyncio.AbstractEventLoop,
                 streams: LoopStreams | None = None) -> None:
        self.infer = infer
        self.handlers = handlers
        self.pool = pool
        self.loop = loop
        self.streams = streams

    def start(self, message: bytes, metadata: Metadata, seconds_left: float | None,
              on_answer: OnAnswer) -> Callable[[], object] | None:
        """As :meth:`LoopInfer.start`; what it returns cancels the call."""
        if self.infer.takes():
            return self.infer.start(message, metadata, on_answer)
        context = CallContext(metadata, seconds_left)
        self.pool.submit(self._run, message, context, on_answer)
        return context.cancel

    def _run(self, message: bytes, context: CallContext, on_answer: OnAnswer) -> None:
        sent: list[bytes] = []
        code, details = run_call(self.handlers, "ModelInfer", False, message, (), context,
                                 lambda data, _uncompressed: sent.append(data))
        payload = sent[0] if sent and code is grpc.StatusCode.OK else None
        self.loop.call_soon_threadsafe(on_answer, code, details, payload)


def _failure(model_name: str, exc: BaseException) -> tuple[grpc.StatusCode, str]:
    code, message = infer_failure(model_name, exc)
    return code, bounded_message(message)


__all__ = ["BridgedInfer", "LoopInfer", "OnAnswer", "loop_infer"]

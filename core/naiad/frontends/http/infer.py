"""``POST /v2/models/{m}[/versions/{v}]/infer``: one request, from its headers and body to the
answer's status, body and headers.

Two callers share it, so an inference over HTTP is decoded, checked, submitted and encoded in
one place: the ASGI application (:class:`.app.HTTPFrontend`, for hypercorn, frontend
processes, traced requests and restricted APIs) and naiad's uvicorn protocol, which answers
a plain request itself without an ASGI cycle (:mod:`.protocol`, the hot path).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future
from functools import partial
from typing import Any, NamedTuple

from naiad.classification import classify_response
from naiad.errors import InferenceServerError, Status, http_status, invalid_arg
from naiad.frontends.forwarding import HeaderForwarder
from naiad.frontends.http.body import compress, decompress, pick_encoding
from naiad.frontends.http.codec import HEADER_LENGTH, decode_request, encode_response, error_body
from naiad.futures import LoopWaiter
from naiad.models.records import ModelVersion
from naiad.server import InferenceServer, answer
from naiad.types import InferenceRequest, InferenceResponse

log = logging.getLogger("naiad.http")

# tritonserver's answer to POST .../infer on a decoupled model (2.51: 501, this body).
DECOUPLED_STATUS = 501
DECOUPLED_REFUSAL = ("HTTP end point doesn't support models with decoupled transaction "
                     "policy")
HEADER_LENGTH_BYTES = HEADER_LENGTH.encode()

Headers = Sequence[tuple[bytes, bytes]]


def split_infer_path(path: str) -> tuple[str, str] | None:
    """``/v2/models/M[/versions/V]/infer`` -> (M, V) or None."""
    parts = path.split("/")
    # ['', 'v2', 'models', M, 'infer'] or ['', 'v2', 'models', M, 'versions', V, 'infer']
    if len(parts) == 5 and parts[1] == "v2" and parts[2] == "models":
        return parts[3], ""
    if len(parts) == 7 and parts[1] == "v2" and parts[2] == "models" and parts[4] == "versions":
        return parts[3], parts[5]
    return None


class InferHeaders(NamedTuple):
    """The request headers an inference reads (names lower-case, as both servers give them)."""

    content_length: int | None
    header_length: bytes | None  # Inference-Header-Content-Length, checked when used
    encoding: str  # Content-Encoding
    accept: str  # Accept-Encoding


def infer_headers(headers: Headers) -> InferHeaders:
    found = dict(headers)  # a repeated header: its last value, as the loop it replaces
    length = found.get(b"content-length")
    encoding = found.get(b"content-encoding")
    accept = found.get(b"accept-encoding")
    return InferHeaders(int(length) if length is not None and length.isdigit() else None,
                        found.get(HEADER_LENGTH_BYTES),
                        "" if encoding is None else encoding.decode("latin-1"),
                        "" if accept is None else accept.decode("latin-1"))


class Answer(NamedTuple):
    """What to send: ``json_length`` is set for a binary-tensor body (its JSON part's size,
    Triton's Inference-Header-Content-Length), ``encoding`` when the body is compressed."""

    status: int
    body: bytes
    json_length: int | None = None
    encoding: str | None = None


class InferExchange:
    """One plain inference answered without an ASGI cycle, as an :class:`InferRoute` (or a
    frontend process's stand-in for it) sees it: what the request named and sent, and,
    once started, what runs it. Callers that carry more (naiad's HTTP protocol, the
    engine's end of a frontend process) extend it."""

    __slots__ = ("disconnected", "future", "headers", "heads", "model", "model_name",
                 "request", "ticket", "version")

    def __init__(self, model_name: str, version: str, heads: InferHeaders,
                 headers: Headers) -> None:
        self.model_name, self.version = model_name, version
        self.heads, self.headers = heads, headers
        self.disconnected = False  # the client went away: nobody to answer
        self.model: ModelVersion | None = None
        self.request: InferenceRequest | None = None
        self.future: Future[InferenceResponse] | None = None
        self.ticket = 0  # its number between a frontend process and the engine


OnAnswer = Callable[[Any, Answer], object]


class DecoupledRefused(InferenceServerError):
    """A decoupled model asked for one answer: tritonserver's 501."""


class InferRoute:
    """The infer route of one server: ``limit`` is ``--http-max-input-size``, ``forwarder``
    turns matching request headers into request parameters (or is None)."""

    def __init__(self, server: InferenceServer, forwarder: HeaderForwarder | None) -> None:
        self.server = server
        self.limit = server.options.max_input_size
        self.max_response_size = server.options.max_response_size
        self.forwarder = forwarder
        self._waiter: LoopWaiter | None = None

    def waiter(self, loop: asyncio.AbstractEventLoop | None = None) -> LoopWaiter:
        """The :class:`LoopWaiter` of ``loop``, the running loop (made on first use there;
        a caller that knows the loop passes it: asking asyncio costs a system call)."""
        if loop is None:
            loop = asyncio.get_running_loop()
        waiter = self._waiter
        if waiter is None or waiter.loop is not loop:
            waiter = self._waiter = LoopWaiter(loop)
        return waiter

    # --- an exchange without ASGI (naiad's HTTP protocol, frontend processes) -----------

    def takes_plain_requests(self) -> bool:
        """Whether plain inferences may skip the ASGI application now: not while the server
        traces (the traced path takes the protocol's timestamps)."""
        return self.server.tracer is None

    def start(self, exchange: InferExchange, body: bytes, loop: asyncio.AbstractEventLoop,
              on_answer: OnAnswer) -> None:
        """Run ``exchange`` and call ``on_answer(exchange, answer)`` on ``loop`` when it is
        answered (at once for a request refused as it arrives); not when the client went
        away meanwhile."""
        try:
            model = exchange.model = self.find(exchange.model_name, exchange.version)
            request = exchange.request = self.decode(model, exchange.heads, body,
                                                     exchange.headers)
            future = self.server.infer_on_loop(model, request,
                                               partial(self._answered, exchange, on_answer))
        except Exception as exc:
            on_answer(exchange, failure(exchange.model_name, exc))
            return
        if future is not None:
            exchange.future = future
            self.waiter(loop).when_done(future, partial(self._finished, exchange, on_answer))

    def _answered(self, exchange: InferExchange, on_answer: OnAnswer,
                  response: InferenceResponse) -> None:
        if exchange.disconnected:
            return  # nobody to answer
        on_answer(exchange, self.answer_or_failure(
            exchange.model, exchange.request, response,  # type: ignore[arg-type]
            exchange.heads.accept))

    def _finished(self, exchange: InferExchange, on_answer: OnAnswer,
                  future: Future[InferenceResponse]) -> None:
        if exchange.disconnected:
            return  # nobody to answer
        on_answer(exchange, self.outcome(exchange.model, exchange.request,  # type: ignore[arg-type]
                                         future, exchange.heads.accept))

    def withdraw(self, exchange: InferExchange) -> None:
        """The client of ``exchange`` went away: as on the ASGI path, a request its scheduler
        still holds is withdrawn; one already running finishes unread."""
        exchange.disconnected = True
        model, future = exchange.model, exchange.future
        if model is not None and future is not None and model.scheduler.holds_requests:
            future.cancel()

    # --- the steps ------------------------------------------------------------------------

    def find(self, model_name: str, version: str) -> ModelVersion:
        """The model version to run, before the body is read: a decoupled model is refused."""
        model = self.server.model(model_name, version)
        if model.decoupled:
            raise DecoupledRefused(f"{DECOUPLED_REFUSAL} (model '{model_name}' is decoupled: "
                                   f"use generate_stream or gRPC ModelStreamInfer)",
                                   Status.UNSUPPORTED)
        return model

    def decode(self, model: ModelVersion, heads: InferHeaders, body: bytes, headers: Headers
               ) -> InferenceRequest:
        """The request ``body`` holds for ``model``; a bad request raises."""
        if heads.encoding:
            body = decompress(body, heads.encoding, self.limit)
        header_length = heads.header_length
        if header_length is not None:
            if not header_length.isdigit():
                raise invalid_arg(f"model '{model.name}': Inference-Header-Content-Length "
                                  f"must be a non-negative integer")
            header_length = int(header_length)
        request = decode_request(model.name, model.version, body, header_length,
                                 self.server.shared_memory)
        if self.forwarder is not None:
            request.parameters.update(self.forwarder.from_http(headers))
        return request

    def submit(self, model: ModelVersion, heads: InferHeaders, body: bytes, headers: Headers
               ) -> tuple[InferenceRequest, Future[InferenceResponse]]:
        """Decode ``body`` and hand the request to the server; a bad request raises."""
        request = self.decode(model, heads, body, headers)
        return request, self.server.infer(model, request)

    def answer(self, model: ModelVersion, request: InferenceRequest,
               response: InferenceResponse, accept: str) -> Answer:
        """The encoded answer to ``request``; a response too large to send raises."""
        # The version that ran it (request.model_version): the one found above, or the
        # one serving in its place when that one retired meanwhile (server._enter).
        response = classify_response(model, request, answer(request, response))
        payload, json_length = encode_response(request, response, request.model_version,
                                               self.server.shared_memory,
                                               self.max_response_size)
        encoding = pick_encoding(accept) if accept else None
        if encoding is not None:
            payload = compress(payload, encoding)
        return Answer(200, payload, json_length, encoding)

    def outcome(self, model: ModelVersion, request: InferenceRequest,
                future: Future[InferenceResponse], accept: str) -> Answer:
        """The answer for a finished ``future``: the response or the error it ended with."""
        try:
            response = future.result()
        except CancelledError:
            return failure(model.name, InferenceServerError(
                f"model '{model.name}': the request was cancelled", Status.CANCELLED))
        except Exception as exc:
            return failure(model.name, exc)
        return self.answer_or_failure(model, request, response, accept)

    def answer_or_failure(self, model: ModelVersion, request: InferenceRequest,
                          response: InferenceResponse, accept: str) -> Answer:
        """:meth:`answer`, or the failure it raises (the model's error, a response too
        large to send) as an answer."""
        try:
            return self.answer(model, request, response, accept)
        except Exception as exc:
            return failure(model.name, exc)


def failure(model_name: str, exc: Exception) -> Answer:
    """The answer for an inference that failed with ``exc``: its status and message, or a
    500 naming the model for an unexpected exception (logged with its traceback)."""
    if isinstance(exc, DecoupledRefused):
        return Answer(DECOUPLED_STATUS, error_body(exc.message))
    if isinstance(exc, InferenceServerError):
        return Answer(http_status(exc), error_body(exc.message))
    log.error("inference on model '%s' failed", model_name, exc_info=exc)
    return Answer(500, error_body(f"model '{model_name}': internal error: "
                                  f"{type(exc).__name__}: {exc}"))

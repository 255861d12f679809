"""Triton's generate extension: ``POST /v2/models/M[/versions/V]/generate`` and
``.../generate_stream``, for decoupled and ordinary models alike.

Both read the same JSON object (:mod:`.generate_codec`) and run the request with
:meth:`InferenceServer.stream`. As tritonserver 2.51 answers (tests/compat/TRITON_OBSERVED.md,
"Generate extension"):

- a request refused before it ran (unknown model, bad body, a value that fits no input)
  gets an ``{"error": ...}`` JSON body with its status (404, 400...);
- ``generate`` answers one JSON object. A model that sends anything but exactly one
  response gets "generate expects model to produce exactly 1 response..." (tritonserver
  sends that with status 200; naiad with 400, the client's request being the cause);
- ``generate_stream`` answers server-sent events, ``data: <JSON object>\\n\\n`` per
  response, ``text/event-stream; charset=utf-8``; the status is decided by the first
  response (400 when it is an error), later errors are ``data: {"error": ...}`` events and
  the stream goes on; no response at all is an empty 200;
- an error the model's inference produced is 400, whatever its kind (tritonserver's
  choice for this extension).

Each request gets a :class:`~naiad.types.Cancellation`, cancelled when the client
disconnects before the last response (and when ``generate`` stops reading after a second
response), so a model that looks (``request.is_cancelled()``) can stop and a queued request
never runs. naiad reads gzip or deflate bodies here as for ``infer``; tritonserver takes
only identity.

Responses waiting for a client that reads slowly or not at all are bounded
(``--stream-max-buffered-responses`` and its server-wide total,
:mod:`naiad.frontends.stream_buffer`): beyond the bound the request is cancelled, the
responses it held are dropped at once, and the stream ends with an error event naming the
flag; a client that reads nothing at all cannot receive it, so after
:data:`OVERFLOW_GRACE_S` its connection is closed.

Request headers are not forwarded to generate requests (tritonserver does not forward them
either).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from naiad.errors import InferenceServerError, http_status
from naiad.frontends.http.body import decompress, read_body
from naiad.frontends.http.codec import error_body
from naiad.frontends.http.generate_codec import decode_generate, encode_generate
from naiad.frontends.stream_buffer import ResponseBudget, budget_of
from naiad.types import Cancellation, InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from naiad.server import InferenceServer

log = logging.getLogger("naiad.http")

JSON = b"application/json"
EVENT_STREAM = b"text/event-stream; charset=utf-8"
ONE_RESPONSE = ("generate expects model to produce exactly 1 response, use generate stream "
                "for model that generates various number of responses")
# tritonserver's status for an error the model's inference produced, on both endpoints
INFERENCE_ERROR_STATUS = 400
# How long a stream that went over its bound may take to send its error event before its
# connection is closed (seconds).
OVERFLOW_GRACE_S = 5.0
_DISCONNECTED = object()
_OVERFLOWED = object()


class _Responses:
    """The responses of one request, handed from whichever thread sends them to the loop;
    counted against ``budget`` while they wait (``label`` names the stream)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, budget: ResponseBudget | None = None,
                 label: str = "generate") -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.ended = False  # the final response (or flag) was taken
        self.buffer = None if budget is None else budget.open(label, self._overflowed)
        #: set (on the loop) when the stream went over its bound; ``failure`` says why
        self.overflowed = asyncio.Event()
        self.failure = ""
        self.closed = False  # nothing more is queued
        self.cancellation: Cancellation | None = None  # the request's, once it runs

    def deliver(self, response: InferenceResponse | None, final: bool) -> None:
        """``on_response`` of :meth:`InferenceServer.stream`: any thread, keep it short."""
        if response is not None and self.buffer is not None and not self.buffer.add():
            return  # the stream went over its bound: drop it
        self.loop.call_soon_threadsafe(self._put, (response, final))

    def _put(self, item: Any) -> None:
        if not self.closed:
            self.queue.put_nowait(item)

    def _overflowed(self, message: str) -> None:
        """Too many responses wait for this client (any thread): end the stream."""
        log.warning("%s", message)
        self.failure = message
        self.loop.call_soon_threadsafe(self._overflow)

    def _overflow(self) -> None:
        if self.cancellation is not None:  # let the model stop now
            self.cancellation.cancel()
        self.close()
        self.queue.put_nowait(_OVERFLOWED)
        self.overflowed.set()

    def close(self) -> None:
        """Drop what is queued (on the loop); later responses are dropped on arrival."""
        self.closed = True
        while not self.queue.empty():
            self.queue.get_nowait()
        if self.buffer is not None:
            self.buffer.close()

    async def next(self) -> tuple[InferenceResponse | None, bool] | None:
        """The next (response, final) pair; None once the client disconnected or the
        stream went over its bound (``failure`` is then set)."""
        item = await self.queue.get()
        if item is _DISCONNECTED or item is _OVERFLOWED:
            return None
        if item[0] is not None and self.buffer is not None:
            self.buffer.taken()
        if item[1]:
            self.ended = True
        return item  # type: ignore[no-any-return]


class GenerateEndpoint:
    """The ASGI application of one generate route (``streaming``: ``generate_stream``)."""

    def __init__(self, server: InferenceServer, streaming: bool) -> None:
        self.server = server
        self.streaming = streaming

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = scope["path_params"]
        model_name = path["model"]
        content_length = None
        encoding = ""
        for key, value in scope["headers"]:
            if key == b"content-length":
                content_length = int(value) if value.isdigit() else None
            elif key == b"content-encoding":
                encoding = value.decode("latin-1")
        server = self.server
        limit = server.options.max_input_size
        responses = _Responses(asyncio.get_running_loop(), budget_of(server),
                               f"{'generate_stream' if self.streaming else 'generate'} on "
                               f"model '{model_name}'")
        try:
            model = server.model(model_name, path.get("version", ""))
            body = await read_body(receive, content_length, limit)
            if encoding:
                body = decompress(body, encoding, limit)
            request = decode_generate(model.signature, model.version, body)
            request.cancellation = responses.cancellation = Cancellation()
            server.stream(model, request, responses.deliver)
        except InferenceServerError as exc:
            await _send_whole(send, http_status(exc), error_body(exc.message))
            return
        except Exception as exc:  # never let a request kill the connection silently
            log.exception("generate on model '%s' failed", model_name)
            await _send_whole(send, 500, error_body(f"model '{model_name}': internal error: "
                                                    f"{type(exc).__name__}: {exc}"))
            return
        watcher = asyncio.ensure_future(_watch(receive, responses))
        try:
            if self.streaming:
                await _until_overflow(_send_events(send, request, responses,
                                                   server.options.max_response_size),
                                      responses)
            else:
                await _send_one(send, request, responses, server.options.max_response_size)
        finally:
            watcher.cancel()
            if not responses.ended:  # nobody reads the rest: let the model stop
                request.cancellation.cancel()
            responses.close()


async def _until_overflow(sending: Any, responses: _Responses) -> None:
    """Run ``sending`` (the coroutine that sends the events) until it ends; if the stream
    goes over its bound meanwhile, give it OVERFLOW_GRACE_S to send the error event, then
    stop it: returning with the response unfinished makes the server close the
    connection."""
    task = asyncio.ensure_future(sending)
    overflow = asyncio.ensure_future(responses.overflowed.wait())
    try:
        await asyncio.wait({task, overflow}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait({task}, timeout=OVERFLOW_GRACE_S)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return
        task.result()
    finally:
        overflow.cancel()
        if not task.done():  # this request itself was cancelled (server shutdown)
            task.cancel()


async def _watch(receive: Any, responses: _Responses) -> None:
    """Wait for the client to disconnect (the body is read: that is the next message)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    responses.queue.put_nowait(_DISCONNECTED)


async def _send_one(send: Any, request: InferenceRequest, responses: _Responses,
                    max_size: int) -> None:
    first = await responses.next()
    if first is None:
        return  # the client hung up; there is nobody to answer
    response, final = first
    if response is not None and response.error is not None:
        await _send_whole(send, INFERENCE_ERROR_STATUS, error_body(response.error.message))
        return
    if response is not None and not final:
        second = await responses.next()
        if second is None:
            return
        if second != (None, True):
            response = None  # a second response: more than generate can answer
    if response is None:
        await _send_whole(send, INFERENCE_ERROR_STATUS,
                          error_body(f"{ONE_RESPONSE} (model '{request.model_name}')"))
        return
    try:
        body = encode_generate(request, response, max_size)
    except InferenceServerError as exc:
        await _send_whole(send, http_status(exc), error_body(exc.message))
        return
    await _send_whole(send, 200, body)


async def _send_events(send: Any, request: InferenceRequest, responses: _Responses,
                       max_size: int) -> None:
    started = False
    while True:
        item = await responses.next()
        if item is None:
            if responses.failure:  # over its bound: an error event ends the stream
                if not started:
                    await _start(send, INFERENCE_ERROR_STATUS, EVENT_STREAM)
                await send({"type": "http.response.body",
                            "body": b"data: " + error_body(responses.failure) + b"\n\n"})
            return
        response, final = item
        if response is not None:
            failed = response.error is not None
            if response.error is not None:
                event = error_body(response.error.message)
            else:
                try:
                    event = encode_generate(request, response, max_size)
                except InferenceServerError as exc:  # too large: an error event
                    event, failed = error_body(exc.message), True
            if not started:
                status = INFERENCE_ERROR_STATUS if failed else 200
                await _start(send, status, EVENT_STREAM)
                started = True
            await send({"type": "http.response.body", "body": b"data: " + event + b"\n\n",
                        "more_body": True})
        if final:
            break
    if not started:
        await _start(send, 200, EVENT_STREAM)
    await send({"type": "http.response.body", "body": b""})


async def _start(send: Any, status: int, content_type: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type),
                            (b"cache-control", b"no-cache")]})


async def _send_whole(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()),
                            (b"content-type", JSON)]})
    await send({"type": "http.response.body", "body": body})

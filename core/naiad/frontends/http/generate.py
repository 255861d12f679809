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
only identity. Request headers are not forwarded to generate requests (tritonserver does
not forward them either).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from naiad.errors import InferenceServerError, http_status
from naiad.frontends.http.body import decompress, read_body
from naiad.frontends.http.codec import error_body
from naiad.frontends.http.generate_codec import decode_generate, encode_generate
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
_DISCONNECTED = object()


class _Responses:
    """The responses of one request, handed from whichever thread sends them to the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.ended = False  # the final response (or flag) was taken

    def deliver(self, response: InferenceResponse | None, final: bool) -> None:
        """``on_response`` of :meth:`InferenceServer.stream`: any thread, keep it short."""
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (response, final))

    async def next(self) -> tuple[InferenceResponse | None, bool] | None:
        """The next (response, final) pair; None once the client disconnected."""
        item = await self.queue.get()
        if item is _DISCONNECTED:
            return None
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
        responses = _Responses(asyncio.get_running_loop())
        try:
            model = server.model(model_name, path.get("version", ""))
            body = await read_body(receive, content_length, limit)
            if encoding:
                body = decompress(body, encoding, limit)
            request = decode_generate(model.signature, model.version, body)
            request.cancellation = Cancellation()
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
                await _send_events(send, request, responses, server.options.max_response_size)
            else:
                await _send_one(send, request, responses, server.options.max_response_size)
        finally:
            watcher.cancel()
            if not responses.ended:  # nobody reads the rest: let the model stop
                request.cancellation.cancel()


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

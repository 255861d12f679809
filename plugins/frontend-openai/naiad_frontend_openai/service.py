"""What every route shares: the server, the settings, tokenizers, admission, model formats."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from naiad.errors import InferenceServerError
from naiad.types import InferenceRequest
from naiad_frontend_openai.engine import Admission, ResponseStream
from naiad_frontend_openai.errors import OpenAIError, from_server_error
from naiad_frontend_openai.formats import ModelFormat
from naiad_frontend_openai.settings import OpenAISettings
from naiad_frontend_openai.tokenizer import Tokenizers
from naiad_frontend_openai.tool_parsers import PARSERS, ToolCallParser

T = TypeVar("T")
#: model versions whose tensor format is kept (a reload makes a new version)
MAX_CACHED_FORMATS = 256
#: what owns the models in /v1/models (Triton's frontend says this; clients compare it)
OWNED_BY = "Triton Inference Server"


class OpenAIService:
    def __init__(self, server: Any, settings: OpenAISettings, metrics_app: Any) -> None:
        self.server = server
        self.settings = settings
        self.metrics_app = metrics_app
        self.tokenizers = Tokenizers(settings.tokenizer, settings.chat_template)
        self.admission = Admission(settings.max_concurrent_streams)
        self.tool_parser: ToolCallParser | None = (
            PARSERS[settings.tool_call_parser]() if settings.tool_call_parser else None)
        #: model name -> when the frontend first saw it ready (the models' "created")
        self.created: dict[str, int] = {}
        #: id(version) -> (the version, its format): read once per loaded version
        self._formats: dict[int, tuple[Any, ModelFormat]] = {}
        #: held by POST /v1/models/{name}/load and /unload: one at a time, as Triton's
        #: frontend does, so that of concurrent loads of one model one succeeds and the
        #: others find it loaded (400)
        self.management_lock = asyncio.Lock()

    # --- models ---------------------------------------------------------------------

    def model(self, name: str, unknown_status: int = 400) -> tuple[Any, ModelFormat]:
        """The serving version of model ``name`` and its tensor format. An unknown model is
        ``unknown_status``: 400 for a request that names it (Triton's frontend answers a
        completion for a model it does not serve with a ClientError), 404 for
        ``GET /v1/models/{name}``."""
        try:
            model = self.server.model(name)
        except InferenceServerError as exc:
            error = from_server_error(exc)
            if error.status == 404:
                message = f"Unknown model: {name}"
                raise OpenAIError(unknown_status, message, "model_not_found", "model",
                                  detail=message) from None
            raise error from None
        found = self._formats.get(id(model))
        if found is None or found[0] is not model:
            if len(self._formats) >= MAX_CACHED_FORMATS:  # reloads leave old versions
                self._formats.clear()
            found = self._formats[id(model)] = (
                model, ModelFormat.of(model, self.settings.request_format))
        return model, found[1]

    def ready_models(self) -> list[str]:
        names = sorted({entry["name"] for entry in self.server.models.index(ready_only=True)})
        now = int(time.time())
        for name in names:
            self.created.setdefault(name, now)
        return names

    def model_card(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.created.setdefault(
            name, int(time.time())), "owned_by": OWNED_BY}

    # --- running requests -----------------------------------------------------------

    def start(self, model: Any, request: InferenceRequest) -> ResponseStream:
        return ResponseStream(self.server, model, request, self.admission)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def json_response(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def sse(chunk: Any) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def event_stream(chunks: AsyncIterator[bytes], on_close: Callable[[], None]) -> Response:
    """A ``text/event-stream`` response; ``on_close`` runs however it ends (a client that
    disconnects ends it: starlette cancels the iteration)."""

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                yield chunk
        except OpenAIError as exc:  # the model failed mid-stream: tell the client, as SSE
            yield sse(exc.body())
            yield SSE_DONE
        finally:
            on_close()

    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"cache-control": "no-cache"})


async def unless_disconnected(request: Request, work: Awaitable[T],
                              on_disconnect: Callable[[], None]) -> T:
    """``work``'s result; if the client disconnects first, ``on_disconnect()`` and a 499."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        on_disconnect()
        task.cancel()
        raise OpenAIError(499, "the client disconnected", "client_disconnected")
    finally:
        watch.cancel()


async def _disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return

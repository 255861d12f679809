"""The OpenAI frontend: its routes, its middleware and its listener, started by naiad serve.

Routes (Triton's frontend's): ``POST /v1/chat/completions``, ``/v1/completions``,
``/v1/embeddings``, ``GET /v1/models``, ``/v1/models/{model}``, ``POST
/v1/models/{model}/load`` and ``/unload`` (explicit model control), ``GET /metrics`` (the
server's Prometheus text) and ``/health/ready``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from naiad.errors import InferenceServerError, Status
from naiad.types import FrontendContext
from naiad_frontend_openai.chat import chat_completions
from naiad_frontend_openai.completions import completions
from naiad_frontend_openai.embeddings import embeddings
from naiad_frontend_openai.errors import (
    OpenAIError,
    bad_request,
    from_server_error,
    server_error,
)
from naiad_frontend_openai.limits import BodyLimit, Restrictions
from naiad_frontend_openai.listener import Listener
from naiad_frontend_openai.service import OpenAIService, json_response
from naiad_frontend_openai.settings import OpenAISettings

log = logging.getLogger("naiad.openai")
Handler = Callable[[OpenAIService, Request], Awaitable[Response]]


def _route(service: OpenAIService, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(service, request)
        except OpenAIError as exc:
            return exc.response()
        except InferenceServerError as exc:
            return from_server_error(exc).response()
    return endpoint


async def list_models(service: OpenAIService, request: Request) -> Response:
    return json_response({"object": "list",
                          "data": [service.model_card(name) for name in service.ready_models()]})


async def get_model(service: OpenAIService, request: Request) -> Response:
    name = request.path_params["model"]
    service.model(name, unknown_status=404)
    return json_response(service.model_card(name))


def _explicit_control(service: OpenAIService) -> None:
    if service.server.options.model_control_mode != "explicit":
        raise bad_request("Model load/unload requires --model-control-mode=explicit")


def _model_name(request: Request) -> str:
    """The ``{model}`` of a load/unload path; 400 for a name that is no folder name of a
    repository (``..``, blank, a control character), as Triton's frontend refuses it."""
    name = request.path_params["model"]
    if (name in (".", "..") or not name.strip() or "\\" in name
            or any(ord(char) < 32 or ord(char) == 127 for char in name)):
        raise bad_request(f"Invalid model name: {name!r}. Model names must be valid "
                          f"file-system-path segment names.")
    return name


async def load_model(service: OpenAIService, request: Request) -> Response:
    """Triton's frontend's answers: 400 for a model already loaded, 500 for one the
    repository does not hold, 400 for the rest of the failures."""
    _explicit_control(service)
    name = _model_name(request)
    async with service.management_lock:
        if name in service.ready_models():
            raise bad_request(f"Model '{name}' is already loaded")
        try:
            await service.server.load_model(name)
        except InferenceServerError as exc:
            if exc.status == Status.NOT_FOUND:
                raise server_error(f"failed to poll from model repository: {exc.message}") \
                    from None
            raise bad_request(exc.message) from None
        service.created.pop(name, None)
        return json_response(service.model_card(name))


async def unload_model(service: OpenAIService, request: Request) -> Response:
    _explicit_control(service)
    name = _model_name(request)
    async with service.management_lock:
        if name not in service.ready_models():
            raise bad_request(f"Unknown model: {name}")
        try:
            await service.server.unload_model(name)
        except InferenceServerError as exc:
            raise bad_request(exc.message) from None
        service.created.pop(name, None)
        return json_response({"status": "success", "model": name})


async def health_ready(service: OpenAIService, request: Request) -> Response:
    if service.server.ready:
        return Response(status_code=200)
    return OpenAIError(503, "the server is not ready", "not_ready").response()


async def metrics(service: OpenAIService, request: Request) -> Response:
    if service.metrics_app is None:
        raise OpenAIError(404, "metrics are off (--allow-metrics=false)", "not_found")
    return _Passthrough(service.metrics_app)


class _Passthrough(Response):
    """A response that another ASGI app (the metrics app) writes."""

    def __init__(self, app: Any) -> None:
        super().__init__()
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app({**scope, "path": "/metrics", "raw_path": b"/metrics"}, receive, send)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: "Not Found", 405: "Method Not Allowed"}.get(exc.status_code,
                                                                str(exc.detail))
    return OpenAIError(exc.status_code, message, "not_found" if exc.status_code == 404
                       else "method_not_allowed", detail=message).response()


def build_app(service: OpenAIService) -> Any:
    """The ASGI app: routes behind the restrictions and the body limit."""
    def route(path: str, handler: Handler, method: str) -> Route:
        return Route(path, _route(service, handler), methods=[method])

    app = Starlette(routes=[
        route("/v1/chat/completions", chat_completions, "POST"),
        route("/v1/completions", completions, "POST"),
        route("/v1/embeddings", embeddings, "POST"),
        route("/v1/models", list_models, "GET"),
        route("/v1/models/{model}", get_model, "GET"),
        route("/v1/models/{model}/load", load_model, "POST"),
        route("/v1/models/{model}/unload", unload_model, "POST"),
        route("/health/ready", health_ready, "GET"),
        route("/metrics", metrics, "GET"),
    ], exception_handlers={HTTPException: _http_error})
    settings = service.settings
    guarded = Restrictions(app, settings.restrictions)
    return BodyLimit(guarded, settings.max_body_bytes, settings.body_timeout_s)


class OpenAIFrontend:
    """The :class:`naiad.types.Frontend` ``naiad serve`` starts for ``naiad.frontends:openai``."""

    def __init__(self, context: FrontendContext, settings: OpenAISettings) -> None:
        self.settings = settings
        self.service = OpenAIService(context.server, settings, context.metrics_app)
        self.app = build_app(self.service)
        self.listener = Listener(self.app, settings.address, settings.port,
                                 settings.drain_timeout_s, settings.reuse_port)

    async def start(self) -> None:
        try:
            await asyncio.to_thread(self.service.tokenizers.preload)
        except OpenAIError as exc:  # chat requests will say so; the rest serves
            log.error("OpenAI frontend: %s", exc.message)
        await self.listener.start()
        log.info("OpenAI API at http://%s:%d/v1 (restricted: %s)", self.settings.address,
                 self.settings.port, {api: header for api, (header, _)
                                      in self.settings.restrictions.items()} or "none")

    async def stop(self) -> None:
        await self.listener.stop()

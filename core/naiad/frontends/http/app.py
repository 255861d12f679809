"""The HTTP/REST frontend: Triton's V2 endpoints as one ASGI application.

``POST .../infer`` is matched by hand before Starlette's router: it is the one path whose
per-request cost decides throughput (:mod:`.infer` decodes, submits and encodes it; under
uvicorn a plain one is answered by naiad's protocol without reaching this application,
:mod:`.protocol`). It awaits the future :meth:`InferenceServer.infer` returns through a
:class:`naiad.futures.LoopWaiter` (one loop wake-up for answers that finish together); a
decoupled model is refused there (501, as tritonserver), its responses are for the generate
extension (:mod:`.generate`). Every other endpoint is an ordinary Starlette route.

Endpoint restrictions (``--http-restricted-api``) are resolved once, when the application
is built: a route of a restricted API group checks the header before anything else (even
before the method, as tritonserver does); an unrestricted one does no extra work.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import logging
from concurrent.futures import Future
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from naiad import logs
from naiad.errors import InferenceServerError, http_status, invalid_arg
from naiad.frontends.forwarding import header_forwarder
from naiad.frontends.http.body import read_body
from naiad.frontends.http.codec import error_body
from naiad.frontends.http.control import UNSUPPORTED_MEDIA_TYPE, content_type_refusal
from naiad.frontends.http.generate import GenerateEndpoint
from naiad.frontends.http.infer import (
    HEADER_LENGTH_BYTES,
    InferRoute,
    failure,
    infer_headers,
    split_infer_path,
)
from naiad.frontends.http.openapi import PATH as OPENAPI_PATH
from naiad.frontends.http.openapi import openapi_document
from naiad.frontends.restrictions import (
    HTTP_REFUSAL_STATUS,
    HTTPRequirement,
    Restriction,
    http_requirements,
)
from naiad.futures import LoopWaiter
from naiad.models.staging import file_parameters
from naiad.server import InferenceServer
from naiad.shm import cuda_register, cuda_status, cuda_unregister
from naiad.tracing.exchange import traced_http_call
from naiad.types import InferenceResponse

log = logging.getLogger("naiad.http")

JSON = b"application/json"


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status, media_type="application/json")


def _done() -> Response:
    """An empty success, with the Content-Type tritonserver gives it."""
    return Response(status_code=200, media_type="application/json")


def _error(exc: InferenceServerError) -> Response:
    return Response(error_body(exc.message), http_status(exc), media_type="application/json")


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods answer in the same ``{"error": ...}`` form."""
    assert isinstance(exc, HTTPException)
    return Response(error_body(exc.detail), exc.status_code, media_type="application/json",
                    headers=exc.headers)


async def _wait_while_connected(waiter: LoopWaiter, future: Future[InferenceResponse],
                                receive: Any) -> bool:
    """Wait until ``future`` is done (True), or the client disconnects (False): the future
    is then cancelled, so a request still queued is withdrawn and never executes."""
    pending = waiter.wait(future)
    gone = False

    async def watch() -> None:
        nonlocal gone
        # The body is read: the next message is the disconnect (or the end of the exchange).
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        future.cancel()
        pending.cancel()  # a request already running finishes unread

    watcher = asyncio.ensure_future(watch())
    try:
        await pending
    except asyncio.CancelledError:
        if gone:
            return False
        future.cancel()  # this task was cancelled: nobody waits for the request any more
        raise
    except Exception:  # the future's own failure: the caller answers it
        pass
    finally:
        watcher.cancel()
    return True


# API groups whose POSTs change the server: their content type is checked (.control).
CONTROL_GROUPS = frozenset({"model-repository", "shared-memory", "logging", "trace"})


class _CheckedRoute(Route):
    """A route whose requests are checked before its endpoint runs: the header of a
    restricted API group (first, even before the method, as tritonserver does), then the
    content type of a control POST (naiad.frontends.http.control)."""

    def __init__(self, path: str, endpoint: Any, *, methods: list[str] | None,
                 requirement: HTTPRequirement | None, control: bool) -> None:
        super().__init__(path, endpoint, methods=methods)
        self.requirement = requirement
        self.control = control

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        requirement = self.requirement
        if requirement is not None and not requirement.met_by(scope["headers"]):
            await _refuse(send, requirement)
            return
        if self.control and scope["method"] == "POST":
            refusal = content_type_refusal(scope["headers"], scope["path"])
            if refusal is not None:
                await _send(send, UNSUPPORTED_MEDIA_TYPE, error_body(refusal), None, None)
                return
        await super().handle(scope, receive, send)


class HTTPFrontend:
    """The ASGI application. ``server`` is the protocol-free core.

    ``restricted`` maps API groups to the header their requests must carry
    (``--http-restricted-api``); request headers whose names match
    ``header_forward_pattern`` become parameters of inference requests
    (``--http-header-forward-pattern``). Both are off by default.
    """

    def __init__(self, server: InferenceServer, *,
                 restricted: dict[str, Restriction] | None = None,
                 header_forward_pattern: str = "") -> None:
        self.server = server
        self.limit = server.options.max_input_size
        self.requirements = http_requirements(restricted or {})
        self.route = InferRoute(server, header_forwarder(header_forward_pattern))
        inference = self.requirements.get("inference")
        if inference is not None:
            # Shadows the method for this instance only: unrestricted servers keep the
            # plain hot path.
            guarded = functools.partial(self._restricted_infer, inference)
            self._infer = guarded  # type: ignore[method-assign]
        self.router = Starlette(routes=self._routes(),
                                exception_handlers={HTTPException: _http_exception})

    @property
    def fast_infer(self) -> InferRoute | None:
        """The route naiad's uvicorn protocol may answer plain inferences through
        (:mod:`.protocol`); None when inference is a restricted API (its header is checked
        here)."""
        return None if "inference" in self.requirements else self.route

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and \
                scope["path"].endswith("/infer"):
            names = split_infer_path(scope["path"])
            if names is not None:
                if self.server.tracer is None:
                    await self._infer(scope, receive, send, *names)
                else:  # protocol timestamps and traceparent for the request's trace
                    await traced_http_call(self._infer, scope, receive, send, *names)
                return
        await self.router(scope, receive, send)

    # --- inference (hot path) -----------------------------------------------------------

    async def _restricted_infer(self, requirement: HTTPRequirement, scope: dict, receive: Any,
                                send: Any, model_name: str, version: str) -> None:
        if requirement.met_by(scope["headers"]):
            await HTTPFrontend._infer(self, scope, receive, send, model_name, version)
        else:
            await _refuse(send, requirement)

    async def _infer(self, scope: dict, receive: Any, send: Any, model_name: str,
                     version: str) -> None:
        route = self.route
        headers = scope["headers"]
        heads = infer_headers(headers)
        try:
            model = route.find(model_name, version)
            body = await read_body(receive, heads.content_length, self.limit)
            request, future = route.submit(model, heads, body, headers)
            if model.scheduler.holds_requests:
                if not await _wait_while_connected(route.waiter(), future, receive):
                    return  # the client hung up; there is nobody to answer
                reply = route.outcome(model, request, future, heads.accept)
            else:
                reply = route.answer(model, request, await route.waiter().wait(future),
                                     heads.accept)
        except Exception as exc:  # never let a request kill the connection silently
            reply = failure(model_name, exc)
        await _send(send, *reply)

    # --- everything else ----------------------------------------------------------------

    def _routes(self) -> list[Route]:
        get, post = None, ["POST"]  # None: Starlette's default, GET and HEAD
        get_or_post = ["GET", "POST"]
        # ASGI applications: Starlette passes them the scope (path_params included) as is.
        generate = GenerateEndpoint(self.server, streaming=False)
        generate_stream = GenerateEndpoint(self.server, streaming=True)
        # (path, endpoint, methods, API group as tritonserver groups them)
        table = [
            ("/v2/health/live", self.live, get, "health"),
            ("/v2/health/ready", self.ready, get, "health"),
            ("/v2", self.metadata, get, "metadata"),
            (OPENAPI_PATH, openapi_document, get, "metadata"),
            ("/v2/models/stats", self.stats, get, "statistics"),
            ("/v2/models/{model}", self.model_metadata, get, "metadata"),
            ("/v2/models/{model}/versions/{version}", self.model_metadata, get, "metadata"),
            ("/v2/models/{model}/ready", self.model_ready, get, "health"),
            ("/v2/models/{model}/versions/{version}/ready", self.model_ready, get, "health"),
            ("/v2/models/{model}/config", self.model_config, get, "model-config"),
            ("/v2/models/{model}/versions/{version}/config", self.model_config, get,
             "model-config"),
            ("/v2/models/{model}/stats", self.stats, get, "statistics"),
            ("/v2/models/{model}/versions/{version}/stats", self.stats, get, "statistics"),
            # POSTs never get here (__call__ takes them); other methods get Starlette's 405.
            ("/v2/models/{model}/infer", _unreachable, post, "inference"),
            ("/v2/models/{model}/versions/{version}/infer", _unreachable, post, "inference"),
            # Triton's generate extension (its own module); in tritonserver's inference group.
            ("/v2/models/{model}/generate", generate, post, "inference"),
            ("/v2/models/{model}/versions/{version}/generate", generate, post, "inference"),
            ("/v2/models/{model}/generate_stream", generate_stream, post, "inference"),
            ("/v2/models/{model}/versions/{version}/generate_stream", generate_stream, post,
             "inference"),
            ("/v2/repository/index", self.repository_index, post, "model-repository"),
            ("/v2/repository/models/{model}/load", self.load, post, "model-repository"),
            ("/v2/repository/models/{model}/unload", self.unload, post, "model-repository"),
            ("/v2/systemsharedmemory/status", self.shm_status, get, "shared-memory"),
            ("/v2/systemsharedmemory/region/{region}/status", self.shm_status, get,
             "shared-memory"),
            ("/v2/systemsharedmemory/region/{region}/register", self.shm_register, post,
             "shared-memory"),
            ("/v2/systemsharedmemory/unregister", self.shm_unregister, post, "shared-memory"),
            ("/v2/systemsharedmemory/region/{region}/unregister", self.shm_unregister, post,
             "shared-memory"),
            ("/v2/cudasharedmemory/status", self.cuda_shm_status, get, "shared-memory"),
            ("/v2/cudasharedmemory/region/{region}/status", self.cuda_shm_status, get,
             "shared-memory"),
            ("/v2/cudasharedmemory/region/{region}/register", self.cuda_shm_register, post,
             "shared-memory"),
            ("/v2/cudasharedmemory/unregister", self.cuda_shm_unregister, post,
             "shared-memory"),
            ("/v2/cudasharedmemory/region/{region}/unregister", self.cuda_shm_unregister, post,
             "shared-memory"),
            ("/v2/logging", self.log_settings, get_or_post, "logging"),
            ("/v2/trace/setting", self.trace_settings, get_or_post, "trace"),
            ("/v2/models/{model}/trace/setting", self.trace_settings, get_or_post, "trace"),
        ]
        routes = []
        for path, endpoint, methods, group in table:
            requirement = self.requirements.get(group)
            control = group in CONTROL_GROUPS and methods is not None and "POST" in methods
            if requirement is None and not control:
                routes.append(Route(path, endpoint, methods=methods))
            else:
                routes.append(_CheckedRoute(path, endpoint, methods=methods,
                                            requirement=requirement, control=control))
        return routes

    async def live(self, request: Request) -> Response:
        return Response(status_code=200 if self.server.live else 400)

    async def ready(self, request: Request) -> Response:
        # Not ready is 400 as in Triton; 503 while the start-up models still load (naiad
        # answers then, Triton is unreachable), so a probe can tell the two apart.
        server = self.server
        return Response(status_code=200 if server.ready else 400 if server.started else 503)

    async def metadata(self, request: Request) -> Response:
        return _json(self.server.server_metadata())

    async def model_metadata(self, request: Request) -> Response:
        p = request.path_params
        try:
            return _json(self.server.model_metadata(p["model"], p.get("version", "")))
        except InferenceServerError as exc:
            return _error(exc)

    async def model_ready(self, request: Request) -> Response:
        p = request.path_params
        if self.server.models.is_ready(p["model"], p.get("version", "")):
            return Response(status_code=200)
        which = f"model '{p['model']}'" + (f" version {p['version']}" if "version" in p else "")
        return Response(error_body(f"Model version not ready: {which} is not ready"), 400,
                        media_type="application/json")

    async def model_config(self, request: Request) -> Response:
        p = request.path_params
        try:
            return _json(self.server.model_config(p["model"], p.get("version", "")))
        except InferenceServerError as exc:
            return _error(exc)

    async def stats(self, request: Request) -> Response:
        p = request.path_params
        try:
            stats = self.server.statistics(p.get("model", ""), p.get("version", ""))
        except InferenceServerError as exc:
            return _error(exc)
        return _json({"model_stats": stats})

    async def _json_body(self, request: Request) -> dict:
        body = await read_body(request.receive, None, self.limit)
        if not body:
            return {}
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise invalid_arg(f"the request body is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise invalid_arg("the request body must be a JSON object")
        return doc

    async def repository_index(self, request: Request) -> Response:
        try:
            doc = await self._json_body(request)
            ready = doc.get("ready", False)
            if type(ready) is not bool:  # bool("maybe") would be True
                raise invalid_arg(f"repository index: 'ready' must be true or false, got "
                                  f"{orjson.dumps(ready).decode()[:40]}")
        except InferenceServerError as exc:
            return _error(exc)
        return _json(self.server.models.index(ready_only=ready))

    async def load(self, request: Request) -> Response:
        name = request.path_params["model"]
        try:
            doc = await self._json_body(request)
            params = doc.get("parameters")
            if params is None:  # absent or null; [] is not "no parameters"
                params = {}
            elif not isinstance(params, dict):
                raise invalid_arg(f"failed to load '{name}': 'parameters' must be a JSON "
                                  f"object")
            config = params.get("config")
            if config is not None and not isinstance(config, str):
                raise invalid_arg(f"failed to load '{name}': the 'config' parameter must be "
                                  f"a string holding the JSON model configuration")
            sent = file_parameters(params)
            # base64, decoded off the loop: a model may be tens of megabytes
            files = await asyncio.to_thread(_decode_files, name, sent) if sent else None
            await self.server.load_model(name, config, files)
        except InferenceServerError as exc:
            return _error(exc)
        return Response(status_code=200)

    async def unload(self, request: Request) -> Response:
        try:
            params = (await self._json_body(request)).get("parameters") or {}
            dependents = params.get("unload_dependents", False) if isinstance(params, dict) \
                else None
            if type(dependents) is not bool:  # Triton's parameter is a JSON boolean
                raise invalid_arg("unload: 'parameters' must be an object whose "
                                  "'unload_dependents' is true or false")
            await self.server.unload_model(request.path_params["model"], dependents)
        except InferenceServerError as exc:
            return _error(exc)
        return Response(status_code=200)

    async def log_settings(self, request: Request) -> Response:
        """The logging extension: the log switches, changed by a POST that names some."""
        try:
            if request.method == "POST":
                logs.current.update(await self._json_body(request))
        except InferenceServerError as exc:
            return _error(exc)
        return _json(logs.current.as_dict())

    async def trace_settings(self, request: Request) -> Response:
        """The trace extension, server-wide or per model: the settings, changed first by a
        POST that names some (naiad.tracing.manager)."""
        try:
            changes = await self._json_body(request) if request.method == "POST" else {}
            settings = self.server.trace_settings(request.path_params.get("model", ""),
                                                  changes)
        except InferenceServerError as exc:
            return _error(exc)
        # As tritonserver writes them: trace_level a list, every other setting a string,
        # one key per value (the opentelemetry "resource" may repeat: a duplicate key).
        fields = []
        for key, values in settings:
            name = orjson.dumps(key) + b":"
            if key == "trace_level":
                fields.append(name + orjson.dumps(values))
            else:
                fields += [name + orjson.dumps(value) for value in values]
        return Response(b"{" + b",".join(fields) + b"}", 200, media_type="application/json")

    async def shm_status(self, request: Request) -> Response:
        try:
            return _json(self.server.shared_memory.status(request.path_params.get("region", "")))
        except InferenceServerError as exc:
            return _error(exc)

    async def shm_register(self, request: Request) -> Response:
        region = request.path_params["region"]
        try:
            doc = await self._json_body(request)
            key, offset, size = doc.get("key"), doc.get("offset", 0), doc.get("byte_size")
            if type(key) is not str or type(offset) is not int or \
                    type(size) is not int:  # true is an int to isinstance
                raise invalid_arg(f"registering shared memory region '{region}' needs 'key' "
                                  f"(string), 'offset' and 'byte_size' (integers)")
            self.server.shared_memory.register(region, key, offset, size)
        except InferenceServerError as exc:
            return _error(exc)
        return _done()

    async def shm_unregister(self, request: Request) -> Response:
        self.server.shared_memory.unregister(request.path_params.get("region", ""))
        return _done()

    # CUDA shared memory: naiad holds no CUDA region (naiad.shm explains).

    async def cuda_shm_status(self, request: Request) -> Response:
        try:
            return _json(cuda_status(request.path_params.get("region", "")))
        except InferenceServerError as exc:
            return _error(exc)

    async def cuda_shm_register(self, request: Request) -> Response:
        try:
            cuda_register(request.path_params["region"])
        except InferenceServerError as exc:
            return _error(exc)
        return _done()

    async def cuda_shm_unregister(self, request: Request) -> Response:
        cuda_unregister(request.path_params.get("region", ""))
        return _done()


async def _unreachable(request: Request) -> Response:  # pragma: no cover
    raise AssertionError("POST .../infer is answered by HTTPFrontend.__call__")


async def _refuse(send: Any, requirement: HTTPRequirement) -> None:
    """The answer tritonserver gives a request to a restricted API without its header."""
    await _send(send, HTTP_REFUSAL_STATUS, requirement.refusal, None, None)


async def _send(send: Any, status: int, body: bytes, json_length: int | None = None,
                encoding: str | None = None) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    if json_length is None:
        headers.append((b"content-type", JSON))
    else:
        headers.append((b"content-type", b"application/octet-stream"))
        headers.append((HEADER_LENGTH_BYTES, str(json_length).encode()))
    if encoding is not None:
        headers.append((b"content-encoding", encoding.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _decode_files(model: str, files: dict[str, object]) -> dict[str, bytes]:
    """The ``file:`` parameters of an HTTP load request: base64 strings, decoded strictly
    (an invalid one is refused naming its parameter, rather than loading garbage)."""
    decoded = {}
    for key, value in files.items():
        if not isinstance(value, str):
            raise invalid_arg(f"failed to load '{model}': load parameter {key!r} must be a "
                              f"string holding the file's content in base64")
        try:
            decoded[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise invalid_arg(f"failed to load '{model}': load parameter {key!r} is not "
                              f"valid base64: {exc}") from None
    return decoded

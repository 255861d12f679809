"""The server's models as models call them: :class:`naiad.types.InferenceClient` for BLS.

A model reaches other models through ``ModelContext.server`` (a Python model's
``pb_utils.InferenceRequest.exec``, ``is_model_ready``, ``load_model``...). Its calls take
the request path every request takes (:meth:`InferenceServer.stream`), admitted while the
server drains since they are part of a request in flight; model control runs on the
server's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from naiad.errors import InferenceServerError, unavailable, unsupported
from naiad.futures import LightFuture
from naiad.types import InferenceClient, InferenceRequest, InferenceResponse, ResponseCallback

if TYPE_CHECKING:
    from naiad.models.manager import ModelManager
    from naiad.models.records import ModelVersion


class Server(Protocol):
    """What models' calls need of :class:`naiad.server.InferenceServer`, which makes this
    module's :class:`ServerModels` (a protocol: the server imports this module, not the
    other way round)."""

    loop: asyncio.AbstractEventLoop | None
    models: ModelManager

    def model(self, name: str, version: str = "") -> ModelVersion: ...

    def stream(self, model: ModelVersion, request: InferenceRequest,
               on_response: ResponseCallback, internal: bool = False
               ) -> Future[InferenceResponse]: ...

    async def load_model(self, name: str, config: str | None = None,
                         files: dict[str, bytes] | None = None) -> None: ...

    async def unload_model(self, name: str) -> None: ...


class ServerModels(InferenceClient):
    """The server's models as models call them (``ModelContext.server``, for BLS)."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def _model(self, request: InferenceRequest) -> ModelVersion:
        version = request.model_version
        return self.server.model(request.model_name, str(version) if version > 0 else "")

    def infer(self, request: InferenceRequest) -> Future[InferenceResponse]:
        future: Future[InferenceResponse] = LightFuture(running=True)

        def collect(response: InferenceResponse | None, final: bool) -> None:
            if final:
                future.set_result(response or InferenceResponse())

        try:
            model = self._model(request)
            if model.decoupled:
                # Triton's message: its callers here are models' BLS calls.
                raise unsupported(
                    f"Model '{model.name}' is using the decoupled. The current BLS request "
                    f"call doesn't support models using the decoupled transaction policy. "
                    f"Please use 'decoupled=True' argument to the 'exec' or 'async_exec' "
                    f"calls for decoupled models.'")
            self._start(model, request, collect)
        except InferenceServerError as exc:
            future.set_result(InferenceResponse(error=exc))
        return future

    def stream(self, request: InferenceRequest, on_response: ResponseCallback) -> None:
        try:
            self._start(self._model(request), request, on_response)
        except InferenceServerError as exc:
            on_response(InferenceResponse(error=exc), True)

    def _start(self, model: ModelVersion, request: InferenceRequest,
               on_response: ResponseCallback) -> None:
        """Run a model's call. One made with the trace of the request it serves (the caller
        set ``request.trace`` to it: Triton's ``InferenceRequest(trace=request.trace())``)
        is traced as that trace's child."""
        parent = request.trace
        trace = request.trace = None if parent is None else parent.child(model, request)
        try:
            future = self.server.stream(model, request, on_response, internal=True)
        except BaseException:
            if trace is not None:
                trace.abandon()
            raise
        if trace is not None:
            trace.watch(request, future)

    def is_ready(self, name: str, version: int = -1) -> bool:
        return self.server.models.is_ready(name, str(version) if version > 0 else "")

    def load(self, name: str, config: str = "", files: dict[str, bytes] | None = None
             ) -> Future[None]:
        return self._on_loop(self.server.load_model(name, config or None, files))

    def unload(self, name: str, unload_dependents: bool = False) -> Future[None]:
        return self._on_loop(self.server.unload_model(name, unload_dependents))

    def _on_loop(self, work: Coroutine[Any, Any, None]) -> Future[None]:
        loop = self.server.loop
        if loop is None:
            work.close()
            future: Future[None] = Future()
            future.set_exception(unavailable("the server is not running"))
            return future
        return asyncio.run_coroutine_threadsafe(work, loop)

"""Triton's ``inference.GRPCInferenceService`` over the protocol-free core.

The servicer's methods are called on the gRPC server's threads (see :mod:`.listener`). A
``ModelInfer`` stays there: :meth:`InferenceServer.infer` hands the request to the model's
scheduler and the handler thread waits on the future it returns. The request carries a
:class:`~naiad.types.Cancellation` that a client who cancels, or whose deadline passes,
cancels: a queued request is withdrawn, a running model can see it. A decoupled model is
refused there (UNIMPLEMENTED, as tritonserver): its responses need ``ModelStreamInfer``
(:mod:`.stream`), which serves decoupled and ordinary models alike. Every other RPC is a
coroutine run on the event loop (:func:`_on_loop`), which owns the model repository.

Every RPC turns an :class:`InferenceServerError` into the gRPC status that
:func:`naiad.errors.grpc_status` maps it to, with the error's message (bounded so that
every client receives it: :mod:`.status`); anything else becomes INTERNAL and the server
keeps serving. In a stream, a failed request puts its
message in ``error_message`` and the stream goes on, as tritonserver does.

Endpoint restrictions (``--grpc-restricted-protocol``) are resolved when the servicer is
built: each RPC of a restricted API group is replaced, on that instance, by a guard that
checks the call's metadata first; the others are left untouched.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2, service_pb2_grpc

from naiad import logs
from naiad.classification import classify_response
from naiad.errors import InferenceServerError, grpc_status, invalid_arg, unsupported
from naiad.frontends.forwarding import header_forwarder
from naiad.frontends.grpc.codec import (
    ResponseEncoder,
    ShmTargets,
    decode_request,
    params_to_dict,
)
from naiad.frontends.grpc.status import abort
from naiad.frontends.grpc.stream import (
    GRPC_ERROR_HEADER,
    OpenStreams,
    Stream,
    StreamSettings,
    call_ender,
)
from naiad.frontends.restrictions import GRPCRequirement, Restriction, grpc_requirements
from naiad.frontends.stream_buffer import budget_of
from naiad.models.staging import file_parameters
from naiad.server import answer
from naiad.shm import cuda_register, cuda_status, cuda_unregister
from naiad.tracing.exchange import grpc_exchange, grpc_handled
from naiad.types import Cancellation, InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from naiad.models.records import ModelVersion
    from naiad.server import InferenceServer

log = logging.getLogger("naiad.grpc")

pb = service_pb2
_INTERNAL = grpc.StatusCode.INTERNAL
# tritonserver's status for a call of a restricted API without the header (2.51).
_REFUSED = grpc.StatusCode.UNAVAILABLE
# tritonserver's answer (UNIMPLEMENTED) to ModelInfer on a decoupled model (2.51).
_DECOUPLED_UNARY = "ModelInfer RPC doesn't support models with decoupled transaction policy"

F = TypeVar("F", bound=Callable[..., Any])


def _on_loop(method: F) -> F:
    """Run a (non hot path) RPC, a coroutine, on the event loop and wait for it; map its
    errors to gRPC statuses."""

    @functools.wraps(method)
    def wrapper(self: InferenceServicer, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return asyncio.run_coroutine_threadsafe(method(self, request, context),
                                                    self.loop).result()
        except InferenceServerError as err:
            abort(context, grpc_status(err), err.message)
        except Exception as exc:
            log.exception("gRPC %s failed", method.__name__)
            abort(context, _INTERNAL, f"{method.__name__}: internal error: "
                                      f"{type(exc).__name__}: {exc}")

    return wrapper  # type: ignore[return-value]


def _guard(method: Callable[..., Any], requirement: GRPCRequirement) -> Callable[..., Any]:
    """``method`` (a bound RPC), refusing calls without the restricted header."""

    def guarded(request: Any, context: grpc.ServicerContext) -> Any:
        if not requirement.met_by(context.invocation_metadata()):
            context.abort(_REFUSED, requirement.refusal)
        return method(request, context)

    return guarded


def _guard_stream(method: Callable[..., Iterator[Any]],
                  requirement: GRPCRequirement) -> Callable[..., Iterator[Any]]:
    """The same for a streaming RPC: the handler must stay a generator."""

    def guarded(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        if not requirement.met_by(context.invocation_metadata()):
            context.abort(_REFUSED, requirement.refusal)
        yield from method(requests, context)

    return guarded


def infer_failure(model_name: str, exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status a ``ModelInfer`` that failed with ``exc`` ends with: the error's own, or
    INTERNAL naming the model for an unexpected exception (logged with its traceback)."""
    if isinstance(exc, InferenceServerError):
        return grpc_status(exc), exc.message
    if isinstance(exc, CancelledError):  # the client gave up while the request was queued
        return grpc.StatusCode.CANCELLED, f"model '{model_name}': the request was cancelled"
    log.error("gRPC inference on model '%s' failed", model_name, exc_info=exc)
    return _INTERNAL, f"model '{model_name}': internal error: {type(exc).__name__}: {exc}"


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """The servicer: decode, call :class:`InferenceServer`, encode. ``loop`` is the event
    loop the server runs on.

    ``restricted`` maps API groups to the header their calls must carry
    (``--grpc-restricted-protocol``, the metadata key is ``triton-grpc-protocol-<key>``);
    metadata whose keys match ``header_forward_pattern`` become parameters of inference
    requests (``--grpc-header-forward-pattern``). Both are off by default.
    """

    def __init__(self, server: InferenceServer, loop: asyncio.AbstractEventLoop, *,
                 restricted: dict[str, Restriction] | None = None,
                 header_forward_pattern: str = "",
                 streams: StreamSettings | None = None) -> None:
        self.server = server
        # --grpc-max-streams, --grpc-stream-idle-timeout (.stream)
        self.stream_settings = streams or StreamSettings()
        self.open_streams = OpenStreams(self.stream_settings.max_streams)
        self.response_budget = budget_of(server)
        self.loop = loop
        self.shm = server.shared_memory
        self.max_input_size = server.options.max_input_size
        self.encoder = ResponseEncoder(server.options.max_response_size)
        self.forwarder = header_forwarder(header_forward_pattern)
        # The server looks each handler up on the instance (listener.method_handlers), so
        # an instance attribute replaces the RPC for this servicer only.
        for rpc, requirement in grpc_requirements(restricted or {}).items():
            guard = _guard_stream if rpc == "ModelStreamInfer" else _guard
            setattr(self, rpc, guard(getattr(self, rpc), requirement))

    # --- inference (hot path) -----------------------------------------------------------

    def decode_infer(self, request: Any, metadata: Any
                     ) -> tuple[ModelVersion, InferenceRequest, ShmTargets | None]:
        """The model ``request`` (a ``ModelInferRequest``) names and the request it holds,
        which carries a :class:`~naiad.types.Cancellation`. A bad request raises."""
        model = self.server.model(request.model_name, request.model_version)
        if model.decoupled:
            raise unsupported(f"{_DECOUPLED_UNARY} (model '{model.name}' is decoupled: "
                              f"use ModelStreamInfer)")
        infer_request, to_shm = decode_request(model.name, model.version, request,
                                               self.shm, self.max_input_size)
        if self.forwarder is not None:
            infer_request.parameters.update(self.forwarder.from_grpc(metadata))
        infer_request.cancellation = Cancellation()
        return model, infer_request, to_shm

    def submit_infer(self, request: Any, metadata: Any
                     ) -> tuple[ModelVersion, InferenceRequest, ShmTargets | None,
                                Future[InferenceResponse]]:
        """Decode ``request`` (a ``ModelInferRequest``) and hand it to its model; the
        request carries a :class:`~naiad.types.Cancellation`. A bad request raises."""
        model, infer_request, to_shm = self.decode_infer(request, metadata)
        return model, infer_request, to_shm, self.server.infer(model, infer_request)

    def encode_infer(self, model: ModelVersion, request: InferenceRequest,
                     to_shm: ShmTargets | None, response: InferenceResponse) -> bytes:
        """The serialized ``ModelInferResponse`` answering ``request``."""
        response = classify_response(model, request, answer(request, response))
        return self.encoder.encode(request, response, to_shm)

    def ModelInfer(self, request: Any, context: grpc.ServicerContext) -> bytes:
        # Returns the serialized ModelInferResponse (see listener.method_handlers).
        server = self.server
        answered = False
        # While tracing is on: protocol timestamps and traceparent for the request's trace.
        exchange = None if server.tracer is None else grpc_exchange(context)
        try:
            model, infer_request, to_shm, future = self.submit_infer(
                request, context.invocation_metadata())
            cancellation = infer_request.cancellation

            def call_ended() -> None:
                # gRPC runs this on cancel or deadline, and when the call is over: only
                # the first two mean the client gave up on a request still running.
                if not answered:
                    cancellation.cancel()

            if not context.add_callback(call_ended):  # the call is over already
                cancellation.cancel()
            return self.encode_infer(model, infer_request, to_shm, future.result())
        except Exception as exc:
            abort(context, *infer_failure(request.model_name, exc))
        finally:
            answered = True
            if exchange is not None:
                grpc_handled(exchange, context)
        raise AssertionError("unreachable: context.abort raises")

    def ModelStreamInfer(self, request_iterator: Iterator[Any],
                         context: grpc.ServicerContext) -> Iterator[bytes]:
        # Yields serialized ModelStreamInferResponses (see .stream): a reader thread takes
        # requests off the stream and submits each, this generator sends their responses.
        # The stream's metadata comes once, with the call: every request of it gets it.
        # Each open stream holds a thread of the pool: at most --grpc-max-streams of them.
        if not self.open_streams.enter():
            abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, self.open_streams.refusal)
        try:
            forwarded = (None if self.forwarder is None
                         else self.forwarder.from_grpc(context.invocation_metadata()))
            stream = Stream(self.server, self.encoder, forwarded,
                            idle_timeout_s=self.stream_settings.idle_timeout_s,
                            budget=self.response_budget, end_call=call_ender(context))
            stream.grpc_error = any(
                key == GRPC_ERROR_HEADER and str(value).lower() == "true"
                for key, value in context.invocation_metadata())
            if not context.add_callback(stream.call_ended):
                stream.call_ended()
                return  # the call is over already
            threading.Thread(target=stream.read, args=(request_iterator,),
                             name="naiad-grpc-stream", daemon=True).start()
            yield from stream.responses()
            if stream.failure is not None:  # the stream ended itself (idle, overflow, error)
                abort(context, *stream.failure)
        finally:
            self.open_streams.leave()

    # --- health and metadata ------------------------------------------------------------

    @_on_loop
    async def ServerLive(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.ServerLiveResponse(live=self.server.live)

    @_on_loop
    async def ServerReady(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.ServerReadyResponse(ready=self.server.ready)

    @_on_loop
    async def ModelReady(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.ModelReadyResponse(
            ready=self.server.models.is_ready(request.name, request.version))

    @_on_loop
    async def ServerMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        meta = self.server.server_metadata()
        return pb.ServerMetadataResponse(name=meta["name"], version=meta["version"],
                                         extensions=meta["extensions"])

    @_on_loop
    async def ModelMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        meta = self.server.model_metadata(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta["name"], versions=meta["versions"], platform=meta["platform"],
            inputs=[tensor(**t) for t in meta["inputs"]],
            outputs=[tensor(**t) for t in meta["outputs"]])

    @_on_loop
    async def ModelConfig(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.ModelConfigResponse(
            config=self.server.model(request.name, request.version).config)

    @_on_loop
    async def ModelStatistics(self, request: Any, context: grpc.ServicerContext) -> Any:
        stats = self.server.statistics(request.name, request.version)
        return json_format.ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse(),
                                     ignore_unknown_fields=True)

    # --- model repository ---------------------------------------------------------------

    @_on_loop
    async def RepositoryIndex(self, request: Any, context: grpc.ServicerContext) -> Any:
        entry = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(
            models=[entry(**e) for e in self.server.models.index(ready_only=request.ready)])

    @_on_loop
    async def RepositoryModelLoad(self, request: Any,
                                  context: grpc.ServicerContext) -> Any:
        params = params_to_dict(request.parameters)
        config = params.pop("config", None)
        if config is not None and not isinstance(config, str):
            raise invalid_arg(f"failed to load '{request.model_name}': the 'config' "
                              f"parameter must be a string_param holding the JSON "
                              f"model configuration")
        files: dict[str, bytes] = {}
        for key, value in file_parameters(params).items():
            if not isinstance(value, bytes):  # Triton's words, and the model's name
                raise invalid_arg(f"invalid value type for load parameter {key!r}, expected "
                                  f"bytes_param (model '{request.model_name}')")
            files[key] = value
        await self.server.load_model(request.model_name, config, files or None)
        return pb.RepositoryModelLoadResponse()

    @_on_loop
    async def RepositoryModelUnload(self, request: Any,
                                    context: grpc.ServicerContext) -> Any:
        dependents = request.parameters.get("unload_dependents")
        await self.server.unload_model(request.model_name,
                                       dependents is not None and dependents.bool_param)
        return pb.RepositoryModelUnloadResponse()

    # --- shared memory ------------------------------------------------------------------

    @_on_loop
    async def SystemSharedMemoryStatus(self, request: Any,
                                       context: grpc.ServicerContext) -> Any:
        region = pb.SystemSharedMemoryStatusResponse.RegionStatus
        return pb.SystemSharedMemoryStatusResponse(regions={
            r["name"]: region(**r) for r in self.shm.status(request.name)})

    @_on_loop
    async def SystemSharedMemoryRegister(self, request: Any,
                                         context: grpc.ServicerContext) -> Any:
        self.shm.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @_on_loop
    async def SystemSharedMemoryUnregister(self, request: Any,
                                           context: grpc.ServicerContext) -> Any:
        self.shm.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    # CUDA shared memory: naiad holds no CUDA region (naiad.shm explains).

    @_on_loop
    async def CudaSharedMemoryStatus(self, request: Any,
                                     context: grpc.ServicerContext) -> Any:
        cuda_status(request.name)  # no region: empty, or NOT_FOUND for a named one
        return pb.CudaSharedMemoryStatusResponse()

    @_on_loop
    async def CudaSharedMemoryRegister(self, request: Any,
                                       context: grpc.ServicerContext) -> Any:
        cuda_register(request.name)
        return pb.CudaSharedMemoryRegisterResponse()

    @_on_loop
    async def CudaSharedMemoryUnregister(self, request: Any,
                                         context: grpc.ServicerContext) -> Any:
        cuda_unregister(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # --- trace and log settings ---------------------------------------------------------

    @_on_loop
    async def TraceSetting(self, request: Any, context: grpc.ServicerContext) -> Any:
        settings = self.server.trace_settings(
            request.model_name, {key: list(value.value) for key, value in request.settings.items()})
        response = pb.TraceSettingResponse()
        for key, values in settings:
            response.settings[key].value.extend(values)
        return response

    @_on_loop
    async def LogSettings(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.settings:
            logs.current.update({key: getattr(value, value.WhichOneof("parameter_choice"))
                                 for key, value in request.settings.items()
                                 if value.WhichOneof("parameter_choice")})
        response = pb.LogSettingsResponse()
        for key, value in logs.current.as_dict().items():
            setting = response.settings[key]
            if isinstance(value, bool):
                setting.bool_param = value
            elif isinstance(value, int):
                setting.uint32_param = value
            else:
                setting.string_param = value
        return response


__all__ = ["InferenceServicer"]

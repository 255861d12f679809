"""Triton's ``inference.GRPCInferenceService`` on grpc.aio, over the protocol-free core.

Every RPC turns an :class:`InferenceServerError` into the gRPC status that
:func:`naiad.errors.grpc_status` maps it to, with the error's message; anything else
becomes INTERNAL and the server keeps serving. ``ModelStreamInfer`` answers each request of
the stream in order with a ``ModelStreamInferResponse``; a failed request puts its message
in ``error_message`` and the stream goes on, as tritonserver does.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from google.protobuf import json_format
from tritonclient.grpc import service_pb2, service_pb2_grpc

from naiad.errors import InferenceServerError, grpc_status, invalid_arg, unsupported
from naiad.frontends.grpc.codec import (
    ResponseEncoder,
    decode_request,
    params_to_dict,
    stream_error,
    stream_response,
)

if TYPE_CHECKING:
    from naiad.server import InferenceServer

log = logging.getLogger("naiad.grpc")

pb = service_pb2
_INTERNAL = grpc.StatusCode.INTERNAL
_NO_CUDA = "CUDA shared memory is not supported: this server has no GPU"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def _rpc(method: F) -> F:
    """Map errors of a (non hot path) RPC to gRPC statuses."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except InferenceServerError as err:
            await context.abort(grpc_status(err), err.message)
        except Exception as exc:
            log.exception("gRPC %s failed", method.__name__)
            await context.abort(_INTERNAL, f"{method.__name__}: internal error: "
                                           f"{type(exc).__name__}: {exc}")

    return wrapper  # type: ignore[return-value]


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """The servicer: decode, call :class:`InferenceServer`, encode."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        self.shm = server.shared_memory
        self.encoder = ResponseEncoder(server.shared_memory)

    # --- inference (hot path) -----------------------------------------------------------

    async def ModelInfer(self, request: Any, context: grpc.aio.ServicerContext) -> bytes:
        # Returns the serialized ModelInferResponse (see _method_handlers).
        server = self.server
        try:
            model = server.model(request.model_name, request.model_version)
            infer_request, to_shm = decode_request(model.name, model.version, request,
                                                   self.shm)
            response = await server.infer(model, infer_request)
            return self.encoder.encode(infer_request, response, to_shm)
        except InferenceServerError as err:
            await context.abort(grpc_status(err), err.message)
        except Exception as exc:  # a bug must not take the server down
            log.exception("gRPC inference on model '%s' failed", request.model_name)
            await context.abort(_INTERNAL, f"model '{request.model_name}': internal error: "
                                           f"{type(exc).__name__}: {exc}")

    async def _stream_one(self, request: Any) -> bytes:
        server = self.server
        try:
            model = server.model(request.model_name, request.model_version)
            infer_request, to_shm = decode_request(model.name, model.version, request,
                                                   self.shm)
            response = await server.infer(model, infer_request)
            return stream_response(self.encoder.encode(infer_request, response, to_shm))
        except InferenceServerError as err:
            message = err.message
        except Exception as exc:
            log.exception("gRPC stream inference on model '%s' failed", request.model_name)
            message = (f"model '{request.model_name}': internal error: "
                       f"{type(exc).__name__}: {exc}")
        return stream_error(message, request.id)

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[Any],
                               context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        # Yields serialized ModelStreamInferResponses. Requests of one stream run
        # concurrently; responses go out in request order.
        pending: asyncio.Queue[asyncio.Future[bytes] | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for request in request_iterator:
                    pending.put_nowait(asyncio.ensure_future(self._stream_one(request)))
            finally:
                pending.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                task = await pending.get()
                if task is None:
                    break
                yield await task
            await reader  # surfaces a failed read (e.g. the client cancelled)
        finally:
            reader.cancel()
            while not pending.empty():
                task = pending.get_nowait()
                if task is not None:
                    task.cancel()

    # --- health and metadata ------------------------------------------------------------

    async def ServerLive(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerLiveResponse(live=self.server.live)

    async def ServerReady(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerReadyResponse(ready=self.server.ready)

    async def ModelReady(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ModelReadyResponse(
            ready=self.server.models.is_ready(request.name, request.version))

    @_rpc
    async def ServerMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        meta = self.server.server_metadata()
        return pb.ServerMetadataResponse(name=meta["name"], version=meta["version"],
                                         extensions=meta["extensions"])

    @_rpc
    async def ModelMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        meta = self.server.model_metadata(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta["name"], versions=meta["versions"], platform=meta["platform"],
            inputs=[tensor(**t) for t in meta["inputs"]],
            outputs=[tensor(**t) for t in meta["outputs"]])

    @_rpc
    async def ModelConfig(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ModelConfigResponse(
            config=self.server.model(request.name, request.version).config)

    @_rpc
    async def ModelStatistics(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        stats = self.server.statistics(request.name, request.version)
        return json_format.ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse(),
                                     ignore_unknown_fields=True)

    # --- model repository ---------------------------------------------------------------

    @_rpc
    async def RepositoryIndex(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        entry = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(
            models=[entry(**e) for e in self.server.models.index(ready_only=request.ready)])

    @_rpc
    async def RepositoryModelLoad(self, request: Any,
                                  context: grpc.aio.ServicerContext) -> Any:
        params = params_to_dict(request.parameters)
        config = params.pop("config", None)
        if config is not None and not isinstance(config, str):
            raise invalid_arg(f"failed to load '{request.model_name}': the 'config' "
                              f"parameter must be a string_param holding the JSON "
                              f"model configuration")
        files = {k: v for k, v in params.items() if k.startswith("file:")}
        await self.server.load_model(request.model_name, config, files)
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def RepositoryModelUnload(self, request: Any,
                                    context: grpc.aio.ServicerContext) -> Any:
        await self.server.unload_model(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    # --- shared memory ------------------------------------------------------------------

    @_rpc
    async def SystemSharedMemoryStatus(self, request: Any,
                                       context: grpc.aio.ServicerContext) -> Any:
        region = pb.SystemSharedMemoryStatusResponse.RegionStatus
        return pb.SystemSharedMemoryStatusResponse(regions={
            r["name"]: region(**r) for r in self.shm.status(request.name)})

    @_rpc
    async def SystemSharedMemoryRegister(self, request: Any,
                                         context: grpc.aio.ServicerContext) -> Any:
        self.shm.register(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    @_rpc
    async def SystemSharedMemoryUnregister(self, request: Any,
                                           context: grpc.aio.ServicerContext) -> Any:
        self.shm.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @_rpc
    async def CudaSharedMemoryStatus(self, request: Any,
                                     context: grpc.aio.ServicerContext) -> Any:
        raise unsupported(_NO_CUDA)

    @_rpc
    async def CudaSharedMemoryRegister(self, request: Any,
                                       context: grpc.aio.ServicerContext) -> Any:
        raise unsupported(_NO_CUDA)

    @_rpc
    async def CudaSharedMemoryUnregister(self, request: Any,
                                         context: grpc.aio.ServicerContext) -> Any:
        raise unsupported(_NO_CUDA)

    # --- trace and log settings ---------------------------------------------------------

    @_rpc
    async def TraceSetting(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        # naiad does not trace requests: report tracing off, refuse to turn it on.
        if request.settings:
            raise unsupported("changing trace settings is not supported: naiad does not "
                              "trace requests (trace_level is OFF)")
        response = pb.TraceSettingResponse()
        for key, values in _TRACE_SETTINGS.items():
            response.settings[key].value.extend(values)
        return response

    @_rpc
    async def LogSettings(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if request.settings:
            raise unsupported("changing log settings at run time is not supported: use "
                              "the --log-verbose, --log-info, --log-warning and --log-error "
                              "flags")
        response = pb.LogSettingsResponse()
        for key, value in _log_settings().items():
            setting = response.settings[key]
            if isinstance(value, bool):
                setting.bool_param = value
            elif isinstance(value, int):
                setting.uint32_param = value
            else:
                setting.string_param = value
        return response


_TRACE_SETTINGS = {
    "trace_file": [],
    "trace_level": ["OFF"],
    "trace_rate": ["1000"],
    "trace_count": ["-1"],
    "log_frequency": ["0"],
    "trace_mode": ["triton"],
}


def _log_settings() -> dict[str, bool | int | str]:
    """Triton's log settings, read from the ``naiad`` logger's effective level."""
    level = logging.getLogger("naiad").getEffectiveLevel()
    return {
        "log_file": "",
        "log_info": level <= logging.INFO,
        "log_warning": level <= logging.WARNING,
        "log_error": level <= logging.ERROR,
        "log_verbose_level": 1 if level <= logging.DEBUG else 0,
        "log_format": "default",
    }


# --- the server ---------------------------------------------------------------------------


_SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
# The inference RPCs return serialized responses (ResponseEncoder): no serializer.
_PRESERIALIZED = frozenset({"ModelInfer", "ModelStreamInfer"})


def _method_handlers(servicer: InferenceServicer) -> dict[str, grpc.RpcMethodHandler]:
    """One handler per RPC of the service, as ``service_pb2_grpc`` registers them, except
    that the inference RPCs send the bytes the servicer already encoded."""
    handlers = {}
    for method in _SERVICE.methods:
        request_type = getattr(service_pb2, method.input_type.name)
        response_type = getattr(service_pb2, method.output_type.name)
        serializer = None if method.name in _PRESERIALIZED else response_type.SerializeToString
        if method.client_streaming and method.server_streaming:
            make = grpc.stream_stream_rpc_method_handler
        elif method.client_streaming or method.server_streaming:  # pragma: no cover
            raise TypeError(f"unexpected streaming kind of RPC {method.name}")
        else:
            make = grpc.unary_unary_rpc_method_handler
        handlers[method.name] = make(getattr(servicer, method.name),
                                     request_deserializer=request_type.FromString,
                                     response_serializer=serializer)
    return handlers


def _bind_address(address: str, port: int) -> str:
    if ":" in address and not address.startswith("["):
        return f"[{address}]:{port}"  # IPv6 literal
    return f"{address}:{port}"


async def start_grpc_server(server: InferenceServer, address: str, port: int) -> grpc.aio.Server:
    """Serve ``server`` over gRPC on ``address:port`` (insecure); started on return.

    Messages (both ways) may be as large as ``--http-max-input-size``; a larger request
    gets RESOURCE_EXHAUSTED from grpc. Stop it with ``await s.stop(grace)``.
    """
    limit = server.options.max_input_size
    grpc_server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        # Fail loudly when the port is taken instead of sharing it with another process.
        ("grpc.so_reuseport", 0),
        # Channelz traces every call for a debugging service naiad does not serve.
        # (grpc.minimal_stack would save more, but it drops the message size limit.)
        ("grpc.enable_channelz", 0),
    ])
    handlers = _method_handlers(InferenceServicer(server))
    grpc_server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),))
    grpc_server.add_registered_method_handlers(_SERVICE.full_name, handlers)
    target = _bind_address(address, port)
    try:
        bound = grpc_server.add_insecure_port(target)
    except RuntimeError as exc:
        raise OSError(f"gRPC: cannot listen on {target}: {exc}") from None
    if not bound:
        raise OSError(f"gRPC: cannot listen on {target}")
    await grpc_server.start()
    return grpc_server


__all__ = ["InferenceServicer", "start_grpc_server"]

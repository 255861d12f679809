"""PyTriton's clients (``pytriton.client``) over tritonclient, for naiad or any Triton:
ModelClient, DecoupledModelClient (gRPC streams), FuturesModelClient (a thread pool),
AsyncioModelClient and AsyncioDecoupledModelClient, with PyTriton's signatures, defaults
and errors."""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import tritonclient.grpc
import tritonclient.http
import tritonclient.utils

from naiad.pytriton.client.exceptions import (
    PyTritonClientClosedError,
    PyTritonClientInferenceServerError,
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientQueueFullError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from naiad.pytriton.client.utils import (
    TritonUrl,
    client_init_arguments,
    create_auth_headers,
    get_model_config,
    wait_for_model_ready,
    wait_for_server_ready,
)
from naiad.pytriton.client.warnings import NotSupportedTimeoutWarning
from naiad.pytriton.model_config.triton_model_config import TritonModelConfig

SECONDS = 1.0
DEFAULT_INIT_TIMEOUT_S = 300.0 * SECONDS        # PyTriton's _DEFAULT_SYNC_INIT_TIMEOUT_S
DEFAULT_INFERENCE_TIMEOUT_S = 60.0 * SECONDS    # PyTriton's DEFAULT_INFERENCE_TIMEOUT_S
STREAM_POLL_S = 1.0 * SECONDS                   # how often a stream reader checks close()
_Parameters = dict[str, str | int | bool] | None


def _verify_inputs_args(inputs: tuple[Any, ...], named_inputs: dict[str, Any]) -> None:
    if not inputs and not named_inputs:
        raise PyTritonClientValueError("Provide input data")
    if not bool(inputs) ^ bool(named_inputs):
        raise PyTritonClientValueError(
            "Use either positional either keyword method arguments convention")


def _verify_parameters(parameters_or_headers: _Parameters = None) -> None:
    if parameters_or_headers is None:
        return
    if not isinstance(parameters_or_headers, dict):
        raise PyTritonClientValueError("Parameters and headers must be a dictionary")
    for key, value in parameters_or_headers.items():
        if not isinstance(key, str):
            raise PyTritonClientValueError("Parameter/header key must be a string")
        if not isinstance(value, str | int | bool):
            raise PyTritonClientValueError(
                "Parameter/header value must be a string, integer or boolean")


def _timeout_error(timeout_s: float, exc: BaseException) -> PyTritonClientTimeoutError:
    return PyTritonClientTimeoutError(
        f"Timeout occurred during inference request. Timeout: {timeout_s} s Message: {exc}")


class ModelClient:
    """Synchronous client of one model: ``infer_sample`` (one sample, the batch axis added
    when the model batches) and ``infer_batch``; inputs positional (in the model's input
    order) or by name; outputs as a dict of numpy arrays."""

    def __init__(self, url: str, model_name: str, model_version: str | None = None, *,
                 lazy_init: bool = True, init_timeout_s: float | None = None,
                 inference_timeout_s: float | None = None,
                 model_config: TritonModelConfig | None = None,
                 ensure_model_is_ready: bool = True,
                 access_token: str | None = None) -> None:
        self._init_timeout_s = DEFAULT_INIT_TIMEOUT_S if init_timeout_s is None \
            else init_timeout_s
        self._inference_timeout_s = DEFAULT_INFERENCE_TIMEOUT_S if inference_timeout_s is None \
            else inference_timeout_s
        self._triton_url = TritonUrl.from_url(url)
        self._url = self._triton_url.without_scheme
        self._lib: Any = (tritonclient.grpc if self._triton_url.scheme == "grpc"
                          else tritonclient.http)
        self._general_client: Any = self._create_client()
        self._infer_client: Any = self._create_client()
        self._headers = (create_auth_headers(access_token, self._triton_url.scheme)
                         if access_token is not None else None)
        self._access_token = access_token
        self._model_name = model_name
        self._model_version = model_version
        self._request_ids = itertools.count(0)
        self._model_config = model_config
        self._model_ready: bool | None = None if model_config is None or ensure_model_is_ready \
            else True
        self._lazy_init = lazy_init
        if not lazy_init:
            self._wait_and_init_model_config(self._init_timeout_s)

    def _create_client(self) -> Any:
        return self._lib.InferenceServerClient(
            self._url, **client_init_arguments(self._triton_url, self._inference_timeout_s))

    def get_lib(self) -> Any:
        """The tritonclient module of the URL's scheme (``tritonclient.http`` or
        ``tritonclient.grpc``), as PyTriton's ``get_lib``."""
        return self._lib

    def create_client_from_url(self, url: str, network_timeout_s: float | None = None) -> Any:
        """A tritonclient ``InferenceServerClient`` for ``url``: over HTTP its network and
        connection timeouts are ``network_timeout_s`` (the client's inference timeout when
        None); over gRPC tritonclient takes no such timeout and it warns
        (NotSupportedTimeoutWarning), as PyTriton does. The caller closes it."""
        return _client_from_url(self, url, network_timeout_s, aio=False)

    @classmethod
    def from_existing_client(cls, existing_client: ModelClient) -> ModelClient:
        """A client of the same model with the same settings and the known model config."""
        return cls(url=existing_client._triton_url.with_scheme,
                   model_name=existing_client._model_name,
                   model_version=existing_client._model_version,
                   init_timeout_s=existing_client._init_timeout_s,
                   inference_timeout_s=existing_client._inference_timeout_s,
                   model_config=existing_client._model_config, ensure_model_is_ready=False,
                   access_token=existing_client._access_token)

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def load_model(self, config: str | None = None, files: dict[str, bytes] | None = None
                   ) -> None:
        """The repository load API for this model (``config`` JSON, ``file:`` contents)."""
        self._general_client.load_model(self._model_name, config=config, files=files,
                                        headers=self._headers)

    def unload_model(self) -> None:
        """The repository unload API for this model."""
        self._general_client.unload_model(self._model_name, headers=self._headers)

    def close(self) -> None:
        """Close the connections; the client cannot be used after."""
        for client in (self._general_client, self._infer_client):
            if client is not None:
                client.close()
        self._general_client = None
        self._infer_client = None

    def _require_open(self) -> Any:
        if self._general_client is None:
            raise PyTritonClientClosedError("ModelClient is closed")
        return self._general_client

    def wait_for_model(self, timeout_s: float) -> None:
        """Until the server and the model are ready (PyTritonClientTimeoutError after)."""
        wait_for_model_ready(self._require_open(), self._model_name, self._model_version,
                             timeout_s, self._headers)

    def wait_for_server(self, timeout_s: float) -> None:
        """Until the server is ready (PyTritonClientTimeoutError after ``timeout_s``)."""
        wait_for_server_ready(self._require_open(), timeout_s, self._headers)

    @property
    def is_batching_supported(self) -> bool:
        """Whether the model batches (``max_batch_size`` > 0)."""
        return self.model_config.max_batch_size > 0

    @property
    def model_config(self) -> TritonModelConfig:
        """The model's config, read from the server once (waiting for the model)."""
        if not self._model_config:
            self._model_config = get_model_config(self._require_open(), self._model_name,
                                                  self._model_version, self._init_timeout_s,
                                                  self._headers)
        return self._model_config

    def _wait_and_init_model_config(self, init_timeout_s: float) -> None:
        deadline = time.monotonic() + init_timeout_s
        self.wait_for_model(init_timeout_s)
        self._model_ready = True
        if not self._model_config:
            self._model_config = get_model_config(
                self._require_open(), self._model_name, self._model_version,
                max(0.0, deadline - time.monotonic()), self._headers)

    def infer_sample(self, *inputs: Any, parameters: _Parameters = None,
                     headers: _Parameters = None, **named_inputs: Any) -> Any:
        """Inference on one sample (the batch axis is added and removed when the model
        batches)."""
        _verify_inputs_args(inputs, named_inputs)
        _verify_parameters(parameters)
        _verify_parameters(headers)
        if self.is_batching_supported:
            inputs = tuple(data[np.newaxis, ...] for data in inputs)
            named_inputs = {name: data[np.newaxis, ...] for name, data in named_inputs.items()}
        result = self._infer(inputs or named_inputs, parameters, headers)
        return self._debatch_result(result)

    def infer_batch(self, *inputs: Any, parameters: _Parameters = None,
                    headers: _Parameters = None, **named_inputs: Any) -> Any:
        """Inference on a batch (the first axis of every input)."""
        _verify_inputs_args(inputs, named_inputs)
        _verify_parameters(parameters)
        _verify_parameters(headers)
        if not self.is_batching_supported:
            raise PyTritonClientModelDoesntSupportBatchingError(
                f"Model {self.model_config.model_name} doesn't support batching - use "
                "infer_sample method instead")
        return self._infer(inputs or named_inputs, parameters, headers)

    def _create_request(self, inputs: Any) -> tuple[list[Any], list[Any]]:
        if self._infer_client is None:
            raise PyTritonClientClosedError("ModelClient is closed")
        if not self._model_ready:
            self._wait_and_init_model_config(self._init_timeout_s)
        if isinstance(inputs, tuple):
            inputs = {spec.name: data for spec, data in zip(self.model_config.inputs or [],
                                                            inputs, strict=False)}
        wrapped = []
        for name, data in inputs.items():
            if data.dtype == object and data.size and not isinstance(data.reshape(-1)[0], bytes):
                raise RuntimeError(
                    f"Numpy array for {name!r} input with dtype=object should contain encoded "
                    f"strings (e.g. into utf-8). Element type: {type(data.reshape(-1)[0])}")
            if data.dtype.type == np.str_:
                raise RuntimeError(
                    "Unicode inputs are not supported. "
                    f"Encode numpy array for {name!r} input (ex. with np.char.encode(array, "
                    "'utf-8')).")
            infer_input = self._lib.InferInput(name, data.shape,
                                               tritonclient.utils.np_to_triton_dtype(data.dtype))
            infer_input.set_data_from_numpy(data)
            wrapped.append(infer_input)
        outputs = [self._lib.InferRequestedOutput(spec.name)
                   for spec in self.model_config.outputs or []]
        return wrapped, outputs

    def _infer_extra_args(self) -> dict[str, Any]:
        if self._triton_url.scheme == "http":
            return {}
        return {"client_timeout": self._inference_timeout_s}

    def _infer(self, inputs: Any, parameters: _Parameters, headers: _Parameters) -> Any:
        if self.model_config.decoupled:
            raise PyTritonClientInferenceServerError(
                "Model config is decoupled. Use DecoupledModelClient instead.")
        wrapped, outputs = self._create_request(inputs)
        merged = {**(self._headers or {}), **{k: str(v) for k, v in (headers or {}).items()}}
        try:
            response = self._infer_client.infer(
                model_name=self._model_name, model_version=self._model_version or "",
                inputs=wrapped, headers=merged or None, outputs=outputs,
                request_id=str(next(self._request_ids)), parameters=parameters,
                **self._infer_extra_args())
        except tritonclient.utils.InferenceServerException as exc:
            if "Deadline Exceeded" in (exc.message() or ""):
                raise PyTritonClientTimeoutError(
                    "Timeout occurred during inference request. Timeout: "
                    f"{self._inference_timeout_s} s. Message: {exc.message()}") from exc
            raise PyTritonClientInferenceServerError(
                f"Error occurred during inference request. Message: {exc.message()}") from exc
        except (TimeoutError, OSError) as exc:
            raise _timeout_error(self._inference_timeout_s, exc) from exc
        return _numpy_result(response)

    def _debatch_result(self, result: Any) -> Any:
        if self.is_batching_supported:
            return {name: data[0] for name, data in result.items()}
        return result


def _aio_lib(scheme: str) -> Any:
    """tritonclient's asyncio module of ``scheme``, imported when first asked for (aiohttp
    for HTTP's)."""
    import importlib

    return importlib.import_module(f"tritonclient.{scheme}.aio")


def _client_from_url(client: ModelClient, url: str, network_timeout_s: float | None, *,
                     aio: bool) -> Any:
    triton_url = TritonUrl.from_url(url)
    timeout_s = client._inference_timeout_s if network_timeout_s is None else network_timeout_s
    if triton_url.scheme == "grpc":
        warnings.warn("tritonclient.grpc doesn't support timeout for other commands than "
                      f"infer. Ignoring network_timeout: {timeout_s}.",
                      NotSupportedTimeoutWarning, stacklevel=3)
    if aio:   # tritonclient.http.aio: one timeout for the connection and each request
        extra = {"conn_timeout": timeout_s} if triton_url.scheme == "http" else {}
        return _aio_lib(triton_url.scheme).InferenceServerClient(triton_url.without_scheme,
                                                                 **extra)
    lib = {"grpc": tritonclient.grpc, "http": tritonclient.http}[triton_url.scheme]
    return lib.InferenceServerClient(triton_url.without_scheme,
                                     **client_init_arguments(triton_url, timeout_s))


def _numpy_result(response: Any) -> dict[str, np.ndarray]:
    if isinstance(response, tritonclient.http.InferResult):
        return {output["name"]: response.as_numpy(output["name"])
                for output in response.get_response().get("outputs", [])}
    return {output.name: response.as_numpy(output.name)
            for output in response.get_response().outputs}


class DecoupledModelClient(ModelClient):
    """Client of a decoupled (streaming) model over gRPC: ``infer_sample`` and
    ``infer_batch`` return an iterator of results, one per response."""

    def __init__(self, url: str, model_name: str, model_version: str | None = None, *,
                 lazy_init: bool = True, init_timeout_s: float | None = None,
                 inference_timeout_s: float | None = None,
                 model_config: TritonModelConfig | None = None,
                 ensure_model_is_ready: bool = True,
                 access_token: str | None = None) -> None:
        super().__init__(url, model_name, model_version, lazy_init=lazy_init,
                         init_timeout_s=init_timeout_s, inference_timeout_s=inference_timeout_s,
                         model_config=model_config, ensure_model_is_ready=ensure_model_is_ready,
                         access_token=access_token)
        if self._triton_url.scheme == "http":
            raise PyTritonClientValueError(
                "DecoupledModelClient is only supported for grpc protocol")
        self._queue: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()

    def close(self) -> None:
        if not self._lock.acquire(blocking=False):
            if self._infer_client is not None:
                self._infer_client.stop_stream(False)
        else:
            self._lock.release()
        super().close()

    def _infer(self, inputs: Any, parameters: _Parameters, headers: _Parameters) -> Any:
        if not self._lock.acquire(blocking=False):
            raise PyTritonClientInferenceServerError("Inference is already in progress")
        try:
            if not self.model_config.decoupled:
                raise PyTritonClientInferenceServerError(
                    "Model config is coupled. Use ModelClient instead.")
            wrapped, outputs = self._create_request(inputs)
            if parameters is not None:
                raise PyTritonClientValueError("DecoupledModelClient does not support parameters")
            if headers is not None:
                raise PyTritonClientValueError("DecoupledModelClient does not support headers")
            if self._infer_client._stream is None:
                self._infer_client.start_stream(callback=self._response_callback,
                                                headers=self._headers)
            self._infer_client.async_stream_infer(
                model_name=self._model_name, model_version=self._model_version or "",
                inputs=wrapped, outputs=outputs, request_id=str(next(self._request_ids)),
                enable_empty_final_response=True)
        except tritonclient.utils.InferenceServerException as exc:
            self._lock.release()
            raise PyTritonClientInferenceServerError(
                f"Error occurred during inference request. Message: {exc.message()}") from exc
        except BaseException:
            self._lock.release()
            raise
        return self._response_iterator()

    def _response_callback(self, result: Any, error: Any) -> None:
        if error:
            self._queue.put(error)
            return
        final = result.get_response().parameters.get("triton_final_response")
        if final and final.bool_param:
            self._queue.put(None)
        else:
            self._queue.put(_numpy_result(result))

    def _response_iterator(self) -> Iterator[dict[str, np.ndarray]]:
        try:
            while True:
                # As PyTriton 0.7 (whose queue.get(timeout) is get(block=timeout)): each
                # response is awaited for as long as the stream lasts; inference_timeout_s
                # bounds the request, not the time between two responses.
                try:
                    item = self._queue.get(timeout=STREAM_POLL_S)
                except queue.Empty:
                    if self._infer_client is None:
                        raise PyTritonClientClosedError("DecoupledModelClient is closed") \
                            from None
                    continue
                if isinstance(item, Exception):
                    text = item.message() if hasattr(item, "message") else str(item)
                    raise PyTritonClientInferenceServerError(
                        f"Error occurred during inference request. Message: {text}") from item
                if item is None:
                    break
                yield item
        finally:
            self._lock.release()

    def _debatch_result(self, result: Any) -> Any:
        if self.is_batching_supported:
            return ({name: data[0] for name, data in item.items()} for item in result)
        return result


class FuturesModelClient:
    """ModelClient calls on a pool of ``max_workers`` threads, each returning a Future.
    ``max_queue_size`` bounds the calls submitted and not finished: a call beyond it waits
    for room, or raises PyTritonClientQueueFullError with ``non_blocking``. None: no bound."""

    def __init__(self, url: str, model_name: str, model_version: str | None = None, *,
                 max_workers: int | None = 128, max_queue_size: int | None = 128,
                 non_blocking: bool = False, init_timeout_s: float | None = None,
                 inference_timeout_s: float | None = None,
                 access_token: str | None = None) -> None:
        if max_workers is not None and max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if max_queue_size is not None and max_queue_size <= 0:
            raise ValueError("max_queue_size must be greater than 0")
        self._url, self._model_name, self._model_version = url, model_name, model_version
        self._max_queue_size = max_queue_size
        self._non_blocking = non_blocking
        self._init_timeout_s = init_timeout_s
        self._inference_timeout_s = inference_timeout_s
        self._access_token = access_token
        self._executor = ThreadPoolExecutor(max_workers=max_workers)
        self._local = threading.local()
        self._clients: list[ModelClient] = []
        self._clients_lock = threading.Lock()
        self._pending = (threading.BoundedSemaphore(max_queue_size)
                         if max_queue_size is not None else None)
        self._closed = False

    def __enter__(self) -> FuturesModelClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self, wait: bool = True) -> None:
        """No new calls; with ``wait``, finish those submitted, then close every client."""
        self._closed = True
        self._executor.shutdown(wait=wait)
        with self._clients_lock:
            for client in self._clients:
                client.close()
            self._clients.clear()

    def _client(self) -> ModelClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = ModelClient(self._url, self._model_name, self._model_version,
                                 init_timeout_s=self._init_timeout_s,
                                 inference_timeout_s=self._inference_timeout_s,
                                 access_token=self._access_token)
            self._local.client = client
            with self._clients_lock:
                self._clients.append(client)
        return client

    def _submit(self, name: str, *args: Any, **kwargs: Any) -> Future[Any]:
        if self._closed:
            raise PyTritonClientClosedError("FutturesModelClient is already closed")
        if self._pending is not None and not self._pending.acquire(
                blocking=not self._non_blocking):
            raise PyTritonClientQueueFullError(
                f"Queue of FuturesModelClient is full (max_queue_size={self._max_queue_size})")

        def run() -> Any:
            try:
                target = getattr(self._client(), name)
                return target(*args, **kwargs) if callable(target) else target
            finally:
                if self._pending is not None:
                    self._pending.release()

        return self._executor.submit(run)

    def wait_for_model(self, timeout_s: float) -> Future[Any]:
        return self._submit("wait_for_model", timeout_s)

    def model_config(self) -> Future[Any]:
        return self._submit("model_config")

    def infer_sample(self, *inputs: Any, parameters: _Parameters = None,
                     headers: _Parameters = None, **named_inputs: Any) -> Future[Any]:
        return self._submit("infer_sample", *inputs, parameters=parameters, headers=headers,
                            **named_inputs)

    def infer_batch(self, *inputs: Any, parameters: _Parameters = None,
                    headers: _Parameters = None, **named_inputs: Any) -> Future[Any]:
        return self._submit("infer_batch", *inputs, parameters=parameters, headers=headers,
                            **named_inputs)


class AsyncioModelClient:
    """The ModelClient's calls as coroutines (each runs a ModelClient call on a thread of
    the event loop's default executor)."""

    def __init__(self, url: str, model_name: str, model_version: str | None = None, *,
                 lazy_init: bool = True, init_timeout_s: float | None = None,
                 inference_timeout_s: float | None = None,
                 model_config: TritonModelConfig | None = None,
                 ensure_model_is_ready: bool = True,
                 access_token: str | None = None) -> None:
        self._client = self._client_class()(
            url, model_name, model_version, lazy_init=True, init_timeout_s=init_timeout_s,
            inference_timeout_s=inference_timeout_s, model_config=model_config,
            ensure_model_is_ready=ensure_model_is_ready, access_token=access_token)
        self._lazy_init = lazy_init

    @staticmethod
    def _client_class() -> type[ModelClient]:
        return ModelClient

    @classmethod
    def from_existing_client(cls, existing_client: AsyncioModelClient | ModelClient
                             ) -> AsyncioModelClient:
        """A client of the same model with the same settings and the known model config."""
        inner = existing_client._client if isinstance(existing_client, AsyncioModelClient) \
            else existing_client
        return cls(url=inner._triton_url.with_scheme, model_name=inner._model_name,
                   model_version=inner._model_version, init_timeout_s=inner._init_timeout_s,
                   inference_timeout_s=inner._inference_timeout_s,
                   model_config=inner._model_config, ensure_model_is_ready=False,
                   access_token=inner._access_token)

    def get_lib(self) -> Any:
        """The tritonclient asyncio module of the URL's scheme (``tritonclient.http.aio`` or
        ``tritonclient.grpc.aio``), as PyTriton's ``get_lib``."""
        return _aio_lib(self._client._triton_url.scheme)

    def create_client_from_url(self, url: str, network_timeout_s: float | None = None) -> Any:
        """A tritonclient asyncio ``InferenceServerClient`` for ``url``, as
        ModelClient.create_client_from_url makes a synchronous one."""
        return _client_from_url(self._client, url, network_timeout_s, aio=True)

    async def __aenter__(self) -> AsyncioModelClient:
        if not self._lazy_init:
            await asyncio.to_thread(self._client._wait_and_init_model_config,
                                    self._client._init_timeout_s)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)

    async def wait_for_model(self, timeout_s: float) -> None:
        await asyncio.to_thread(self._client.wait_for_model, timeout_s)

    @property
    async def model_config(self) -> TritonModelConfig:
        return await asyncio.to_thread(lambda: self._client.model_config)

    async def infer_sample(self, *inputs: Any, parameters: _Parameters = None,
                           headers: _Parameters = None, **named_inputs: Any) -> Any:
        return await asyncio.to_thread(self._client.infer_sample, *inputs,
                                       parameters=parameters, headers=headers, **named_inputs)

    async def infer_batch(self, *inputs: Any, parameters: _Parameters = None,
                          headers: _Parameters = None, **named_inputs: Any) -> Any:
        return await asyncio.to_thread(self._client.infer_batch, *inputs,
                                       parameters=parameters, headers=headers, **named_inputs)


class AsyncioDecoupledModelClient(AsyncioModelClient):
    """A decoupled model's results as an async iterator (gRPC only)."""

    @staticmethod
    def _client_class() -> type[ModelClient]:
        return DecoupledModelClient

    async def _stream(self, method: str, *inputs: Any, **kwargs: Any
                      ) -> AsyncIterator[dict[str, np.ndarray]]:
        iterator = await asyncio.to_thread(getattr(self._client, method), *inputs, **kwargs)
        done = object()
        while True:
            item = await asyncio.to_thread(next, iterator, done)
            if item is done:
                return
            yield item

    def infer_sample(self, *inputs: Any, parameters: _Parameters = None,  # type: ignore[override]
                     headers: _Parameters = None, **named_inputs: Any
                     ) -> AsyncIterator[dict[str, np.ndarray]]:
        return self._stream("infer_sample", *inputs, parameters=parameters, headers=headers,
                            **named_inputs)

    def infer_batch(self, *inputs: Any, parameters: _Parameters = None,  # type: ignore[override]
                    headers: _Parameters = None, **named_inputs: Any
                    ) -> AsyncIterator[dict[str, np.ndarray]]:
        return self._stream("infer_batch", *inputs, parameters=parameters, headers=headers,
                            **named_inputs)

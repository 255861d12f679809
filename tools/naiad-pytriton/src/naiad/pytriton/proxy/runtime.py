"""Calling a bound callable inside naiad's Python backend (a worker process, or the server
with ``EXECUTION_MODE: in_process``): requests in, the callable's results out as responses,
streamed through the response sender for decoupled models.

The callables come pickled by value (cloudpickle) in ``<version>/callables.pkl`` (a dict:
``callables``, ``strict``); instance N of the model runs callable N of the list ``bind`` was
given.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import pickle
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from naiad.pytriton.decorators import TritonContext, current_context
from naiad.pytriton.exceptions import PyTritonUnrecoverableError
from naiad.pytriton.model_config.common import ModelWarmup, WarmupInput
from naiad.pytriton.model_config.parser import parse_model_config
from naiad.pytriton.model_config.triton_model_config import TritonModelConfig
from naiad.pytriton.proxy.types import Request

log = logging.getLogger("naiad.pytriton")

CALLABLES_FILE = "callables.pkl"
WARMUP_FILE = "warmup.pkl"
_BYTES_KINDS = "OSU"


def instance_index(instance_name: str) -> int:
    """N of an instance named ``MODEL_GROUP_N``: which of the bound callables it runs."""
    found = re.search(r"_(\d+)$", instance_name)
    return int(found.group(1)) if found else 0


class ResultError(Exception):
    """The callable's result does not fit the model's outputs."""


class CallableRunner:
    """One instance's callable, its model config and, for async callables, its event loop."""

    def __init__(self, args: dict[str, str], pb_utils: Any) -> None:
        self.pb_utils = pb_utils
        self.name = args["model_name"]
        config = json.loads(args["model_config"])
        self.config: TritonModelConfig = parse_model_config(config)
        folder = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(folder, CALLABLES_FILE), "rb") as handle:
            bound = pickle.load(handle)
        callables = bound["callables"]
        self.callable = callables[instance_index(args["model_instance_name"]) % len(callables)]
        self.strict = bool(bound["strict"])
        self.decoupled = self.config.decoupled
        self.context = TritonContext()
        self.context.model_configs.default = self.config
        self.context.model_configs[self.callable] = self.config
        try:
            target = getattr(self.callable, "__self__", self.callable)
            target.__triton_context__ = self.context
        except (AttributeError, TypeError):
            pass  # a builtin: the decorators find the context through current_context
        self.outputs = {spec.name: spec for spec in self.config.outputs or []}
        self.input_names = [spec.name for spec in self.config.inputs or []]
        self.loop: asyncio.AbstractEventLoop | None = None
        warmup_path = os.path.join(folder, WARMUP_FILE)
        if os.path.exists(warmup_path):
            with open(warmup_path, "rb") as handle:
                self.warmup(pickle.load(handle))

    # -- calling ---------------------------------------------------------------------------

    def _run(self, awaitable: Any) -> Any:
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
        return self.loop.run_until_complete(awaitable)

    def call(self, requests: list[Request]) -> Any:
        """The callable's result for ``requests``, awaited when it is a coroutine."""
        token = current_context.set(self.context)
        try:
            result = self.callable(requests)
            if inspect.isawaitable(result) and not inspect.isasyncgen(result):
                result = self._run(result)
            return result
        finally:
            current_context.reset(token)

    def results(self, requests: list[Request]) -> Any:
        """An iterator of the callable's results (a list per step); one step when the callable
        returns, one per ``yield`` for generators and async generators."""
        result = self.call(requests)
        if inspect.isgenerator(result):
            return self._each(result)
        if inspect.isasyncgen(result):
            return self._each_async(result)
        return iter([result])

    def _each(self, generator: Any) -> Any:
        while True:
            token = current_context.set(self.context)
            try:
                item = next(generator)
            except StopIteration:
                return
            finally:
                current_context.reset(token)
            yield item

    def _each_async(self, generator: Any) -> Any:
        while True:
            token = current_context.set(self.context)
            try:
                item = self._run(generator.__anext__())
            except StopAsyncIteration:
                return
            finally:
                current_context.reset(token)
            yield item

    # -- requests and responses ---------------------------------------------------------------

    def request(self, request: Any) -> Request:
        data = {}
        for name in self.input_names:
            tensor = self.pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                data[name] = tensor.as_numpy()
        raw = request.parameters()
        parameters = json.loads(raw) if raw else {}
        return Request(data=data, parameters=parameters,
                       requested_output_names=list(request.requested_output_names() or []))

    def outputs_of(self, result: Any, requested: Sequence[str] | None) -> list[Any]:
        """The output tensors of one request's result (a dict or Response)."""
        if not hasattr(result, "items"):
            raise ResultError(f"the inference callable of model '{self.name}' returned "
                              f"{type(result).__name__} for a request, expected a dict of "
                              "output name to numpy array")
        tensors = []
        for name, value in result.items():
            spec = self.outputs.get(name)
            if spec is None:
                if self.strict:
                    raise ResultError(f"model '{self.name}': the inference callable returned "
                                      f"output '{name}', which the model does not declare "
                                      f"(outputs: {', '.join(self.outputs)})")
                continue
            if requested and name not in requested:
                continue
            if not isinstance(value, np.ndarray):
                raise ResultError(f"model '{self.name}': output '{name}' is "
                                  f"{type(value).__name__}, expected a numpy array")
            want = np.dtype(spec.dtype)
            if want.kind in _BYTES_KINDS:
                if value.dtype.kind not in _BYTES_KINDS:
                    raise ResultError(f"model '{self.name}': output '{name}' has dtype "
                                      f"{value.dtype}, expected bytes")
                value = value.astype(np.object_)
            elif value.dtype != want:
                if self.strict:
                    raise ResultError(f"model '{self.name}': output '{name}' has dtype "
                                      f"{value.dtype}, expected {want}")
                value = value.astype(want)
            if self.strict:
                rank = len(spec.shape) + (1 if self.config.batching else 0)
                if value.ndim != rank:
                    raise ResultError(f"model '{self.name}': output '{name}' has shape "
                                      f"{value.shape}, expected {rank} dimensions")
            tensors.append(self.pb_utils.Tensor(name, value))
        return tensors

    def step(self, result: Any, requests: list[Request]) -> list[Any]:
        """One step's results as one list per request."""
        if isinstance(result, dict) and len(requests) == 1:
            result = [result]
        if not isinstance(result, list | tuple) or len(result) != len(requests):
            raise ResultError(
                f"the inference callable of model '{self.name}' returned "
                f"{type(result).__name__}"
                + (f" of {len(result)} results" if isinstance(result, list | tuple) else "")
                + f" for {len(requests)} requests, expected a list with one dict per request")
        return list(result)

    def error(self, exc: BaseException) -> Any:
        message = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, PyTritonUnrecoverableError):
            log.error("model '%s': the inference callable raised PyTritonUnrecoverableError "
                      "(the batch fails; the instance keeps serving): %s", self.name, exc)
        return self.pb_utils.TritonError(message)

    def execute(self, raw_requests: list[Any]) -> list[Any] | None:
        requests = [self.request(r) for r in raw_requests]
        if self.decoupled:
            self._stream(raw_requests, requests)
            return None
        try:
            (result,) = list(self.results(requests))
            responses = [self.pb_utils.InferenceResponse(
                output_tensors=self.outputs_of(item, request.requested_output_names))
                for item, request in zip(self.step(result, requests), requests, strict=True)]
        except Exception as exc:  # the callable's error answers each request
            log.debug("model '%s': inference failed", self.name, exc_info=True)
            error = self.error(exc)
            return [self.pb_utils.InferenceResponse(output_tensors=[], error=error)
                    for _ in requests]
        return responses

    def _stream(self, raw_requests: list[Any], requests: list[Request]) -> None:
        senders = [r.get_response_sender() for r in raw_requests]
        final = self.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        try:
            for result in self.results(requests):
                for sender, item, request in zip(senders, self.step(result, requests), requests,
                                                 strict=True):
                    sender.send(self.pb_utils.InferenceResponse(
                        output_tensors=self.outputs_of(item, request.requested_output_names)))
        except Exception as exc:  # the error ends each request's stream
            log.debug("model '%s': inference failed", self.name, exc_info=True)
            error = self.error(exc)
            for sender in senders:
                sender.send(self.pb_utils.InferenceResponse(output_tensors=[], error=error),
                            flags=final)
            return
        for sender in senders:
            sender.send(flags=final)

    # -- warmup ---------------------------------------------------------------------------------

    def warmup(self, warmups: list[ModelWarmup]) -> None:
        """PyTriton's warmup: each warmup request ``count`` times through the callable before
        the model serves; a failure is logged and ends nothing."""
        for warmup in warmups:
            for _ in range(warmup.count):
                data = {name: warmup_data(spec, warmup.batch_size)
                        for name, spec in warmup.inputs.items()}
                try:
                    for _result in self.results([Request(data=data)]):
                        pass
                except Exception as exc:  # as PyTriton: warmup failures do not stop a load
                    log.warning("model '%s': warmup request %s failed: %s", self.name,
                                warmup.name, exc)

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()


def warmup_data(spec: WarmupInput, batch_size: int) -> np.ndarray:
    """A warmup input: zeros, random data or a ``.npy`` file, with the batch axis."""
    shape = (batch_size, *spec.shape)
    if spec.input_data_file:
        data = np.load(spec.input_data_file)
        if data.shape != shape and data.ndim == len(spec.shape):
            data = np.repeat(data[np.newaxis, ...], batch_size, axis=0)
        return data.astype(spec.dtype)
    if spec.random_data:
        dtype = np.dtype(spec.dtype)
        if dtype.kind in _BYTES_KINDS:
            return np.array([b"warmup"] * int(np.prod(shape)), dtype=object).reshape(shape)
        if dtype.kind == "b":
            return np.random.default_rng().integers(0, 2, shape).astype(bool)
        if dtype.kind in "iu":
            return np.random.default_rng().integers(0, 100, shape).astype(dtype)
        return np.random.default_rng().random(shape).astype(dtype)
    dtype = np.dtype(spec.dtype)
    if dtype.kind in _BYTES_KINDS:
        return np.array([b""] * int(np.prod(shape)), dtype=object).reshape(shape)
    return np.zeros(shape, dtype=dtype)

"""The ``python`` backend: Triton Python models (``TritonPythonModel`` in model.py) in-process.

Each instance imports its own copy of model.py, runs ``initialize`` and then ``execute`` on
the instance's worker thread. Requests and responses are translated between naiad's types
and ``triton_python_backend_utils`` without copying tensor data.
"""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.config.render import config_to_json
from naiad.errors import InferenceServerError, Status, invalid_arg, unavailable, unsupported
from naiad.types import (
    Backend,
    InferenceRequest,
    InferenceResponse,
    InstanceInfo,
    ModelContext,
    ModelInstance,
    Tensor,
)
from naiad_backend_python import loader

log = logging.getLogger("naiad.backend.python")

# pb_utils.TritonError codes -> naiad statuses (UNKNOWN is a server-side failure). A
# TritonError made without a code is INTERNAL: tritonserver 2.51 answers it with HTTP 500.
ERROR_STATUS = {
    pb_utils.TritonError.UNKNOWN: Status.INTERNAL,
    pb_utils.TritonError.INTERNAL: Status.INTERNAL,
    pb_utils.TritonError.NOT_FOUND: Status.NOT_FOUND,
    pb_utils.TritonError.INVALID_ARG: Status.INVALID_ARG,
    pb_utils.TritonError.UNAVAILABLE: Status.UNAVAILABLE,
    pb_utils.TritonError.UNSUPPORTED: Status.UNSUPPORTED,
    pb_utils.TritonError.ALREADY_EXISTS: Status.ALREADY_EXISTS,
    pb_utils.TritonError.CANCELLED: Status.CANCELLED,
}

# An exception raised by execute fails every request of the batch. tritonserver 2.51 answers
# 500 / INTERNAL; naiad answers 400 / INVALID_ARGUMENT because what a model raises on is most
# often the request it was given, and a 5xx invites retries that cannot succeed.
EXECUTE_FAILURE_STATUS = Status.INVALID_ARG
# A model that breaks the execute contract (not a list, the wrong number of responses, not
# an InferenceResponse) is broken whatever the input: 500 / INTERNAL, as in Triton.
CONTRACT_FAILURE_STATUS = Status.INTERNAL

_PbResponse = pb_utils.InferenceResponse
_PbTensor = pb_utils.Tensor
_wrap_request = pb_utils.InferenceRequest._wrap
_thread_state = pb_utils._current

_INSTANCE_KINDS = {"KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL", "KIND_AUTO": "CPU"}
_BACKEND_FILES = (str(Path(__file__).parent), str(Path(pb_utils.__file__)))


def render_config(config: ModelConfig) -> str:
    """``config`` as the JSON string Triton gives Python models (``args['model_config']``)."""
    return json.dumps(config_to_json(config), separators=(",", ":"))


class PythonBackend(Backend):
    """Serves models whose config says ``backend: "python"``."""

    name = "python"
    default_model_filename = "model.py"

    def __init__(self, backend_config: dict[str, str] | None = None) -> None:
        self.backend_config = dict(backend_config or {})

    # --- auto-complete ------------------------------------------------------------------

    def auto_complete_config(self, config: ModelConfig, model_dir: Path) -> list[str]:
        """Let ``TritonPythonModel.auto_complete_config`` (a static method, if the model has
        one) fill in ``config`` as Triton does. The newest version folder holding the model
        file is imported for it. Its exceptions propagate."""
        model_file = _newest_model_file(config, model_dir)
        if model_file is None:
            return []
        model_name = config.name or model_dir.name
        pb_utils._set_model_dir(str(model_file.parent))
        module = loader.import_model(model_file)
        try:
            model_class = getattr(module, "TritonPythonModel", None)
            if model_class is None or not hasattr(model_class, "auto_complete_config"):
                return []
            result = model_class.auto_complete_config(pb_utils.ModelConfig(render_config(config)))
            if not isinstance(result, pb_utils.ModelConfig):
                raise invalid_arg(f"auto_complete_config function in model '{model_name}' "
                                  f"must return a valid pb.ModelConfig object.")
            completed = ModelConfig()
            try:
                json_format.ParseDict(result.as_dict(), completed)
            except json_format.ParseError as exc:
                raise invalid_arg(f"model '{model_name}': the configuration returned by "
                                  f"auto_complete_config is not valid: {exc}") from None
        finally:
            loader.forget_model(module)
        filled = _changed_fields(config, completed)
        config.CopyFrom(completed)
        return filled

    # --- instances ----------------------------------------------------------------------

    def create_instance(self, context: ModelContext, instance: InstanceInfo) -> PythonModelInstance:
        config = context.config
        name = context.name
        if config.model_transaction_policy.decoupled:
            raise unsupported(f"model '{name}' uses decoupled mode (model_transaction_policy "
                              f"{{ decoupled: true }}), which naiad's Python backend does not "
                              f"support yet")
        model_file = context.version_dir / (config.default_model_filename or "model.py")
        if not model_file.is_file():
            raise unavailable(f"model '{name}': Python model file not found in '{model_file}'")
        version_dir = str(model_file.parent)
        pb_utils._set_model_dir(version_dir)
        try:
            module = loader.import_model(model_file)
        except Exception as exc:
            raise unavailable(f"model '{name}': failed to import '{model_file}': "
                              f"{describe(exc)}") from exc
        try:
            model_class = getattr(module, "TritonPythonModel", None)
            if model_class is None:
                raise unavailable(f"model '{name}': '{model_file}' does not define a class "
                                  f"named TritonPythonModel")
            try:
                model = model_class()
                initialize = getattr(model, "initialize", None)
                if initialize is not None:
                    _finish(initialize(_initialize_args(context, instance, config)))
            except Exception as exc:
                raise unavailable(f"model '{name}' failed to initialize: "
                                  f"{describe(exc)}") from exc
        except BaseException:
            loader.forget_model(module)
            raise
        return PythonModelInstance(model, module, context, instance, version_dir)


class PythonModelInstance(ModelInstance):
    """One ``TritonPythonModel`` object; ``execute`` runs on the instance's worker thread."""

    __slots__ = (
        "_closed",
        "_execute",
        "_loop",
        "instance_name",
        "model",
        "model_file",
        "model_name",
        "module",
        "output_names",
        "version_dir",
    )

    def __init__(self, model: Any, module: ModuleType, context: ModelContext,
                 instance: InstanceInfo, version_dir: str) -> None:
        self.model = model
        self.module = module
        self.model_name = context.name
        self.instance_name = instance.name
        self.model_file = module.__file__
        self.version_dir = version_dir
        # What a request that names no outputs gets, as Triton: every output of the config.
        self.output_names = frozenset(output.name for output in context.config.output)
        self._execute = getattr(model, "execute", None) or self._missing_execute
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        _thread_state.model_dir = self.version_dir  # for pb_utils.get_model_dir()
        wrap = _wrap_request
        output_names = self.output_names
        pb_requests = [wrap(request, output_names) for request in requests]
        try:
            returned = self._execute(pb_requests)
            if type(returned) is not list:
                returned = self._unusual_return(returned, len(requests))
            if len(returned) != len(requests):
                raise _BatchError(
                    f"Number of InferenceResponse objects do not match the number of "
                    f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, "
                    f"and InferenceResponse(s) size is:{len(returned)}\n")
            convert = self._convert
            return [convert(response, request, pb_request) for response, request, pb_request
                    in zip(returned, requests, pb_requests, strict=True)]
        except Exception as exc:
            # A failed batch is raised, not answered: the core counts it as a failure.
            raise self._failure(exc) from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        pb_utils._set_model_dir(self.version_dir)
        finalize = getattr(self.model, "finalize", None)
        try:
            if finalize is not None:
                _finish(finalize(), self._loop)
        except Exception as exc:  # Triton logs a failing finalize and carries on
            log.error("model '%s' instance '%s': finalize failed: %s", self.model_name,
                      self.instance_name, describe(exc))
        finally:
            if self._loop is not None:
                self._loop.close()
            loader.forget_model(self.module)

    # --- helpers ------------------------------------------------------------------------

    def _missing_execute(self, requests: list[pb_utils.InferenceRequest]) -> Any:
        raise _BatchError(f"Python model {self.model_file} does not implement `execute` "
                          f"method.")

    def _unusual_return(self, returned: Any, count: int) -> list[Any]:
        """What ``execute`` returned when it is not a list: a coroutine (``async def
        execute``, run to completion on this instance's own event loop) or None (the
        responses went through response senders)."""
        if asyncio.iscoroutine(returned):
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            returned = self._loop.run_until_complete(returned)
            if type(returned) is list:
                return returned
        if returned is None:
            return [None] * count
        raise _BatchError(f"Expected a list in the execute return, found type "
                          f"'{type(returned)}'.")

    def _convert(self, response: Any, request: InferenceRequest,
                 pb_request: pb_utils.InferenceRequest) -> InferenceResponse:
        if type(response) is not _PbResponse:
            if response is None:
                response = _sent_response(pb_request)
            elif not isinstance(response, _PbResponse):
                raise _BatchError(f"Expected an 'InferenceResponse' object in the execute "
                                  f"function return list, found type '{type(response)}'.")
        error = response._error
        if error is not None:
            return InferenceResponse(error=InferenceServerError(
                error.message(), ERROR_STATUS.get(error.code(), Status.INTERNAL)))
        requested = request.requested_outputs
        # Triton prunes what the request did not ask for (all of the config's outputs when
        # it names none); a config without outputs prunes nothing.
        wanted = self.output_names if requested is None else {o.name for o in requested}
        outputs = []
        for tensor in response._output_tensors:
            if type(tensor) is not _PbTensor:
                raise _BatchError(f"Expected a 'Tensor' object in the output_tensors of an "
                                  f"InferenceResponse, found type '{type(tensor)}'.")
            name = tensor._name
            if wanted and name not in wanted:
                continue
            array = tensor._array
            datatype = tensor._datatype
            if datatype == "BYTES":
                array = _bytes_array(array)
            outputs.append(Tensor(name, datatype, array.shape, array))
        parameters = response._parameters
        if parameters:
            return InferenceResponse(outputs=outputs, parameters=dict(parameters))
        return InferenceResponse(outputs=outputs)

    def _failure(self, exc: Exception) -> InferenceServerError:
        """The error every request of a failed batch gets (Triton's wording)."""
        status = EXECUTE_FAILURE_STATUS
        if isinstance(exc, _BatchError):
            detail = str(exc)
            status = CONTRACT_FAILURE_STATUS
        else:
            detail = describe(exc)
            if isinstance(exc, pb_utils.TritonError):
                status = ERROR_STATUS.get(exc.code(), status)
        message = (f"Failed to process the request(s) for model '{self.instance_name}', "
                   f"message: {detail}")
        log.error("%s", message)
        return InferenceServerError(message, status)


class _BatchError(Exception):
    """The model broke the execute contract (its message is Triton's, without a type)."""


def describe(exc: BaseException) -> str:
    """``Type: message`` and the model's frames, innermost first, as Triton shows errors
    raised in Python models (``At:`` lines of ``file(line): function``)."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not frame.filename.startswith(_BACKEND_FILES)]
    text = f"{type(exc).__name__}: {exc}"
    if frames:
        text += "\n\nAt:\n" + "".join(f"  {f.filename}({f.lineno}): {f.name}\n"
                                      for f in reversed(frames))
    return text


def _sent_response(request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
    sender = request._sender
    if sender is None or sender._response is None:
        raise _BatchError("Expected an 'InferenceResponse' object in the execute function "
                          "return list, found type '<class 'NoneType'>'.")
    return sender._response


def _bytes_array(array: np.ndarray) -> np.ndarray:
    """A BYTES output as an object array of ``bytes`` (str items are UTF-8 encoded, other
    objects ``str()``-ed, as Triton serializes them). Returns ``array`` itself when it
    already is one."""
    if array.dtype == np.object_:
        for item in array.flat:
            if type(item) is not bytes:
                break
        else:
            return array
        out = np.empty(array.shape, dtype=object)
        out.flat[:] = [item if type(item) is bytes else
                       item.encode("utf-8") if isinstance(item, str) else
                       bytes(item) if isinstance(item, (bytes, bytearray, memoryview)) else
                       str(item).encode("utf-8")
                       for item in array.flat]
        return out
    return array.astype(object)  # np.bytes_ ("S") array: its items become bytes


def _finish(result: Any, loop: asyncio.AbstractEventLoop | None = None) -> Any:
    """Await ``result`` if ``initialize``/``finalize`` was an ``async def``."""
    if not asyncio.iscoroutine(result):
        return result
    if loop is None or loop.is_closed():
        return asyncio.run(result)
    return loop.run_until_complete(result)


def _initialize_args(context: ModelContext, instance: InstanceInfo,
                     config: ModelConfig) -> dict[str, str]:
    """The ``args`` Triton passes to ``initialize``: every value a str."""
    return {
        "model_config": render_config(config),
        "model_instance_kind": _INSTANCE_KINDS.get(instance.kind, instance.kind),
        "model_instance_name": instance.name,
        "model_instance_device_id": str(instance.device_id),
        "model_repository": str(context.model_dir),
        "model_version": str(context.version),
        "model_name": context.name,
    }


def _newest_model_file(config: ModelConfig, model_dir: Path) -> Path | None:
    """The model file of the highest numbered version folder that has one."""
    filename = config.default_model_filename or PythonBackend.default_model_filename
    try:
        versions = [p for p in model_dir.iterdir() if p.name.isdigit() and p.is_dir()]
    except OSError:
        return None
    for version_dir in sorted(versions, key=lambda p: int(p.name), reverse=True):
        candidate = version_dir / filename
        if candidate.is_file():
            return candidate
    return None


def _changed_fields(before: ModelConfig, after: ModelConfig) -> list[str]:
    """Top-level fields of ``after`` that differ from ``before``."""
    changed = []
    for field in ModelConfig.DESCRIPTOR.fields:
        name = field.name
        presence = (field.type == field.TYPE_MESSAGE and not _is_repeated(field)
                    and before.HasField(name) != after.HasField(name))
        if presence or getattr(before, name) != getattr(after, name):
            changed.append(name)
    return changed


def _is_repeated(field: Any) -> bool:
    is_repeated = getattr(field, "is_repeated", None)
    if is_repeated is not None:  # protobuf >= 6 deprecates ``label``
        return bool(is_repeated)
    return bool(field.label == field.LABEL_REPEATED)

"""``triton_python_backend_utils`` for naiad: the module Triton Python models import as
``pb_utils``, with the names and behaviour of Triton's (tritonserver 2.51, python_backend).

In Triton part of this module is written in C++. In naiad everything is Python, and the same
file serves both execution modes: in a model's worker process (isolated, the default) it is
the top-level module found beside ``naiad_stub_main.py``, and inside the server (in-process
mode) the top-level ``triton_python_backend_utils`` module is this one too. It needs only
numpy (and ml_dtypes for BF16), so it runs in any Python 3.9 or newer a model's environment
brings. Tensors wrap numpy arrays without copying them; BYTES tensors are numpy object
arrays of ``bytes``.

Triton's is one module that models import whole; naiad's keeps each job in a module of its
own and re-exports every name from here (``import naiad_stub_x as y`` imports nothing a
model sees): data types and BYTES (de)serializers (``naiad_stub_dtypes``), ``Tensor``
(``naiad_stub_tensor``), requests, responses and the response sender
(``naiad_stub_requests``), calls to other models and model control
(``naiad_stub_model_calls``), ``ModelConfig`` for auto-complete (``naiad_stub_model_config``),
``Logger`` (``naiad_stub_logger``), custom metrics (``naiad_stub_metrics``) and the errors
(``naiad_stub_errors``). What stays here: the lookups and the model's directory.

Calls to other models (BLS: ``InferenceRequest.exec`` / ``async_exec``; and
``is_model_ready``, ``load_model``, ``unload_model``) go through the execution mode's
:class:`_ModelCalls`: the server's own models in-process, messages to the server from a
worker.
"""

from __future__ import annotations

# pb_utils.json and pb_utils.np: Triton's module imports them, so a model may reach them here.
import json  # noqa: F401
import threading
from typing import Any

import naiad_stub_dtypes as _dtypes
import naiad_stub_errors as _errors
import naiad_stub_logger as _logger
import naiad_stub_metrics as _metrics
import naiad_stub_model_calls as _model_calls
import naiad_stub_model_config as _model_config
import naiad_stub_requests as _requests
import naiad_stub_tensor as _tensor
import numpy as np  # noqa: F401

# --- data types and BYTES tensors (naiad_stub_dtypes) ------------------------------------

NUMPY_DTYPES = _dtypes.NUMPY_DTYPES
TRITON_STRING_TO_NUMPY = _dtypes.TRITON_STRING_TO_NUMPY
triton_to_numpy_type = _dtypes.triton_to_numpy_type
numpy_to_triton_type = _dtypes.numpy_to_triton_type
triton_string_to_numpy = _dtypes.triton_string_to_numpy
serialize_byte_tensor = _dtypes.serialize_byte_tensor
deserialize_bytes_tensor = _dtypes.deserialize_bytes_tensor

# --- errors (naiad_stub_errors: the custom metrics raise them too) ----------------------

TritonModelException = _errors.TritonModelException
TritonError = _errors.TritonError

# --- tensors, requests and responses (naiad_stub_tensor, naiad_stub_requests) ------------

Tensor = _tensor.Tensor
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = _requests.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = _requests.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
TRITONSERVER_RESPONSE_COMPLETE_FINAL = _requests.TRITONSERVER_RESPONSE_COMPLETE_FINAL
TRITONSERVER_REQUEST_RELEASE_ALL = _requests.TRITONSERVER_REQUEST_RELEASE_ALL
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = _requests.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
TRITONSERVER_MEMORY_GPU = _requests.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = _requests.TRITONSERVER_MEMORY_CPU
PreferredMemory = _requests.PreferredMemory
InferenceRequest = _requests.InferenceRequest
InferenceResponse = _requests.InferenceResponse
InferenceResponseSender = _requests.InferenceResponseSender
# for the execution modes: a BLS call in plain values, and a broken execute contract
_describe_call = _requests._describe_call
_call_response = _requests._call_response
_OutputTypeError = _requests._OutputTypeError

# --- calling other models and model control (naiad_stub_model_calls) ---------------------

ResponseIterator = _model_calls.ResponseIterator
load_model = _model_calls.load_model
unload_model = _model_calls.unload_model
is_model_ready = _model_calls.is_model_ready
# for the execution modes: installing their way to the server, when the model may call
_ModelCalls = _model_calls._ModelCalls
_set_model_calls = _model_calls._set_model_calls
_allow_model_calls = _model_calls._allow_model_calls
_forbid_model_calls = _model_calls._forbid_model_calls

# --- auto-complete, logging, custom metrics ----------------------------------------------

ModelConfig = _model_config.ModelConfig
Logger = _logger.Logger
MetricFamily = _metrics.MetricFamily

# --- lookups ----------------------------------------------------------------------------


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input called ``name``, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output called ``name``, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``input`` entry called ``name`` of a model config dict, or None."""
    for properties in model_config.get("input", ()):
        if properties["name"] == name:
            return properties
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``output`` entry called ``name`` of a model config dict, or None."""
    for properties in model_config.get("output", ()):
        if properties["name"] == name:
            return properties
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the config dict sets ``model_transaction_policy { decoupled: true }``."""
    if "model_transaction_policy" in model_config:
        return bool(model_config["model_transaction_policy"].get("decoupled", False))
    return False


# --- the model's directory --------------------------------------------------------------

_current = threading.local()


def get_model_dir() -> str:
    """The folder holding the running model's file (``<repository>/<model>/<version>``).

    naiad sets it for the thread that runs a model's ``auto_complete_config``,
    ``initialize``, ``execute`` and ``finalize``; in a worker process, which serves one
    model, every thread sees it.
    """
    return getattr(_current, "model_dir", _process_model_dir)


_process_model_dir = ""


def _set_model_dir(path: str, whole_process: bool = False) -> None:
    global _process_model_dir
    _current.model_dir = path
    if whole_process:
        _process_model_dir = path

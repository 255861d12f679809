"""How a Python model reaches the server's other models (BLS and model control): the
execution mode installs a :class:`_ModelCalls` (:func:`_set_model_calls`; in-process the
server's models, in a worker messages to the server), and ``InferenceRequest.exec``,
``async_exec``, ``load_model``, ``unload_model`` and ``is_model_ready`` go through it, only
while the model may call (from ``initialize`` on, until ``finalize``). Also the waiting side
of a call: one response, or a :class:`ResponseIterator` of a decoupled call's responses.
Re-exported by ``triton_python_backend_utils``; responses are ``pb_utils.InferenceResponse``
objects (typed ``Any`` here: ``naiad_stub_requests`` imports this module)."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable
from typing import Any

from naiad_stub_errors import TritonModelException


class _ModelCalls:
    """How BLS calls leave the model: the execution mode installs one
    (:func:`_set_model_calls`). ``infer`` starts a request and calls ``on_response(response,
    final)`` from any thread for each of its responses (one, final, unless ``decoupled``);
    it returns a function that cancels the request."""

    def infer(self, request: Any, decoupled: bool,
              on_response: Callable[[Any, bool], None]) -> Callable[[], None]:
        raise NotImplementedError

    def is_model_ready(self, model_name: str, model_version: str) -> bool:
        raise NotImplementedError

    def load_model(self, model_name: str, config: str, files: dict[str, bytes] | None
                   ) -> str | None:
        """Load a model; None, or why it failed."""
        raise NotImplementedError

    def unload_model(self, model_name: str, unload_dependents: bool) -> str | None:
        """Unload a model; None, or why it failed."""
        raise NotImplementedError


_calls: _ModelCalls | None = None
# BLS works once the model is initialized, as in Triton.
_calls_allowed = False


def _set_model_calls(calls: _ModelCalls | None) -> None:
    global _calls
    _calls = calls


def _allow_model_calls() -> None:
    global _calls_allowed
    _calls_allowed = True


def _forbid_model_calls() -> None:
    """From ``finalize`` on, BLS raises again (Triton: only during ``execute``)."""
    global _calls_allowed
    _calls_allowed = False


def _model_calls() -> _ModelCalls:
    if _calls is None or not _calls_allowed:
        raise TritonModelException("BLS is only supported during the 'execute' function.")
    return _calls


class _OneResponse:
    """Waits for the one response of a non-decoupled BLS call."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def put(self, response: Any, final: bool) -> None:
        if final:
            self._queue.put(response)

    def get(self) -> Any:
        return self._queue.get()


class ResponseIterator:
    """The responses of a decoupled BLS call, in the order they arrive; iterating waits
    for each. The last one may have no outputs (the final flag alone). ``cancel()`` asks
    the called model to stop (its requests see ``is_cancelled()``)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Any, bool]] = queue.SimpleQueue()
        self._done = False
        self._cancel: Callable[[], None] | None = None
        self._arrived = False  # a response (or the final flag) came: async_exec resolves

    def _put(self, response: Any, final: bool) -> None:
        self._queue.put((response, final))

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        response, final = self._queue.get()
        self._done = final
        return response

    def cancel(self) -> None:
        if self._cancel is not None and not self._done:
            self._cancel()


def _resolve(future: asyncio.Future, response: Any) -> None:
    if not future.done():
        future.set_result(response)


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) the server's model ``model_name``, ``config`` (JSON) overriding its
    config.pbtxt, as the repository API does: the server must run with
    ``--model-control-mode=explicit``. Raises :class:`TritonModelException` saying why it
    failed.

    ``files`` deploys a model that is not in the repository: ``{"file:1/model.onnx":
    content}``, each key a ``file:`` path inside the model folder and each value the file's
    bytes, ``config`` its configuration (required then). The server writes them into a
    private folder and loads the model from there; a later load without files reads the
    repository again."""
    if files:
        for key, content in files.items():
            if not isinstance(key, str) or not isinstance(content, (bytes, bytearray,
                                                                     memoryview)):
                raise TritonModelException(
                    f"load_model('{model_name}'): files maps 'file:<path>' names to bytes; "
                    f"got {type(key).__name__} -> {type(content).__name__}")
        files = {key: bytes(content) for key, content in files.items()}
    error = _model_calls().load_model(model_name, config, files)
    if error is not None:
        raise TritonModelException(error)


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload the server's model ``model_name`` (explicit model control mode only); the
    ensembles that call it are unloaded with it. Raises :class:`TritonModelException`."""
    error = _model_calls().unload_model(model_name, unload_dependents)
    if error is not None:
        raise TritonModelException(error)


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether the server's model ``model_name`` (version ``model_version``, or the
    latest) is ready to serve."""
    return _model_calls().is_model_ready(model_name, str(model_version))

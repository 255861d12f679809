"""Running one gRPC call in the servicer's method handlers (``listener.method_handlers``)
outside grpc's own server: naiad's HTTP/2 server (:mod:`.connection`) and the engine's end
of the calls frontend processes forward (``naiad.frontends.bridge.grpc_engine``) both do it.

A :class:`CallContext` stands in for grpc's ``ServicerContext``: the client's metadata and
deadline, the call's state, the callbacks run when it ends; ``abort`` ends the call with a
status. :func:`run_call` runs a handler on the calling thread (a thread of a pool, as on
grpc's thread-pool server: a unary inference waits on its future there, an open
``ModelStreamInfer`` holds its thread while it is open) and returns the status it ended with.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc

log = logging.getLogger("naiad.grpc")

#: grpc's status codes by number.
CODES = {code.value[0]: code for code in grpc.StatusCode}
Metadata = tuple[tuple[str, Any], ...]
#: How a handler's response message is sent: (serialized message, uncompressed).
SendMessage = Callable[[bytes, bool], object]


class Aborted(Exception):
    """What :meth:`CallContext.abort` raises, as grpc's ``abort`` raises."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class CallContext(grpc.ServicerContext):
    """The context of a call served outside grpc's server: ``metadata`` as grpc's
    ``invocation_metadata()`` gives it, ``seconds_left`` until the client's deadline (None:
    none); ``on_cancel`` (optional) ends the call on the wire when a handler cancels it, and
    ``on_end_with`` (optional) ends it at once with a status (:meth:`end_with`)."""

    def __init__(self, metadata: Metadata, seconds_left: float | None,
                 on_cancel: Callable[[], object] | None = None,
                 on_end_with: Callable[[grpc.StatusCode, str], object] | None = None) -> None:
        self._metadata = metadata
        self._deadline = None if seconds_left is None else time.monotonic() + seconds_left
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []
        self._active = True
        self._on_cancel = on_cancel
        self._on_end_with = on_end_with
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.uncompressed = False

    # --- what naiad's handlers use ------------------------------------------------------

    def invocation_metadata(self) -> Any:
        return self._metadata

    def abort(self, code: grpc.StatusCode, details: str) -> Any:
        raise Aborted(code, details)

    def abort_with_status(self, status: Any) -> Any:
        raise Aborted(status.code, status.details)

    def add_callback(self, callback: Callable[[], object]) -> bool:
        with self._lock:
            if not self._active:
                return False
            self._callbacks.append(callback)
            return True

    def is_active(self) -> bool:
        return self._active

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def cancel(self) -> None:
        if self._on_cancel is not None:
            self._on_cancel()
        self.end()

    def end_with(self, code: grpc.StatusCode, details: str) -> bool:
        """End the call now with ``code`` and ``details``, from any thread, whatever the
        handler is doing (blocked sending to a client that does not read); False when this
        context cannot (then :meth:`cancel` is what is left)."""
        if self._on_end_with is None:
            return False
        self._on_end_with(code, details)
        self.end()
        return True

    def disable_next_message_compression(self) -> None:
        self.uncompressed = True

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    # --- the rest of grpc.ServicerContext: not used by naiad's handlers -------------------

    def peer(self) -> str:
        return "unknown"

    def peer_identities(self) -> Any:
        return None

    def peer_identity_key(self) -> Any:
        return None

    def auth_context(self) -> Any:
        return {}

    def send_initial_metadata(self, initial_metadata: Any) -> None:
        pass

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        pass

    def set_compression(self, compression: Any) -> None:
        pass

    def end(self) -> None:
        """The call is over (answered, cancelled or past its deadline): run the callbacks."""
        with self._lock:
            if not self._active:
                return
            self._active = False
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a gRPC call's end callback failed")


def run_call(handlers: dict[str, grpc.RpcMethodHandler], method: str, streaming: bool,
             request: bytes, messages: Iterable[bytes], context: CallContext,
             send: SendMessage) -> tuple[grpc.StatusCode, str]:
    """Run ``method`` (``/package.Service/Name`` or ``Name``) with ``request`` (a unary
    call's message) or ``messages`` (a stream's), sending each response through ``send``;
    returns the call's status. The context is ended when the handler returns."""
    code, details = grpc.StatusCode.OK, ""
    try:
        handler = handlers.get(method.rsplit("/", 1)[-1])
        if handler is None:
            raise Aborted(grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {method}")
        serialize = handler.response_serializer
        deserialize = handler.request_deserializer
        if streaming and handler.stream_stream is not None:
            parsed = (messages if deserialize is None
                      else (deserialize(message) for message in messages))
            for response in handler.stream_stream(parsed, context):
                send(response if serialize is None else serialize(response), False)
        elif not streaming and handler.unary_unary is not None:
            response = handler.unary_unary(
                request if deserialize is None else deserialize(request), context)
            if response is not None:
                send(response if serialize is None else serialize(response),
                     context.uncompressed)
        else:
            raise Aborted(grpc.StatusCode.UNIMPLEMENTED,
                          f"{method} is not a {'stream' if streaming else 'unary'} RPC")
        if context.code is not None:
            code, details = context.code, context.details
    except Aborted as exc:
        code, details = exc.code, exc.details
    except Exception as exc:  # as grpc answers a handler that raised
        log.exception("gRPC %s failed", method)
        code, details = grpc.StatusCode.UNKNOWN, f"Exception calling application: {exc}"
    finally:
        context.end()
    return code, details


__all__ = ["CODES", "Aborted", "CallContext", "run_call"]

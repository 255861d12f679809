"""What every request to the OpenAI API passes before a route sees it: the body size limit
(``--http-max-input-size``) and the API restrictions (``--openai-restricted-api``).

Both are plain ASGI middleware, as Triton's frontend has them, with its answers: 413
``content_too_large`` (on Content-Length before any byte is read, else as the chunks
arrive), 400 ``invalid_content_length``, 401 ``invalid_auth``.
"""

from __future__ import annotations

import asyncio
import hmac
from typing import Any

from naiad_frontend_openai.errors import OpenAIError
from naiad_frontend_openai.settings import API_GROUPS

Scope = dict[str, Any]


async def _disconnected() -> dict[str, Any]:
    return {"type": "http.disconnect"}


async def _send_error(error: OpenAIError, scope: Scope, send: Any) -> None:
    await error.response()(scope, _disconnected, send)


def oversized_message(actual_bytes: int, max_bytes: int) -> str:
    return (f"Request size of {actual_bytes} bytes exceeds the maximum allowed input size "
            f"of {max_bytes} bytes. Use --http-max-input-size to increase the limit.")


class BodyLimit:
    """Refuses bodies over ``max_bytes``; reads the whole body (within ``timeout_s``) and
    replays it, so no route can be reached with more."""

    def __init__(self, app: Any, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    def _too_large(self, size: int) -> OpenAIError:
        return OpenAIError(413, oversized_message(size, self.max_bytes), "content_too_large")

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name != b"content-length":
                continue
            try:
                length = int(value)
            except ValueError:
                await _send_error(OpenAIError(400, "Invalid Content-Length header: not an "
                                              "integer.", "invalid_content_length"),
                                  scope, send)
                return
            if length < 0:
                await _send_error(OpenAIError(400, "Invalid Content-Length header: must be "
                                              "non-negative.", "invalid_content_length"),
                                  scope, send)
                return
            if length > self.max_bytes:
                await _send_error(self._too_large(length), scope, send)
                return
            break
        try:
            body = await asyncio.wait_for(self._read(receive), self.timeout_s)
        except asyncio.TimeoutError:
            await _send_error(OpenAIError(408, f"the request body did not arrive within "
                                          f"{self.timeout_s:g} s", "request_timeout"),
                              scope, send)
            return
        if isinstance(body, OpenAIError):
            await _send_error(body, scope, send)
            return
        if body is None:  # the client left
            return
        replay: dict[str, Any] | None = {"type": "http.request", "body": body,
                                         "more_body": False}
        del body

        async def replayed() -> dict[str, Any]:
            nonlocal replay
            if replay is not None:
                message, replay = replay, None
                return message
            return await receive()  # the client's disconnect, for streaming routes

        await self.app(scope, replayed, send)


    async def _read(self, receive: Any) -> bytes | OpenAIError | None:
        """The whole body; the error when it grows too large; None when the client left."""
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                return self._too_large(total)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class Restrictions:
    """Routes of a restricted API group answer only requests carrying its header value."""

    def __init__(self, app: Any, restrictions: dict[str, tuple[str, str]]) -> None:
        self.app = app
        self.rules = [(method, prefix, header.encode().lower(), value.encode())
                      for api, (header, value) in restrictions.items()
                      for method, prefix in (route.split(" ") for route in API_GROUPS[api])]

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.rules:
            method, path = scope["method"], scope["path"]
            for rule_method, prefix, header, value in self.rules:
                if method == rule_method and path.startswith(prefix):
                    given = next((v for k, v in scope["headers"] if k == header), b"")
                    if not given or not hmac.compare_digest(given, value):
                        await _send_error(OpenAIError(
                            401, f"This API is restricted, expecting header "
                                 f"'{header.decode()}' with valid value", "invalid_auth"),
                            scope, send)
                        return
                    break
        await self.app(scope, receive, send)

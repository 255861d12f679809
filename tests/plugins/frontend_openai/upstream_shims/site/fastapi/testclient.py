"""``TestClient(app)``: an HTTP client for the naiad process ``app`` stands for."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import requests


class _Response:
    def __init__(self, response: requests.Response) -> None:
        self._response = response
        self.status_code = response.status_code
        self.headers = response.headers

    def json(self) -> Any:
        return self._response.json()

    @property
    def text(self) -> str:
        return self._response.text

    @property
    def content(self) -> bytes:
        return self._response.content

    def iter_lines(self) -> Iterator[str]:
        yield from self._response.iter_lines(decode_unicode=True)


class TestClient:
    __test__ = False

    def __init__(self, app: Any) -> None:
        self.base_url = app.url
        self.session = requests.Session()

    def __enter__(self) -> TestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.session.close()

    def request(self, method: str, path: str, json: Any = None, content: Any = None,
                headers: dict | None = None, stream: bool = False) -> _Response:
        return _Response(self.session.request(method, self.base_url + path, json=json,
                                              data=content, headers=headers, timeout=120,
                                              stream=stream))

    def get(self, path: str, **kwargs: Any) -> _Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> _Response:
        return self.request("POST", path, **kwargs)

    @contextlib.contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[_Response]:
        response = self.request(method, path, stream=True, **kwargs)
        try:
            yield response
        finally:
            response._response.close()

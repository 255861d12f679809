"""``GET /v2/openapi.json``: the OpenAPI 3 description of naiad's HTTP/REST routes.

One description, ``openapi_v2.json`` beside this module: the server answers it (with
naiad's version), the HTTP fuzzer of ``tests/hardening`` generates its requests from it
(narrowed to its test repository), and ``tests/docs/test_openapi.py`` checks that it is a
valid OpenAPI document whose paths and methods are exactly the routes the frontend serves.
MLServer serves the same kind of document; Triton serves none.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from naiad import __version__

DOCUMENT = Path(__file__).with_name("openapi_v2.json")
PATH = "/v2/openapi.json"


def description() -> dict[str, Any]:
    """The description as data (a fresh copy), ``info.version`` naiad's version."""
    document = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    document["info"]["version"] = __version__
    return document


@functools.cache
def _body() -> bytes:
    return json.dumps(description(), separators=(",", ":")).encode()


async def openapi_document(request: Request) -> Response:
    """The route's endpoint: the document, read once."""
    return Response(_body(), media_type="application/json")

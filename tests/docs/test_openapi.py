"""``GET /v2/openapi.json`` (issue 33 item 9): a valid OpenAPI 3 document whose paths and
methods are exactly the routes naiad's HTTP frontend serves, answered by a real server."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from naiad import __version__
from naiad.frontends.http.app import HTTPFrontend
from naiad.frontends.http.openapi import PATH, description

validate = pytest.importorskip(
    "openapi_spec_validator", reason="openapi-spec-validator (requirements-test.txt) is not "
    "installed").validate
METHODS = ("get", "post", "put", "delete", "patch")
ANSWER_TIMEOUT_S = 30.0


def _served_routes() -> set[tuple[str, str]]:
    """(path, method) of every route of the frontend's table (HEAD, Starlette's companion
    of GET, left out). Built without a server: the table only names endpoints."""
    frontend = HTTPFrontend.__new__(HTTPFrontend)
    frontend.server = None  # type: ignore[assignment]
    frontend.requirements = {}
    return {(route.path, method.lower()) for route in frontend._routes()
            for method in route.methods or () if method != "HEAD"}


def _described_routes(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(path, method) for path, item in document["paths"].items()
            for method in item if method in METHODS}


def test_the_description_is_valid_openapi() -> None:
    validate(description())


def test_the_description_has_every_route_and_no_other() -> None:
    served, described = _served_routes(), _described_routes(description())
    assert not served - described, f"served, not described: {sorted(served - described)}"
    assert not described - served, f"described, not served: {sorted(described - served)}"


def test_every_operation_says_what_it_does_and_its_group() -> None:
    groups = {tag["name"] for tag in description()["tags"]}
    for path, item in description()["paths"].items():
        for method in set(item) & set(METHODS):
            operation = item[method]
            assert operation.get("summary"), f"{method} {path}: no summary"
            assert set(operation.get("tags", ())) <= groups and operation.get("tags"), path


def test_the_server_answers_the_document_with_its_version(server: Any) -> None:
    with urllib.request.urlopen(f"http://{server.http_url}{PATH}",
                                timeout=ANSWER_TIMEOUT_S) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"] == "application/json"
        document = json.load(answer)
    assert document["info"]["version"] == __version__
    assert document == description()

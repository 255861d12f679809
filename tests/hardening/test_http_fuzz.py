"""Triton's qa/L0_http_fuzz, ported: a real fuzzer against naiad's HTTP routes. schemathesis
reads naiad's own OpenAPI description (the one ``GET /v2/openapi.json`` answers, narrowed to
this test's repository) and generates requests that fit it and requests that break it (wrong
types, missing fields, odd path values, bodies that are not the media type said); hypothesis
drives a bounded number of them. No answer may be a 5xx, and the server is alive and serving
after. Short in CI, many more examples with -m long."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import requests
import schemathesis
import tritonclient.http as httpclient
from hardening_support import ANSWER_TIMEOUT_S, hardening_repository
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from naiad.frontends.http.openapi import description
from naiad.testing import naiad_server

# The test repository's models (one missing), inputs and outputs: what the fuzzer names.
MODELS = ["add_sub", "identity_fp32", "identity_bytes", "identity_batch", "no_such_model"]
EXAMPLES = 150  # per generation mode, in CI
LONG_EXAMPLES = 5000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Its own server: the fuzzer unloads and reloads models (explicit control, so that the
    repository routes parse their bodies)."""
    repo = hardening_repository(tmp_path_factory.mktemp("fuzz"))
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=*") as process:
        yield process


def fuzz_description() -> dict[str, Any]:
    """naiad's OpenAPI description with path values, tensor names and sizes narrowed to the
    test repository, so that fitting requests reach the models."""
    document = description()
    components = document["components"]
    components["parameters"]["model"]["schema"] = {"type": "string", "enum": MODELS}
    components["parameters"]["version"]["schema"]["pattern"] = "^[0-9]{1,3}$"
    components["parameters"]["region"]["schema"]["maxLength"] = 40
    tensor = components["schemas"]["Tensor"]["properties"]
    tensor["name"] = {"type": "string", "enum": ["INPUT0", "INPUT1"]}
    tensor["shape"] = {"type": "array", "maxItems": 4,
                       "items": {"type": "integer", "minimum": 0, "maximum": 64}}
    tensor["data"] = {"type": "array", "maxItems": 64, "items": {
        "oneOf": [{"type": "number"}, {"type": "string"}, {"type": "boolean"}]}}
    output = components["schemas"]["RequestedOutput"]["properties"]
    output["name"] = {"type": "string", "enum": ["OUTPUT0", "OUTPUT1"]}
    request = components["schemas"]["InferenceRequest"]["properties"]
    request["inputs"]["maxItems"] = request["outputs"]["maxItems"] = 3
    return document


def fuzz(server, mode: GenerationMode, examples: int) -> None:
    schema = schemathesis.openapi.from_dict(fuzz_description())
    base_url = f"http://{server.http_url}"
    session = requests.Session()

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=schema.as_strategy(generation_mode=mode))
    def one_request(case) -> None:
        response = case.call(base_url=base_url, session=session, timeout=ANSWER_TIMEOUT_S)
        # 503 (UNAVAILABLE) is Triton's answer for a version the fuzzer itself unloaded.
        unloaded = response.status_code == 503 and "is not at ready state" in response.text
        assert response.status_code < 500 or unloaded, (
            f"{case.method} {case.formatted_path} {case.body!r:.300} -> "
            f"{response.status_code} {response.text[:300]}")

    try:
        one_request()
    finally:
        session.close()
    assert server.process.poll() is None, server.log()[-3000:]
    with httpclient.InferenceServerClient(server.http_url) as client:
        client.load_model("identity_fp32")  # whatever the fuzzer did to it
        tensor = httpclient.InferInput("INPUT0", [3], "FP32")
        data = np.array([1, 2, 3], np.float32)
        tensor.set_data_from_numpy(data)
        np.testing.assert_array_equal(
            client.infer("identity_fp32", [tensor]).as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                         ids=["fitting", "breaking"])
def test_fuzzed_requests_get_no_5xx(server, mode):
    fuzz(server, mode, EXAMPLES)


@pytest.mark.long
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                         ids=["fitting", "breaking"])
def test_many_fuzzed_requests_get_no_5xx(server, mode):
    fuzz(server, mode, LONG_EXAMPLES)

"""Which requests share a response cache entry: naiad's key against the real Triton 2.51.

Each case sends two requests with the same input data to ``add_sub_cached`` (both outputs
computed, ``response_cache { enable: true }``) on both servers, data no other case uses, and
reads from the model's statistics whether the second was a cache hit, and which outputs it
was answered with. Triton's key is the model, version and the inputs' names and bytes: the
requested outputs and the request parameters are not in it, and a hit answers with the
outputs of the response that was stored, whatever the second request asked for.

naiad follows it wherever that answer is the one the request asked for: a request naming
every output and one naming none share an entry (issue 33 item 7), as do outputs or inputs
named in another order, and serving parameters (``binary_data_output``, ``priority``).
It keys what Triton does not where Triton's hit answers something else than was asked: a
subset of the outputs (Triton answers the stored outputs, missing one asked for or adding
one that was not), and a parameter the model can read (docs/compatibility.md, "Deliberate
differences"; docs/response-cache.md).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from compat_helpers import http_request, on_both

pytestmark = pytest.mark.compat

COMPAT_MODEL_REPOSITORY = Path(__file__).resolve().parent / "cache_repository"
COMPAT_SERVER_ARGS = ["--cache-config", "local,size=1048576"]
COMPAT_EXPECT_READY = ("add_sub", "add_sub_cached", "strings_cached")
MODEL = "add_sub_cached"
BOTH = ["OUTPUT0", "OUTPUT1"]


@dataclass(frozen=True)
class Send:
    """One request's variations: the outputs it names (None: none), its parameters, the
    order of its inputs."""

    outputs: list[str] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    inputs: tuple[str, str] = ("INPUT0", "INPUT1")


@dataclass(frozen=True)
class Case:
    name: str
    first: Send
    second: Send
    #: the second request: hit or miss, and the outputs of its answer, on each server
    triton: tuple[bool, list[str]]
    naiad: tuple[bool, list[str]]


CASES = [
    Case("the same request twice", Send(), Send(), (True, BOTH), (True, BOTH)),
    Case("every output named, then none", Send(BOTH), Send(), (True, BOTH), (True, BOTH)),
    Case("none named, then every output", Send(), Send(BOTH), (True, BOTH), (True, BOTH)),
    Case("the outputs named in another order", Send(BOTH), Send(["OUTPUT1", "OUTPUT0"]),
         (True, BOTH), (True, BOTH)),
    Case("the inputs in another order", Send(), Send(inputs=("INPUT1", "INPUT0")),
         (True, BOTH), (True, BOTH)),
    Case("binary_data_output", Send(), Send(parameters={"binary_data_output": False}),
         (True, BOTH), (True, BOTH)),
    Case("a priority", Send(), Send(parameters={"priority": 1}), (True, BOTH), (True, BOTH)),
    # Triton's hit answers the stored outputs: one asked for is missing, or one more is there.
    Case("OUTPUT0 named, then none", Send(["OUTPUT0"]), Send(),
         (True, ["OUTPUT0"]), (False, BOTH)),
    Case("none named, then OUTPUT0", Send(), Send(["OUTPUT0"]),
         (True, BOTH), (False, ["OUTPUT0"])),
    Case("OUTPUT0 named, then OUTPUT1", Send(["OUTPUT0"]), Send(["OUTPUT1"]),
         (True, ["OUTPUT0"]), (False, ["OUTPUT1"])),
    # A model reads its request's parameters: Triton answers one computed for others.
    Case("a parameter the model can read", Send(parameters={"scale": 1}),
         Send(parameters={"scale": 2}), (True, BOTH), (False, BOTH)),
]

_first_values = itertools.count(1000)


def _infer(server: Any, send: Send, first_value: float) -> list[str]:
    data = {"INPUT0": [first_value, 1.0, 2.0, 3.0], "INPUT1": [0.5] * 4}
    body: dict[str, Any] = {"inputs": [{"name": name, "datatype": "FP32", "shape": [4],
                                        "data": data[name]} for name in send.inputs]}
    if send.outputs is not None:
        body["outputs"] = [{"name": name} for name in send.outputs]
    if send.parameters:
        body["parameters"] = send.parameters
    result = http_request(server.http_port, "POST", f"/v2/models/{MODEL}/infer", body)
    assert result.status == 200, result
    return sorted(output["name"] for output in result.json()["outputs"])


def _hits(server: Any) -> int:
    result = http_request(server.http_port, "GET", f"/v2/models/{MODEL}/stats")
    assert result.status == 200, result
    return result.json()["model_stats"][0]["inference_stats"]["cache_hit"]["count"]


def _second_request(case: Case, value: float) -> Any:
    def run(server: Any) -> tuple[bool, list[str]]:
        _infer(server, case.first, value)
        before = _hits(server)
        outputs = _infer(server, case.second, value)
        return _hits(server) > before, outputs

    return run


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_which_requests_share_a_cache_entry(servers: Any, strict: bool, case: Case) -> None:
    t, n = on_both(_second_request(case, float(next(_first_values))),
                   servers.triton, servers.naiad)
    assert t == case.triton, f"{case.name}: Triton answered {t}, the table says {case.triton}"
    if strict:
        assert n == case.naiad, f"{case.name}: naiad answered {n}, expected {case.naiad}"
        if case.naiad[0] is case.triton[0]:
            assert n == t, case.name

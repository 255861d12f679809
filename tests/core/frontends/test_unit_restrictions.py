"""Endpoint restrictions and header forwarding, piece by piece: parsing the flags, matching
headers, the API group of every RPC, and that both features cost nothing when off. The
end-to-end tests are test_restricted_api.py and test_header_forwarding.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from starlette.routing import Route
from tritonclient.grpc import service_pb2

from naiad.frontends.forwarding import compile_pattern, header_forwarder
from naiad.frontends.grpc.service import InferenceServicer
from naiad.frontends.http.app import HTTPFrontend
from naiad.frontends.restrictions import (
    API_GROUPS,
    GRPC_RPC_GROUPS,
    GRPCRequirement,
    HTTPRequirement,
    Restriction,
    grpc_requirements,
    http_requirements,
    parse_restrictions,
)

SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]


# --- parsing ---------------------------------------------------------------------------------


def test_a_value_may_hold_colons_and_equals_signs():
    # tritonserver splits at the first ":" and the first "=" after it.
    assert parse_restrictions(["model-config,statistics:Admin-Key=se=cr:et"], "--f") == {
        "model-config": Restriction("Admin-Key", "se=cr:et"),
        "statistics": Restriction("Admin-Key", "se=cr:et"),
    }


@pytest.mark.parametrize("spec", ["inference", "inference:key", "inference:=v", ":k=v",
                                  "inference;metadata:k=v"])
def test_malformed_specifications_are_refused(spec):
    with pytest.raises(ValueError, match="--f"):
        parse_restrictions([spec], "--f")


# --- matching headers ------------------------------------------------------------------------


def test_http_requirement_ignores_name_case_but_not_value_case():
    need = HTTPRequirement.of(Restriction("Admin-Key", "Secret"))
    assert need.met_by([(b"host", b"x"), (b"admin-key", b"Secret")])
    assert not need.met_by([(b"admin-key", b"secret")])
    assert not need.met_by([(b"admin-key", b"Secret ")])
    assert not need.met_by([(b"other", b"Secret")])
    assert not need.met_by([])
    # The message names the key as the command line wrote it, as tritonserver does.
    assert need.refusal == b'{"error":"This API is restricted, expecting header \'Admin-Key\'"}'


def test_only_the_first_header_of_that_name_counts():
    need = HTTPRequirement.of(Restriction("k", "v"))
    assert need.met_by([(b"k", b"v"), (b"k", b"wrong")])
    assert not need.met_by([(b"k", b"wrong"), (b"k", b"v")])
    grpc_need = GRPCRequirement.of(Restriction("k", "v"))
    assert grpc_need.met_by([("triton-grpc-protocol-k", "v"), ("triton-grpc-protocol-k", "x")])
    assert not grpc_need.met_by([("triton-grpc-protocol-k", "x"),
                                 ("triton-grpc-protocol-k", "v")])


def test_grpc_requirement_wants_the_prefixed_key():
    need = GRPCRequirement.of(Restriction("admin", "v"))
    assert need.met_by([("triton-grpc-protocol-admin", "v")])
    assert not need.met_by([("admin", "v")])
    assert not need.met_by([("triton-grpc-protocol-admin", b"v")])
    assert need.refusal == ("This protocol is restricted, expecting header "
                            "'triton-grpc-protocol-admin'")


# --- API groups ------------------------------------------------------------------------------


def test_every_rpc_of_the_service_has_an_api_group():
    # A new RPC without a group would be served to everyone whatever the restrictions.
    assert set(GRPC_RPC_GROUPS) == {method.name for method in SERVICE.methods}
    assert set(GRPC_RPC_GROUPS.values()) == set(API_GROUPS)


def test_grpc_requirements_cover_only_the_restricted_groups():
    needs = grpc_requirements({"inference": Restriction("k", "v")})
    assert set(needs) == {"ModelInfer", "ModelStreamInfer"}
    assert needs["ModelInfer"].key == "triton-grpc-protocol-k"
    assert http_requirements({}) == {} and grpc_requirements({}) == {}


def fake_server() -> SimpleNamespace:
    return SimpleNamespace(options=SimpleNamespace(max_input_size=1024, max_response_size=2048,
                                                   stream_max_buffered_responses=16,
                                                   stream_max_buffered_responses_total=64),
                           shared_memory=None)


def test_every_http_route_is_guarded_when_every_group_is_restricted():
    restricted = {api: Restriction(api, "v") for api in API_GROUPS}
    frontend = HTTPFrontend(fake_server(), restricted=restricted)
    routes = frontend.router.routes
    assert routes and all(type(route) is not Route for route in routes)
    assert "_infer" in vars(frontend)
    assert frontend.fast_infer is None  # the ASGI path checks the inference header


def test_restrictions_and_forwarding_cost_nothing_when_off():
    # No restriction: the plain routes, the plain inference method, no forwarder to call.
    frontend = HTTPFrontend(fake_server())
    # (Control POSTs have their content type checked, restricted or not.)
    assert all(type(route) is Route or (route.requirement is None and route.control)
               for route in frontend.router.routes)
    assert "_infer" not in vars(frontend) and frontend.route.forwarder is None
    assert frontend.fast_infer is frontend.route  # naiad's protocol may answer inferences
    loop = asyncio.new_event_loop()
    try:
        servicer = InferenceServicer(fake_server(), loop)
        guarded = InferenceServicer(fake_server(), loop,
                                    restricted={"inference": Restriction("k", "v")})
    finally:
        loop.close()
    assert not set(vars(servicer)) & set(GRPC_RPC_GROUPS) and servicer.forwarder is None
    assert set(vars(guarded)) & set(GRPC_RPC_GROUPS) == {"ModelInfer", "ModelStreamInfer"}


# --- header forwarding -----------------------------------------------------------------------


def test_the_pattern_is_searched_for_and_ignores_case():
    pattern = compile_pattern("my_header.*")
    assert pattern is not None
    assert pattern.search("my_header_1") and pattern.search("x-my_header")
    assert pattern.search("MY_HEADER_2")
    assert not pattern.search("my-header")
    assert compile_pattern("") is None


def test_a_leading_case_switch_makes_the_pattern_case_sensitive():
    # RE2's "(?-i)", which tritonserver documents; Python's re does not take it as such.
    pattern = compile_pattern("(?-i)MY_HEADER.*")
    assert pattern is not None
    assert pattern.search("MY_HEADER_1") and not pattern.search("my_header_1")


def test_forwarded_headers_are_strings_and_control_parameters_are_never_forwarded():
    forwarder = header_forwarder(".*")
    assert forwarder is not None
    assert forwarder.from_http([(b"x-a", b"1"), (b"priority", b"3"), (b"sequence_id", b"9"),
                                (b"binary_data_output", b"true"), (b"x-b", "é".encode()),
                                (b"x-a", b"2")]) == {"x-a": "2", "x-b": "é"}
    assert forwarder.from_grpc([("x-a", "1"), ("timeout", "5"), ("x-bin", b"\x00"),
                                ("sequence_start", "1")]) == {"x-a": "1"}


def test_no_pattern_no_forwarder():
    assert header_forwarder("") is None

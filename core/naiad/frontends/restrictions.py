"""Endpoint restrictions: tritonserver's ``--http-restricted-api`` and
``--grpc-restricted-protocol``.

Each flag names a group of APIs and a header that a request to any of them must carry with
an exact value, ``<api>,<api>...:<key>=<value>``. Over gRPC the header is
``triton-grpc-protocol-<key>``, over HTTP ``<key>`` itself. An API may belong to one group.

What tritonserver 2.51 does, observed, and naiad does the same: the specification splits at
its first ``:`` and the first ``=`` after it (the value may hold both); the value must match
byte for byte, and only the first header of that name counts; an HTTP header name ignores
case, a gRPC key is taken as written (gRPC keys are lowercase, so an uppercase key can never
be met). A refused HTTP request gets 403 and
``{"error":"This API is restricted, expecting header '<key>'"}``; a refused gRPC call (a
stream as a whole) gets UNAVAILABLE, "This protocol is restricted, expecting header
'triton-grpc-protocol-<key>'".
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import NamedTuple

import orjson

API_GROUPS = ("health", "metadata", "inference", "shared-memory", "model-config",
              "model-repository", "statistics", "trace", "logging")

GRPC_HEADER_PREFIX = "triton-grpc-protocol-"

# tritonserver's answers to a request to a restricted API without the header; the gRPC
# status is in naiad.frontends.grpc.service (this module must not import grpc).
HTTP_REFUSAL_STATUS = 403
HTTP_REFUSAL = "This API is restricted, expecting header '{key}'"
GRPC_REFUSAL = "This protocol is restricted, expecting header '{key}'"


class Restriction(NamedTuple):
    """A request to a restricted API needs header ``key`` set to ``value``."""

    key: str
    value: str


def parse_restrictions(specs: list[str], flag: str) -> dict[str, Restriction]:
    """``{api: Restriction}`` from the flag's values; ValueError names what is wrong."""
    restricted: dict[str, Restriction] = {}
    for spec in specs:
        # As tritonserver: the first ":" ends the APIs, the first "=" after it the key.
        apis, colon, setting = spec.partition(":")
        key, equals, value = setting.partition("=")
        if not colon or not equals or not apis or not key:
            raise ValueError(f"{flag}={spec}: expected <api>,<api>...:<key>=<value>")
        for api in apis.split(","):
            api = api.strip()
            if api not in API_GROUPS:
                raise ValueError(f"{flag}={spec}: unknown API '{api}'; known: "
                                 f"{', '.join(API_GROUPS)}")
            if api in restricted:
                raise ValueError(f"{flag}: API '{api}' is in more than one group")
            restricted[api] = Restriction(key.strip(), value)
    return restricted


# --- enforcing them -----------------------------------------------------------------------

# The API group of each RPC of ``inference.GRPCInferenceService``, as tritonserver has them.
GRPC_RPC_GROUPS: dict[str, str] = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}


class HTTPRequirement(NamedTuple):
    """The header an HTTP request to a restricted API must carry, as ASGI sees headers."""

    name: bytes  # lowercase: ASGI servers lowercase header names (HTTP names ignore case)
    value: bytes
    refusal: bytes  # the body of the answer to a request without it

    @classmethod
    def of(cls, restriction: Restriction) -> HTTPRequirement:
        # The value is compared with the bytes the command line held.
        return cls(os.fsencode(restriction.key.lower()), os.fsencode(restriction.value),
                   orjson.dumps({"error": HTTP_REFUSAL.format(key=restriction.key)}))

    def met_by(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        """Whether the first header of that name has exactly that value."""
        for name, value in headers:
            if name == self.name:
                return value == self.value
        return False


class GRPCRequirement(NamedTuple):
    """The metadata entry a gRPC call to a restricted API must carry."""

    key: str
    value: str
    refusal: str  # the message of the answer to a call without it

    @classmethod
    def of(cls, restriction: Restriction) -> GRPCRequirement:
        key = GRPC_HEADER_PREFIX + restriction.key
        return cls(key, restriction.value, GRPC_REFUSAL.format(key=key))

    def met_by(self, metadata: Iterable[tuple[str, str | bytes]]) -> bool:
        """Whether the first entry with that key has exactly that value."""
        for key, value in metadata:
            if key == self.key:
                return value == self.value
        return False


def http_requirements(restricted: dict[str, Restriction]) -> dict[str, HTTPRequirement]:
    """``{api group: requirement}`` for the restricted groups only."""
    return {api: HTTPRequirement.of(r) for api, r in restricted.items()}


def grpc_requirements(restricted: dict[str, Restriction]) -> dict[str, GRPCRequirement]:
    """``{RPC name: requirement}`` for the RPCs of the restricted groups only."""
    return {rpc: GRPCRequirement.of(restricted[api]) for rpc, api in GRPC_RPC_GROUPS.items()
            if api in restricted}

"""Server URLs, readiness waits and model configs over tritonclient (``pytriton.client.utils``)."""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.parse
from typing import Any

from tritonclient.utils import InferenceServerException

from naiad.pytriton.client.exceptions import (
    PyTritonClientInvalidUrlError,
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
)
from naiad.pytriton.model_config.parser import parse_model_config
from naiad.pytriton.model_config.triton_model_config import TritonModelConfig

DEFAULT_HTTP_PORT = 8000
DEFAULT_GRPC_PORT = 8001
SECONDS = 1.0
POLL_INTERVAL = 0.05 * SECONDS
TOKEN_HEADER = "triton-access-token"
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


@dataclasses.dataclass
class TritonUrl:
    """A server URL: ``grpc://host:8001``, ``http://host``, ``host:8000`` or ``host`` (HTTP,
    port 8000 by default; 8001 for grpc)."""

    scheme: str
    hostname: str
    port: int

    @classmethod
    def from_url(cls, url: str) -> TritonUrl:
        if not isinstance(url, str):
            raise PyTritonClientInvalidUrlError(f"Invalid url {url}. Url must be a string.")
        try:
            parsed = urllib.parse.urlparse(url)
            if (not parsed.scheme and "://" not in parsed.path) or (parsed.scheme
                                                                    and not parsed.netloc):
                parsed = urllib.parse.urlparse(f"http://{url}")
            scheme = parsed.scheme.lower()
            if scheme not in ("grpc", "http"):
                raise ValueError(f"Invalid scheme {scheme}. Only grpc and http are supported.")
            port = parsed.port or {"grpc": DEFAULT_GRPC_PORT, "http": DEFAULT_HTTP_PORT}[scheme]
        except ValueError as exc:
            raise PyTritonClientInvalidUrlError(f"Invalid url {url}") from exc
        return cls(scheme, parsed.hostname or "localhost", port)

    @property
    def with_scheme(self) -> str:
        return f"{self.scheme}://{self.hostname}:{self.port}"

    @property
    def without_scheme(self) -> str:
        return f"{self.hostname}:{self.port}"


def client_init_arguments(url: TritonUrl, timeout_s: float) -> dict[str, float]:
    """tritonclient's InferenceServerClient arguments for a PyTriton client: over HTTP the
    inference timeout bounds each network call and the connection; tritonclient.grpc takes
    a timeout per infer call only."""
    if url.scheme != "http":
        return {}
    return {"network_timeout": timeout_s, "connection_timeout": timeout_s}


def create_auth_headers(access_token: str, protocol: str) -> dict[str, str]:
    """The header a restricted API asks for: ``triton-access-token`` over HTTP, with gRPC's
    ``triton-grpc-protocol-`` prefix over gRPC (as tritonserver reads them)."""
    if not access_token:
        raise ValueError("access_token must not be empty")
    if protocol == "http":
        return {TOKEN_HEADER: access_token}
    if protocol == "grpc":
        return {GRPC_HEADER_PREFIX + TOKEN_HEADER: access_token}
    raise ValueError(f"protocol must be http or grpc, not {protocol!r}")


def _is(call: Any) -> bool:
    try:
        return bool(call())
    except (InferenceServerException, OSError, ConnectionError):
        return False
    except Exception:  # grpc's own errors while the server starts
        return False


def wait_for_server_ready(client: Any, timeout_s: float,
                          headers: dict[str, str] | None = None) -> None:
    """Until the server is live and ready; PyTritonClientTimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if _is(lambda: client.is_server_live(headers=headers)
               and client.is_server_ready(headers=headers)):
            return
        if time.monotonic() >= deadline:
            raise PyTritonClientTimeoutError(
                f"Waiting for server to be ready timed out after {timeout_s} s")
        time.sleep(POLL_INTERVAL)


def wait_for_model_ready(client: Any, model_name: str, model_version: str | None,
                         timeout_s: float, headers: dict[str, str] | None = None) -> None:
    """Until the server and the model are ready; PyTritonClientTimeoutError after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    wait_for_server_ready(client, timeout_s, headers)
    while True:
        if _is(lambda: client.is_model_ready(model_name, model_version or "",
                                             headers=headers)):
            return
        if time.monotonic() >= deadline:
            raise PyTritonClientTimeoutError(
                f"Waiting for model {model_name} to be ready timed out after {timeout_s} s")
        time.sleep(POLL_INTERVAL)


def get_model_config(client: Any, model_name: str, model_version: str | None,
                     timeout_s: float, headers: dict[str, str] | None = None
                     ) -> TritonModelConfig:
    """The model's config from the server (waiting for the model up to ``timeout_s``)."""
    wait_for_model_ready(client, model_name, model_version, timeout_s, headers)
    try:
        found = client.get_model_config(model_name, model_version or "", headers=headers)
    except InferenceServerException as exc:
        raise PyTritonClientModelUnavailableError(
            f"Model {model_name} (version {model_version or 'latest'}) is unavailable: "
            f"{exc.message()}") from exc
    if not isinstance(found, dict):  # gRPC: a ModelConfigResponse message
        from google.protobuf import json_format

        found = json_format.MessageToDict(found.config, preserving_proto_field_name=True)
        found = json.loads(json.dumps(found))
    return parse_model_config(found)

"""The source's settings: environment variables, read once per repository when it is opened.

Every timeout and retry bound of the Google client is named here with its unit; the
defaults are small, so that an endpoint that is down fails a listing within seconds (the
core lists again at its next poll). A value that cannot be read is refused with a message
naming the variable and what it expects; nothing given is ever ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from naiad.errors import invalid_arg
from naiad.settings import integer, read_env, seconds

SECONDS = 1.0

# The emulator endpoints, in the order they are read: Triton's (google-cloud-cpp reads it),
# then the Python client's. Either one means anonymous requests (emulators check none).
EMULATOR_ENVS = ("CLOUD_STORAGE_EMULATOR_ENDPOINT", "STORAGE_EMULATOR_HOST")
# naiad's own: a JSON API endpoint other than Google's (a private or Private Service Connect
# endpoint) that is dialled with the usual credentials.
ENDPOINT_ENV = "NAIAD_GCS_ENDPOINT"
GOOGLE_ENDPOINT = "https://storage.googleapis.com"

CONNECT_TIMEOUT_ENV = "NAIAD_GCS_CONNECT_TIMEOUT_S"
READ_TIMEOUT_ENV = "NAIAD_GCS_READ_TIMEOUT_S"
RETRY_DEADLINE_ENV = "NAIAD_GCS_RETRY_DEADLINE_S"
PAGE_SIZE_ENV = "NAIAD_GCS_LIST_PAGE_SIZE"
MAX_CONNECTIONS_ENV = "NAIAD_GCS_MAX_CONNECTIONS"

# Longest wait for a TCP (and TLS) connection to the endpoint, each attempt.
DEFAULT_CONNECT_TIMEOUT_S = 3 * SECONDS
# Longest silence while waiting for an answer or for the next bytes of a download, each
# attempt (not the whole download: a large model file takes as long as it takes).
DEFAULT_READ_TIMEOUT_S = 15 * SECONDS
# How long a failed request is retried (connection refused or reset, timeouts, 429 and
# 5xx), with backoff from RETRY_INITIAL_DELAY_S; 0 tries once. The Google client's own
# default is 120 s, which would hold a start-up or a poll for two minutes.
DEFAULT_RETRY_DEADLINE_S = 5 * SECONDS
RETRY_INITIAL_DELAY_S = 0.25 * SECONDS
RETRY_MAX_DELAY_S = 2 * SECONDS
# Objects per listing request; 1000 is the most the JSON API returns in one page.
DEFAULT_LIST_PAGE_SIZE = 1000
MAX_LIST_PAGE_SIZE = 1000
# HTTP connections kept open to the endpoint; the core downloads several files at once.
DEFAULT_MAX_CONNECTIONS = 16


@dataclass(frozen=True)
class Endpoint:
    """Where requests go. ``url`` None is Google's own endpoint."""

    url: str | None
    #: True for an emulator: requests carry no credentials
    emulator: bool
    #: the environment variable that named it (for messages), None for Google's
    env: str | None

    def describe(self) -> str:
        """The endpoint as messages name it."""
        if self.url is None:
            return GOOGLE_ENDPOINT
        return f"{self.url} (from {self.env})"


@dataclass(frozen=True)
class GcsSettings:
    """The Google client's bounds, in seconds, objects and connections."""

    endpoint: Endpoint
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    retry_deadline_s: float = DEFAULT_RETRY_DEADLINE_S
    list_page_size: int = DEFAULT_LIST_PAGE_SIZE
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    @property
    def timeout(self) -> tuple[float, float]:
        """``(connect, read)`` as requests takes it."""
        return (self.connect_timeout_s, self.read_timeout_s)


def settings_from_environ(environ: Mapping[str, str] | None = None) -> GcsSettings:
    """The settings the environment gives (``os.environ`` by default)."""
    env = os.environ if environ is None else environ
    return GcsSettings(
        endpoint=endpoint_from_environ(env),
        connect_timeout_s=read_env(env, CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT_S, seconds),
        read_timeout_s=read_env(env, READ_TIMEOUT_ENV, DEFAULT_READ_TIMEOUT_S, seconds),
        retry_deadline_s=read_env(env, RETRY_DEADLINE_ENV, DEFAULT_RETRY_DEADLINE_S, seconds,
                              allow_zero=True),
        list_page_size=read_env(env, PAGE_SIZE_ENV, DEFAULT_LIST_PAGE_SIZE, integer, minimum=1,
                            maximum=MAX_LIST_PAGE_SIZE, unit="objects"),
        max_connections=read_env(env, MAX_CONNECTIONS_ENV, DEFAULT_MAX_CONNECTIONS, integer,
                             minimum=1, unit="connections"),
    )


def endpoint_from_environ(env: Mapping[str, str]) -> Endpoint:
    """An emulator named by ``CLOUD_STORAGE_EMULATOR_ENDPOINT`` or ``STORAGE_EMULATOR_HOST``
    (``http://`` is assumed without a scheme, as the Python client assumes it), else
    ``NAIAD_GCS_ENDPOINT``, else Google's endpoint."""
    for name in EMULATOR_ENVS:
        if env.get(name, "").strip():
            return Endpoint(_endpoint_url(name, env[name]), emulator=True, env=name)
    if env.get(ENDPOINT_ENV, "").strip():
        return Endpoint(_endpoint_url(ENDPOINT_ENV, env[ENDPOINT_ENV]), emulator=False,
                        env=ENDPOINT_ENV)
    return Endpoint(None, emulator=False, env=None)


def _endpoint_url(name: str, value: str) -> str:
    text = value.strip()
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok \
            or parts.query or parts.fragment:
        raise invalid_arg(f"{name}='{value}' is not an endpoint: expected HOST:PORT or "
                          f"http(s)://HOST[:PORT]")
    return text.rstrip("/")

"""The client's timeouts, retries and listing page size: named environment variables with
their units, small by default so that a store that is down fails within seconds."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from naiad.errors import invalid_arg

SECONDS = 1.0

CONNECT_TIMEOUT_VAR = "NAIAD_AZURE_CONNECT_TIMEOUT_S"
READ_TIMEOUT_VAR = "NAIAD_AZURE_READ_TIMEOUT_S"
RETRIES_VAR = "NAIAD_AZURE_RETRIES"
RETRY_BACKOFF_VAR = "NAIAD_AZURE_RETRY_BACKOFF_S"
PAGE_SIZE_VAR = "NAIAD_AZURE_LIST_PAGE_SIZE"

#: the largest page the Blob service returns for one List Blobs call
MAX_PAGE_SIZE = 5000


@dataclass(frozen=True, slots=True)
class AzureSettings:
    """How the Blob service client waits and retries."""

    #: longest wait for a TCP (and TLS) connection to the endpoint
    connect_timeout_s: float = 5 * SECONDS
    #: longest wait between two reads of one response (a large blob's download may take
    #: longer in total; it fails only if the endpoint stops sending for this long)
    read_timeout_s: float = 30 * SECONDS
    #: retries of a call that failed to connect, timed out or got a 408 or 5xx answer
    retries: int = 2
    #: pause before each retry
    retry_backoff_s: float = 0.5 * SECONDS
    #: blobs asked for per List Blobs call (the service's maximum is 5000)
    list_page_size: int = MAX_PAGE_SIZE


def settings_from_env(environ: Mapping[str, str] | None = None) -> AzureSettings:
    """The settings the environment variables give, defaults for those unset;
    :func:`invalid_arg` naming the variable and what it expects for a bad value."""
    env = os.environ if environ is None else environ
    defaults = AzureSettings()

    def number(name: str, default: float, *, positive: bool) -> float:
        raw = env.get(name, "").strip()
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not value >= 0 or (positive and value == 0) or value == float("inf"):
            kind = "a number of seconds greater than 0" if positive else \
                "a number of seconds, 0 or more"
            raise invalid_arg(f"{name}={raw!r}: expected {kind}")
        return value

    def whole(name: str, default: int, low: int, high: int) -> int:
        raw = env.get(name, "").strip()
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise invalid_arg(f"{name}={raw!r}: expected a whole number from {low} to {high}")
        return value

    return AzureSettings(
        connect_timeout_s=number(CONNECT_TIMEOUT_VAR, defaults.connect_timeout_s,
                                 positive=True),
        read_timeout_s=number(READ_TIMEOUT_VAR, defaults.read_timeout_s, positive=True),
        retries=whole(RETRIES_VAR, defaults.retries, 0, 20),
        retry_backoff_s=number(RETRY_BACKOFF_VAR, defaults.retry_backoff_s, positive=False),
        list_page_size=whole(PAGE_SIZE_VAR, defaults.list_page_size, 1, MAX_PAGE_SIZE),
    )

"""The S3 client's limits: named environment variables with their units, read once when a
repository is opened. Small by default, so that a store that is down fails in seconds.

=================================  ===========  =======  ====================================
variable                           unit         default  meaning
=================================  ===========  =======  ====================================
``NAIAD_S3_CONNECT_TIMEOUT_S``     seconds      2        longest wait for a TCP/TLS connection
``NAIAD_S3_READ_TIMEOUT_S``        seconds      10       longest wait for the next bytes of an
                                                         answer (not for a whole download)
``NAIAD_S3_MAX_ATTEMPTS``          attempts     3        tries of one call, the first included
                                                         (botocore's "standard" retry mode)
``NAIAD_S3_MAX_POOL_CONNECTIONS``  connections  16       connections kept open to the store
``NAIAD_S3_LIST_PAGE_SIZE``        objects      1000     keys asked per listing call (S3's
                                                         most is 1000)
=================================  ===========  =======  ====================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from naiad.settings import integer, read_env, seconds

SECONDS = 1.0

CONNECT_TIMEOUT_ENV = "NAIAD_S3_CONNECT_TIMEOUT_S"
READ_TIMEOUT_ENV = "NAIAD_S3_READ_TIMEOUT_S"
MAX_ATTEMPTS_ENV = "NAIAD_S3_MAX_ATTEMPTS"
MAX_POOL_CONNECTIONS_ENV = "NAIAD_S3_MAX_POOL_CONNECTIONS"
LIST_PAGE_SIZE_ENV = "NAIAD_S3_LIST_PAGE_SIZE"

DEFAULT_CONNECT_TIMEOUT_S = 2 * SECONDS
DEFAULT_READ_TIMEOUT_S = 10 * SECONDS
DEFAULT_MAX_ATTEMPTS = 3
# The core downloads several files at once; a pool smaller than that would make botocore
# open and drop connections ("connection pool is full").
DEFAULT_MAX_POOL_CONNECTIONS = 16
MAX_LIST_PAGE_SIZE = 1000  # ListObjectsV2's own limit
DEFAULT_LIST_PAGE_SIZE = MAX_LIST_PAGE_SIZE


@dataclass(frozen=True)
class S3Settings:
    """The S3 client's limits (see the module's table)."""

    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_pool_connections: int = DEFAULT_MAX_POOL_CONNECTIONS
    list_page_size: int = DEFAULT_LIST_PAGE_SIZE


def read_settings(environ: Mapping[str, str] | None = None) -> S3Settings:
    """The settings from ``environ`` (``os.environ`` when None); a value that is not a
    positive number is refused with INVALID_ARG naming the variable."""
    environ = os.environ if environ is None else environ
    return S3Settings(
        connect_timeout_s=read_env(environ, CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT_S,
                               seconds),
        read_timeout_s=read_env(environ, READ_TIMEOUT_ENV, DEFAULT_READ_TIMEOUT_S, seconds),
        max_attempts=read_env(environ, MAX_ATTEMPTS_ENV, DEFAULT_MAX_ATTEMPTS, integer,
                          minimum=1, unit="attempts"),
        max_pool_connections=read_env(environ, MAX_POOL_CONNECTIONS_ENV,
                                  DEFAULT_MAX_POOL_CONNECTIONS, integer, minimum=1,
                                  unit="connections"),
        list_page_size=read_env(environ, LIST_PAGE_SIZE_ENV, DEFAULT_LIST_PAGE_SIZE, integer,
                            minimum=1, maximum=MAX_LIST_PAGE_SIZE, unit="objects"),
    )

"""The gRPC listener's settings: tritonserver's ``--grpc-*`` flags, with its defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from naiad.frontends.restrictions import Restriction

COMPRESSION_LEVELS = ("none", "low", "medium", "high")
#: What serves gRPC: naiad's own server (naiad_server.py), or grpc's Python server.
GRPC_SERVERS = ("naiad", "grpcio")


@dataclass
class GRPCOptions:
    """How the gRPC endpoint listens, secures, compresses and keeps connections alive."""

    reuse_port: bool = False
    # naiad only. naiad (its own HTTP/2 server on the event loop, naiad_server.py) or
    # grpcio (grpc's thread-pool server, listener.py).
    server: str = "naiad"
    # TLS: a server certificate and key; with ``use_ssl_mutual`` clients must present a
    # certificate signed by ``root_cert`` (PEM file paths).
    use_ssl: bool = False
    use_ssl_mutual: bool = False
    server_cert: str = ""
    server_key: str = ""
    root_cert: str = ""
    # The compression of inference responses: none, low, medium or high.
    infer_response_compression_level: str = "none"
    # Keepalive and connection age, in milliseconds (grpc's channel arguments); None: unset.
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int | None = None
    max_connection_age_grace_ms: int | None = None
    # naiad only. The most bytes of metadata (headers) one request may send, names and values
    # together as HTTP/2 counts them (grpc's own hard limit by default); more is refused with
    # RESOURCE_EXHAUSTED. It bounds the number of headers too: each costs at least 32 bytes.
    max_header_size: int = 16 * 1024
    # naiad only. A connection with no call in progress for this long is closed (a GOAWAY:
    # clients reconnect on their next call); 0: never.
    idle_timeout_ms: int = 300_000
    # naiad only. A new connection must finish its handshake (TLS, the HTTP/2 preface and
    # settings) within this time or is closed.
    handshake_timeout_ms: int = 10_000
    # naiad only. A unary call's request message must have come in full this long after the
    # call started, else the call is cancelled (read_timeout.py); 0: no limit.
    message_timeout_ms: int = 60_000
    # naiad only. ModelStreamInfer calls open at once (on --grpc-server=grpcio each holds a
    # server thread); more are
    # refused with RESOURCE_EXHAUSTED. 0: no bound (streams then compete with every other
    # call for threads).
    max_streams: int = 1024
    # naiad only. A stream with no request in flight that has sent none for this long is
    # ended (UNAVAILABLE); 0: never, as tritonserver.
    stream_idle_timeout_ms: int = 0
    # Request headers whose names match this regular expression become request parameters.
    header_forward_pattern: str = ""
    # API group -> the header a request to it must carry (``triton-grpc-protocol-<key>``).
    restricted: dict[str, Restriction] = field(default_factory=dict)

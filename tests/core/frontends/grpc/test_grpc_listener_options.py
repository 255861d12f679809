"""The gRPC listener flags end to end: TLS and mutual TLS, keepalive and connection age,
inference response compression. Real ``naiad serve`` processes, the official
``tritonclient.grpc`` client and, to see what reaches the wire, a recording relay
(wire_tap.py) between a raw grpc channel and the server."""

from __future__ import annotations

import gzip
import queue
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException
from wire_tap import ACK, PING, PingingClient, WireTap, goaways, grpc_messages, pings_sent
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, IDENTITY_PY, identity_config, write_model

from naiad.frontends.grpc.listener import channel_arguments, server_credentials
from naiad.frontends.grpc.options import GRPCOptions
from naiad.testing import naiad_server

SECONDS = 1.0
A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([10, 20, 30, 40], dtype=np.float32)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("add-sub-repo")
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    return repo


@pytest.fixture(scope="module")
def identity_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("identity-repo")
    write_model(repo, "identity_fp32", identity_config("identity_fp32", "TYPE_FP32"),
                IDENTITY_PY)
    return repo


@pytest.fixture(scope="module")
def empty_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("empty-repo")


def assert_add_sub(client: grpcclient.InferenceServerClient) -> None:
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
              grpcclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    result = client.infer("add_sub", inputs, client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


# --- TLS ----------------------------------------------------------------------------------

OPENSSL_CONFIG = """
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
[server]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
[client]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
"""


def openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=30)


def make_ca(folder: Path, name: str) -> None:
    openssl(folder, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", f"{name}.key")
    openssl(folder, "req", "-new", "-x509", "-key", f"{name}.key", "-out", f"{name}.crt",
            "-days", "2", "-subj", f"/CN={name}", "-config", "openssl.cnf", "-extensions", "ca")


def make_cert(folder: Path, name: str, ca: str, extensions: str, serial: int) -> None:
    openssl(folder, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", f"{name}.key")
    openssl(folder, "req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}", "-config", "openssl.cnf")
    openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey",
            f"{ca}.key", "-set_serial", str(serial), "-days", "2", "-out", f"{name}.crt",
            "-extfile", "openssl.cnf", "-extensions", extensions)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA with a server certificate (127.0.0.1, localhost) and a client
    certificate, and a second CA with a client certificate the first CA never signed."""
    folder = tmp_path_factory.mktemp("pki")
    (folder / "openssl.cnf").write_text(OPENSSL_CONFIG)
    make_ca(folder, "ca")
    make_cert(folder, "server", "ca", "server", 1)
    make_cert(folder, "client", "ca", "client", 2)
    make_ca(folder, "other-ca")
    make_cert(folder, "stranger", "other-ca", "client", 3)
    return folder


def tls_client(server, pki: Path, cert: str | None = None,
               ca: str = "ca") -> grpcclient.InferenceServerClient:
    keys = {} if cert is None else {"private_key": str(pki / f"{cert}.key"),
                                    "certificate_chain": str(pki / f"{cert}.crt")}
    return grpcclient.InferenceServerClient(server.grpc_url, ssl=True,
                                            root_certificates=str(pki / f"{ca}.crt"), **keys)


def assert_refused(client: grpcclient.InferenceServerClient) -> None:
    with client, pytest.raises(InferenceServerException) as info:
        client.is_server_live(client_timeout=10)
    assert info.value.status() == "StatusCode.UNAVAILABLE", info.value


def test_tls_serves_tritonclient_and_refuses_plaintext(repo: Path, pki: Path) -> None:
    with naiad_server("--model-repository", str(repo), "--grpc-use-ssl=true",
                      f"--grpc-server-cert={pki / 'server.crt'}",
                      f"--grpc-server-key={pki / 'server.key'}") as server:
        with tls_client(server, pki) as client:
            assert_add_sub(client)
        assert_refused(grpcclient.InferenceServerClient(server.grpc_url))
        # A client that trusts another CA does not accept the server's certificate.
        assert_refused(tls_client(server, pki, ca="other-ca"))


def test_mutual_tls_requires_a_client_certificate_the_root_signed(repo: Path,
                                                                   pki: Path) -> None:
    with naiad_server("--model-repository", str(repo), "--grpc-use-ssl-mutual=true",
                      f"--grpc-server-cert={pki / 'server.crt'}",
                      f"--grpc-server-key={pki / 'server.key'}",
                      f"--grpc-root-cert={pki / 'ca.crt'}") as server:
        with tls_client(server, pki, cert="client") as client:
            assert_add_sub(client)
        assert_refused(tls_client(server, pki))  # no client certificate
        assert_refused(tls_client(server, pki, cert="stranger"))  # signed by another CA
        assert_refused(grpcclient.InferenceServerClient(server.grpc_url))


def test_a_missing_certificate_stops_start_up_naming_the_flag(empty_repo: Path,
                                                              pki: Path) -> None:
    missing = pki / "nope.crt"
    result = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--model-repository", str(empty_repo),
         "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--http-port=0",
         "--grpc-port=0", "--allow-metrics=false", "--grpc-use-ssl=true",
         f"--grpc-server-cert={missing}", f"--grpc-server-key={pki / 'server.key'}"],
        capture_output=True, text=True, timeout=60)
    output = result.stdout + result.stderr
    assert f"cannot read --grpc-server-cert={missing}" in output, output
    assert "Traceback" not in output


@pytest.mark.parametrize(("change", "message"), [
    ({"server_cert": ""}, "TLS (--grpc-use-ssl) needs --grpc-server-cert"),
    ({"server_key": "{pki}/absent.key"}, "cannot read --grpc-server-key={pki}/absent.key"),
    ({"server_cert": "{pki}/openssl.cnf"}, "--grpc-server-cert={pki}/openssl.cnf is not a PEM"),
    ({"server_key": "{pki}/client.key"},
     "--grpc-server-key={pki}/client.key is not a usable private key for --grpc-server-cert"),
    ({"server_cert": "{pki}/server.key"},
     "--grpc-server-cert={pki}/server.key holds no valid PEM certificate"),
    ({"use_ssl_mutual": True}, "mutual TLS (--grpc-use-ssl-mutual) needs --grpc-root-cert"),
    ({"use_ssl_mutual": True, "root_cert": "{pki}/server.key"},
     "--grpc-root-cert={pki}/server.key holds no valid PEM certificate"),
])
def test_unusable_tls_files_are_errors_naming_the_flag(pki: Path, change: dict,
                                                       message: str) -> None:
    values = {"use_ssl": True, "server_cert": str(pki / "server.crt"),
              "server_key": str(pki / "server.key")}
    values.update({k: v.format(pki=pki) if isinstance(v, str) else v
                   for k, v in change.items()})
    with pytest.raises(OSError) as info:
        server_credentials(GRPCOptions(**values))
    assert message.format(pki=pki) in str(info.value)


# --- keepalive and connection age ---------------------------------------------------------

def test_channel_arguments_carry_every_flag() -> None:
    arguments = dict(channel_arguments(GRPCOptions(
        reuse_port=True, keepalive_time_ms=1, keepalive_timeout_ms=2,
        keepalive_permit_without_calls=True, http2_max_pings_without_data=3,
        http2_min_recv_ping_interval_without_data_ms=4, http2_max_ping_strikes=5,
        max_connection_age_ms=6, max_connection_age_grace_ms=7,
        infer_response_compression_level="medium", max_header_size=8, idle_timeout_ms=9,
        handshake_timeout_ms=10), 1024, 2**31))
    assert arguments == {
        "grpc.max_receive_message_length": 1024, "grpc.max_send_message_length": 2**31 - 1,
        "grpc.max_metadata_size": 8, "grpc.absolute_max_metadata_size": 8,
        "grpc.server_handshake_timeout_ms": 10, "grpc.max_connection_idle_ms": 9,
        "grpc.so_reuseport": 1, "grpc.enable_channelz": 0, "grpc.keepalive_time_ms": 1,
        "grpc.keepalive_timeout_ms": 2, "grpc.http2.ping_timeout_ms": 2,
        "grpc.keepalive_permit_without_calls": 1,
        "grpc.http2.max_pings_without_data": 3,
        "grpc.http2.min_ping_interval_without_data_ms": 4, "grpc.http2.max_ping_strikes": 5,
        "grpc.max_connection_age_ms": 6, "grpc.max_connection_age_grace_ms": 7,
        "grpc.default_compression_level": 2}
    defaults = dict(channel_arguments(GRPCOptions(), 1024))
    assert defaults["grpc.so_reuseport"] == 0
    assert defaults["grpc.max_send_message_length"] == 1024
    assert dict(channel_arguments(GRPCOptions(idle_timeout_ms=0), 1024, 4096))[
        "grpc.max_send_message_length"] > 4096  # room for a stream response's envelope
    assert "grpc.max_connection_idle_ms" not in dict(
        channel_arguments(GRPCOptions(idle_timeout_ms=0), 1024))  # 0: never
    assert not {"grpc.max_connection_age_ms", "grpc.max_connection_age_grace_ms",
                "grpc.default_compression_level"} & set(defaults)


# How often a client may ping a connection without calls: once in 2 hours, or with
# --grpc-keepalive-permit-without-calls once every --grpc-http2-min-recv-ping-interval-without-
# data (default 5 minutes). A ping sooner is a strike; the third strike (more than
# --grpc-http2-max-ping-strikes, 0: no limit) gets a GOAWAY "too_many_pings". grpc's defaults
# and Triton's. The bare client pings 50 ms apart.
@pytest.mark.parametrize(("flags", "goaway"), [
    ((), True),
    (("--grpc-http2-max-ping-strikes=0",), False),
    (("--grpc-http2-min-recv-ping-interval-without-data=5",), True),
    (("--grpc-keepalive-permit-without-calls=true",), True),
    (("--grpc-keepalive-permit-without-calls=true",
      "--grpc-http2-min-recv-ping-interval-without-data=5"), False),
])
def test_ping_policy_flags_reach_grpc(empty_repo: Path, flags: tuple[str, ...],
                                      goaway: bool) -> None:
    with naiad_server("--model-repository", str(empty_repo), *flags) as server, \
            PingingClient(server.grpc_port) as client:
        found = client.ping(10, 0.05)
    acks = sum(1 for f in found if f.type == PING and f.flags & ACK)
    if goaway:
        assert goaways(found) == [(11, b"too_many_pings")] and acks < 10
    else:
        assert goaways(found) == [] and acks == 10


class OpenStream:
    """A ModelStreamInfer call kept open without data, through ``tap`` on a raw channel."""

    def __init__(self, tap: WireTap, options: list[tuple[str, int]]) -> None:
        self.channel = grpc.insecure_channel(tap.url, options=options)
        self.requests: queue.Queue[pb.ModelInferRequest | None] = queue.Queue()
        stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.responses = stub.ModelStreamInfer(iter(self.requests.get, None))

    def answers(self) -> bool:
        """Whether one more request on the stream gets its response."""
        self.requests.put(pb.ModelInferRequest(model_name="absent"))
        return "absent" in next(self.responses).error_message

    def close(self) -> None:
        self.requests.put(None)
        self.channel.close()


@pytest.fixture
def open_stream() -> Iterator[list[OpenStream]]:
    streams: list[OpenStream] = []
    yield streams
    for stream in streams:
        stream.close()


def wait_for_goaway(tap: WireTap, timeout: float) -> list[tuple[int, bytes]]:
    deadline = time.monotonic() + timeout
    while True:
        found = goaways(tap.server_frames()) if tap.connections() else []
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


# How long a connection is watched for something that must not happen: several times as long
# as it takes when it does happen.
QUIET_WINDOW = 1.5 * SECONDS


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("timeout_ms", [200, 20_000])
def test_keepalive_time_and_timeout(empty_repo: Path, open_stream: list[OpenStream],
                                    timeout_ms: int) -> None:
    """The server pings every --grpc-keepalive-time and drops a connection whose peer has
    not acknowledged a ping after --grpc-keepalive-timeout."""
    with naiad_server("--model-repository", str(empty_repo), "--grpc-keepalive-time=50",
                      f"--grpc-keepalive-timeout={timeout_ms}") as server, \
            WireTap(server.grpc_port) as tap:
        stream = OpenStream(tap, [])
        open_stream.append(stream)
        assert stream.answers()
        assert wait_until(lambda: pings_sent(tap.server_frames()) >= 5, 10 * SECONDS)
        tap.hold()  # the client's acknowledgements no longer reach the server
        if timeout_ms == 200:
            assert wait_until(tap.server_closed, 10 * SECONDS)
        else:
            assert not wait_until(tap.server_closed, QUIET_WINDOW)
            tap.release()
            assert stream.answers()


def test_max_connection_age_closes_long_lived_connections(empty_repo: Path,
                                                          open_stream: list[OpenStream]
                                                          ) -> None:
    with naiad_server("--model-repository", str(empty_repo),
                      "--grpc-max-connection-age=300",
                      "--grpc-max-connection-age-grace=300") as server, \
            WireTap(server.grpc_port) as tap:
        stream = OpenStream(tap, [])
        open_stream.append(stream)
        assert stream.answers()
        found = wait_for_goaway(tap, 10 * SECONDS)
        assert found and found[0][0] == 0, found  # NO_ERROR: a graceful end
        deadline = time.monotonic() + 10 * SECONDS
        with pytest.raises(grpc.RpcError):  # after the grace period the stream is cut
            while time.monotonic() < deadline:
                stream.answers()
                time.sleep(0.05)


# --- compression --------------------------------------------------------------------------

ZEROS = np.zeros(64 * 1024, dtype=np.float32)  # 256 KiB that compress to almost nothing
GZIP_MAGIC, ZLIB_MAGIC = b"\x1f\x8b", b"\x78"


@pytest.fixture(scope="module", params=["none", "low", "medium", "high"])
def level_server(request: pytest.FixtureRequest, identity_repo: Path) -> Iterator:
    with naiad_server("--model-repository", str(identity_repo),
                      f"--grpc-infer-response-compression-level={request.param}") as server:
        yield request.param, server


def infer_zeros(url: str, channel_args: list[tuple[str, int]] | None = None) -> None:
    with grpcclient.InferenceServerClient(url, channel_args=channel_args) as client:
        inputs = [grpcclient.InferInput("INPUT0", list(ZEROS.shape), "FP32")]
        inputs[0].set_data_from_numpy(ZEROS)
        result = client.infer("identity_fp32", inputs, client_timeout=30)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ZEROS)
        assert client.get_server_metadata().name  # an RPC Triton does not compress


def test_inference_responses_are_compressed_at_the_level(level_server) -> None:
    level, server = level_server
    with WireTap(server.grpc_port) as tap:
        infer_zeros(tap.url)
        messages = grpc_messages(tap.server_frames())
    infer, metadata = (messages[stream][0] for stream in sorted(messages))
    assert not metadata.compressed  # only inference responses are compressed
    if level == "none":
        assert not infer.compressed and len(infer.body) > ZEROS.nbytes
        return
    assert infer.compressed and len(infer.body) < ZEROS.nbytes // 50
    # grpc core picks the algorithm for the level among those the client accepts (gzip and
    # deflate here): low gzip, medium and high deflate, as Triton 2.51 does.
    if level == "low":
        assert infer.body.startswith(GZIP_MAGIC)
        decoded = gzip.decompress(infer.body)
    else:
        assert infer.body.startswith(ZLIB_MAGIC)
        decoded = zlib.decompress(infer.body)
    assert pb.ModelInferResponse.FromString(decoded).model_name == "identity_fp32"


def test_stream_inference_responses_are_compressed(level_server) -> None:
    level, server = level_server
    with WireTap(server.grpc_port) as tap, grpc.insecure_channel(tap.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = pb.ModelInferRequest(model_name="identity_fp32")
        request.inputs.add(name="INPUT0", datatype="FP32", shape=list(ZEROS.shape))
        request.raw_input_contents.append(ZEROS.tobytes())
        responses = list(stub.ModelStreamInfer(iter([request, request]), timeout=30))
        assert [r.error_message for r in responses] == ["", ""]
        assert responses[0].infer_response.raw_output_contents[0] == ZEROS.tobytes()
        (stream,) = grpc_messages(tap.server_frames()).values()
    assert [m.compressed for m in stream] == [level != "none"] * 2


def test_clients_that_do_not_accept_compression_get_it_uncompressed(level_server) -> None:
    _, server = level_server
    # Bit 0 alone: the client accepts only the identity encoding.
    with WireTap(server.grpc_port) as tap:
        infer_zeros(tap.url, [("grpc.compression_enabled_algorithms_bitset", 1)])
        messages = grpc_messages(tap.server_frames())
    assert not any(m.compressed for stream in messages.values() for m in stream)


"""A real ``redis-server`` (Debian's package) on a free loopback port, for the redis cache
tests: started and stopped by PID, restartable on the same port, optionally with TLS."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from naiad.testing.server import free_port, stop_process

SECONDS = 1.0
# How long redis-server may take to answer its first PING (it usually takes milliseconds).
READY_TIMEOUT_S = 20 * SECONDS
STOP_TIMEOUT_S = 20 * SECONDS


def redis_server_binary() -> str:
    """The path of redis-server; skips the test (with how to install it) when there is none."""
    found = shutil.which("redis-server")
    if found is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; "
                    "scripts/test installs it when it runs as root)")
    return found


class RedisServer:
    """``redis-server`` on 127.0.0.1 with no persistence; ``args`` are added to its command
    line (``--requirepass``, TLS files). ``tls`` holds redis-py's TLS keyword arguments for
    the test's own client when the server listens with TLS only."""

    def __init__(self, workdir: Path, args: Sequence[str] = (), *,
                 tls: dict[str, str] | None = None, password: str | None = None) -> None:
        self.binary = redis_server_binary()
        self.workdir = workdir
        self.args = list(args)
        self.tls = tls
        self.password = password
        self.port = free_port()
        self.log_path = workdir / f"redis-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        listen = (["--port", "0", "--tls-port", str(self.port)] if self.tls is not None
                  else ["--port", str(self.port)])
        return [self.binary, *listen, "--bind", "127.0.0.1", "--save", "", "--appendonly",
                "no", "--dir", str(self.workdir), *self.args]

    def client(self, db: int = 0, socket_timeout: float | None = 5 * SECONDS) -> redis.Redis:
        """A plain redis-py client of the test's own, to look at what the cache stored."""
        # No retries (redis-py retries a timed-out call by default): a timeout shows at once.
        return redis.Redis(host="127.0.0.1", port=self.port, db=db, password=self.password,
                           socket_timeout=socket_timeout, retry=Retry(NoBackoff(), 0),
                           ssl=self.tls is not None, **(self.tls or {}))

    def start(self) -> RedisServer:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log,
                                            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        probe = self.client(socket_timeout=1 * SECONDS)
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"redis-server exited with {self.process.returncode}:\n"
                                       f"{self.log_path.read_text(errors='replace')}")
                try:
                    if probe.ping():
                        return self
                except redis.AuthenticationError:
                    return self  # it answers, and refuses the test's own client
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not answer within "
                                       f"{READY_TIMEOUT_S} s")
                time.sleep(0.02)
        finally:
            probe.close()

    def stop(self) -> None:
        """Stop this redis-server (SIGTERM to its PID, SIGKILL if it lingers)."""
        stop_process(self.process, STOP_TIMEOUT_S)

    def settings(self, **extra: str) -> dict[str, str]:
        """``--cache-config redis,...`` settings that reach this server."""
        return {"host": "127.0.0.1", "port": str(self.port), **extra}


def make_tls_files(folder: Path, server_name: str) -> dict[str, Path]:
    """A test CA (as a file and as a hashed directory), a server certificate for
    ``server_name`` and a client certificate, made with the openssl command; skips the test
    when openssl is not installed."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed (it makes the test certificates)")
    folder.mkdir(parents=True, exist_ok=True)
    files = {name: folder / name for name in
             ("ca.crt", "ca.key", "server.crt", "server.key", "client.crt", "client.key")}

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=folder)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
        "ca.crt", "-days", "2", "-subj", "/CN=naiad test CA")
    (folder / "san.ext").write_text(f"subjectAltName=DNS:{server_name}\n")
    for who, subject in (("server", server_name), ("client", "naiad")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out",
            f"{who}.csr", "-subj", f"/CN={subject}")
        extra = ["-extfile", "san.ext"] if who == "server" else []
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{who}.crt", "-days", "2", *extra)
    # A CA directory as OpenSSL reads it (cacert_dir): certificates named by subject hash.
    subject_hash = subprocess.run([openssl, "x509", "-hash", "-noout", "-in", "ca.crt"],
                                  check=True, capture_output=True, text=True, cwd=folder)
    files["ca_dir"] = folder / "ca_dir"
    files["ca_dir"].mkdir()
    shutil.copy(files["ca.crt"], files["ca_dir"] / f"{subject_hash.stdout.strip()}.0")
    return files

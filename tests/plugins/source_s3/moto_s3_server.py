"""moto's S3 in server mode (``python -m moto.server``) on a free loopback port, for the S3
source tests: started and stopped by PID. Once started it checks credentials as AWS does:
an IAM user with every S3 right is made while moto still lets everything through, then
moto's authentication is switched on, so a wrong key is refused as S3 refuses it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from naiad.testing.server import free_port, stop_process

SECONDS = 1.0
# How long moto may take to answer its first request (importing moto takes seconds).
READY_TIMEOUT_S = 60 * SECONDS
STOP_TIMEOUT_S = 20 * SECONDS
REGION = "us-east-1"
USER = "naiad-test"
ALLOW_S3 = json.dumps({"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})


def require_moto_server() -> None:
    """Skips the test (with how to install it) when moto's server mode is not installed."""
    for module in ("moto", "flask", "flask_cors"):
        if importlib.util.find_spec(module) is None:
            pytest.skip("moto's S3 server mode is not installed "
                        "(pip install 'moto[server]'; scripts/test installs it)")


class MotoS3Server:
    """``moto.server`` on 127.0.0.1, with authentication on and one IAM user's key
    (``key_id``, ``secret_key``) allowed every S3 action."""

    def __init__(self, workdir: Path) -> None:
        require_moto_server()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"moto-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.key_id = ""
        self.secret_key = ""

    def uri(self, bucket: str, path: str = "") -> str:
        """The ``s3://http://127.0.0.1:PORT/BUCKET/PATH`` repository URI."""
        return f"s3://{self.endpoint}/{bucket}" + (f"/{path}" if path else "")

    def client(self, key_id: str | None = None, secret_key: str | None = None) -> Any:
        """A boto3 S3 client of the test's own (the IAM user's key unless told)."""
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=key_id or self.key_id,
            aws_secret_access_key=secret_key or self.secret_key,
            config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}))

    def start(self) -> MotoS3Server:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                 str(self.port)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"moto.server exited with {self.process.returncode}:\n"
                                   f"{self.log_path.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto.server did not answer within {READY_TIMEOUT_S} s")
            time.sleep(0.1)
        try:
            self._make_user()
        except BaseException:
            self.stop()
            raise
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=1):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def _make_user(self) -> None:
        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=REGION,
                           aws_access_key_id="setup", aws_secret_access_key="setup")
        iam.create_user(UserName=USER)
        iam.put_user_policy(UserName=USER, PolicyName="s3", PolicyDocument=ALLOW_S3)
        key = iam.create_access_key(UserName=USER)["AccessKey"]
        self.key_id, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        iam.close()
        # From now on every request must be signed by a key moto knows (moto's own switch).
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", data=b"0",
                                         headers={"Content-Type": "text/plain"},
                                         method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        """Stop this moto.server (SIGTERM to its PID, SIGKILL if it lingers)."""
        stop_process(self.process, STOP_TIMEOUT_S)

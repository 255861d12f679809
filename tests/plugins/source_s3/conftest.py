"""Fixtures of the S3 source tests: one moto S3 server for the session (stopped by PID), an
environment with the test's AWS credentials and nothing from the machine's own, and a
bucket holding a small model repository."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from moto_s3_server import REGION, MotoS3Server
from s3_buckets import EXTRA_FILES, PREFIX, Bucket, add_sub_files, new_bucket_name

# Variables of the AWS SDK that would let the machine's own configuration in.
AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE",
    "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "TRITON_CLOUD_CREDENTIAL_PATH",
)


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3Server]:
    """moto's S3 server on a free loopback port with authentication on; skips when moto's
    server mode is not installed."""
    server = MotoS3Server(tmp_path_factory.mktemp("moto")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def aws_env(moto_s3: MotoS3Server, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> MotoS3Server:
    """The IAM user's key in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, and no AWS
    configuration from this machine (no ~/.aws, no instance metadata)."""
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config-none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials-none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_s3.key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto_s3.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    return moto_s3


@pytest.fixture
def bucket(aws_env: MotoS3Server) -> Iterator[Bucket]:
    """A new bucket with add_sub and a few more files under ``models/``, and objects beside
    it that the repository must not list."""
    client = aws_env.client()
    name = new_bucket_name()
    client.create_bucket(Bucket=name)
    found = Bucket(aws_env, name, PREFIX, {}, client)
    for path, content in {**add_sub_files(), **EXTRA_FILES}.items():
        found.put(path, content)
    found.put_key("README.md", b"beside the repository\n")
    found.put_key(f"{PREFIX}-old/add_sub/config.pbtxt", b"a neighbour with the same start\n")
    found.put_key(f"{PREFIX}/add_sub/2/")  # a folder marker, as consoles make them
    try:
        yield found
    finally:
        client.close()

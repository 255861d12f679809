"""The image itself, built from this checkout with podman and run: a Triton client calls add_sub
on it. Long (a build downloads naiad's dependencies from the package index): pytest -m long.

Needs podman and buildah, and the Python base image in local storage (NAIAD_TEST_PYTHON_IMAGE,
default python:3.11-slim-bookworm): machines that cannot pull it build a stand-in from Debian's
archive (docs/deployment.md, "Building without a registry"). The container runs with buildah's
chroot isolation: it needs neither cgroups nor raised limits, which some hosts (and this
project's test machines) refuse to OCI runtimes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator

import pytest
from deploy_objects import DEPLOY, REPO
from source_serving import add_sub_over_http

from naiad.testing import ServerProcess

pytestmark = pytest.mark.long

BASE_IMAGE = os.environ.get("NAIAD_TEST_PYTHON_IMAGE", "python:3.11-slim-bookworm")
TAG = "localhost/naiad-test:cpu"
#: a safety net for the build (pip downloads numpy, grpcio and the rest)
BUILD_TIMEOUT_S = 1200.0


def podman(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    if not (shutil.which("podman") and shutil.which("buildah")):
        pytest.skip("podman and buildah are not installed (Debian: apt-get install podman "
                    "buildah)")
    if podman("image", "exists", BASE_IMAGE).returncode != 0:
        pytest.skip(f"the base image {BASE_IMAGE} is not in podman's storage and cannot be "
                    "pulled here; docs/deployment.md says how to build a stand-in")
    built = podman("build", "--isolation=chroot", "-f", str(DEPLOY / "docker" / "Dockerfile"),
                   "--build-arg", f"PYTHON_IMAGE={BASE_IMAGE}", "--build-arg", "BACKENDS=python",
                   "--build-arg", "SOURCES=", "--build-arg", "CACHES=local", "-t", TAG,
                   str(REPO), timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.stdout[-5000:] + built.stderr[-5000:]
    try:
        yield TAG
    finally:
        podman("rmi", "--force", TAG)


def test_the_image_serves_add_sub(image: str) -> None:
    [config] = json.loads(podman("image", "inspect", image).stdout)
    entrypoint, cmd = config["Config"]["Entrypoint"], config["Config"]["Cmd"]
    assert config["Config"]["User"] == "1000:1000"
    assert cmd == ["tritonserver", "--model-repository=/models"]
    container = subprocess.run(["buildah", "from", image], capture_output=True, text=True,
                               timeout=120, check=True).stdout.strip()
    try:
        # the image's own entrypoint and command, with free ports (later flags win)
        command = ["buildah", "run", "--isolation=chroot", "-v",
                   f"{REPO / 'examples' / 'model_repository'}:/models:ro", container, "--",
                   *entrypoint, *cmd, "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
                   "--metrics-address=127.0.0.1", "--http-port={http_port}",
                   "--grpc-port={grpc_port}", "--metrics-port={metrics_port}"]
        with ServerProcess(command, ready_timeout=120) as server:
            add_sub_over_http(server)
            naiad = subprocess.run(["pgrep", "-f", "-u", "1000", "/opt/naiad/bin/naiad serve"],
                                   capture_output=True, text=True, timeout=30).stdout.split()
            assert naiad, "naiad does not run as uid 1000 from /opt/naiad"
            tini = int(subprocess.run(["ps", "-o", "ppid=", "-p", naiad[0]], capture_output=True,
                                      text=True, timeout=30).stdout)
            os.kill(tini, signal.SIGTERM)  # what the container runtime sends to PID 1
            assert server.process is not None
            server.process.wait(60)
        assert "unloaded model 'add_sub'" in server.log()
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, timeout=120)

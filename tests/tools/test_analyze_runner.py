"""naiad analyze's run against a modelled server: the search loads candidates through the
repository API, the original configuration comes back at the end, outputs are written, and
an interrupted run resumes from its checkpoint."""

from __future__ import annotations

import copy
import csv

import pytest
from analyze_fakes import MLP_CONFIG, FakeMeasure, FakeServer
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from naiad_perf.analyze.checkpoint import Checkpoint, CheckpointMismatch
from naiad_perf.analyze.report import write_outputs
from naiad_perf.analyze.runner import Analysis, AnalysisError, AnalyzeSettings
from naiad_perf.analyze.scoring import Constraints
from naiad_perf.api import LoadSpec


def settings(**changes) -> AnalyzeSettings:
    base = AnalyzeSettings(spec=LoadSpec(url="127.0.0.1:1", model="mlp"),
                           concurrency=[1, 4, 16], max_candidates=6,
                           constraints=Constraints(max_latency_p99_ms=60))
    for name, value in changes.items():
        setattr(base, name, value)
    return base


def read_csv(path):
    with open(path, newline="") as rows:
        return list(csv.DictReader(rows))


def analyse(tmp_path, server, measure, run_settings=None, lines=None):
    run_settings = run_settings or settings()
    checkpoint = Checkpoint.open(tmp_path, run_settings.fingerprint())
    analysis = Analysis(run_settings, server, checkpoint, memory_source="none",
                        measure_fn=measure, progress=(lines if lines is not None else []).append)
    return analysis.run(), checkpoint


def test_a_run_finds_a_better_config_restores_the_original_and_writes_its_outputs(tmp_path):
    server = FakeServer(MLP_CONFIG)
    lines: list[str] = []
    outcome, _ = analyse(tmp_path, server, FakeMeasure(server), lines=lines)
    assert outcome.default is not None and outcome.winner is not None
    assert outcome.winner.feasible
    assert outcome.winner.best.throughput > outcome.default.best.throughput
    assert outcome.winner.best.p99_ms <= 60
    assert server.loaded == MLP_CONFIG  # restored
    assert len(server.loads) == len(outcome.ranked) + 1
    assert lines[0] == "note: the server reports no GPU: every candidate uses KIND_CPU instances"
    assert any(line.startswith("[1/6] inst=1 dyn=0 mbs=8: ") for line in lines)

    write_outputs(tmp_path, outcome, settings())
    rows = read_csv(tmp_path / "results.csv")
    assert [row["config"] for row in rows] == [v.key for v in outcome.ranked]
    assert rows[0]["meets_constraints"] == "1"
    assert float(rows[0]["throughput_infer_per_s"]) == outcome.winner.best.throughput
    assert sum(row["is_default"] == "1" for row in rows) == 1
    measured = read_csv(tmp_path / "measurements.csv")
    assert len(measured) == 3 * len(rows)
    best = text_format.Parse((tmp_path / "best" / "config.pbtxt").read_text(),
                             model_config_pb2.ModelConfig())
    assert best.instance_group[0].count == outcome.winner.result.candidate["instance_count"]
    assert best.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert best.name == "mlp" and best.input[0].dims == [16]
    assert "<svg" in (tmp_path / "report.html").read_text()


def test_an_interrupted_run_resumes_from_its_checkpoint(tmp_path):
    server = FakeServer(MLP_CONFIG)
    interrupted = FakeMeasure(server, interrupt_at=3)
    with pytest.raises(KeyboardInterrupt):
        analyse(tmp_path, server, interrupted)
    assert server.loaded == MLP_CONFIG  # restored on the way out
    kept = Checkpoint.open(tmp_path, settings().fingerprint())
    assert len(kept.results) == 2 and kept.original_config == MLP_CONFIG

    # As after a kill: a candidate is still loaded; the checkpoint knows the original.
    server.loaded = copy.deepcopy(server.loads[-1])
    lines: list[str] = []
    resumed = FakeMeasure(server)
    outcome, _ = analyse(tmp_path, server, resumed, lines=lines)
    assert sum(line.endswith("(from the checkpoint)") for line in lines) == 2
    assert resumed.calls == len(outcome.ranked) - 2
    assert server.loaded == MLP_CONFIG
    fresh = FakeServer(MLP_CONFIG)
    uninterrupted, _ = analyse(tmp_path / "again", fresh, FakeMeasure(fresh))
    assert [v.key for v in outcome.ranked] == [v.key for v in uninterrupted.ranked]


def test_a_checkpoint_of_another_load_is_refused(tmp_path):
    server = FakeServer(MLP_CONFIG)
    analyse(tmp_path, server, FakeMeasure(server))
    other = settings(concurrency=[2])
    with pytest.raises(CheckpointMismatch, match="concurrency"):
        Checkpoint.open(tmp_path, other.fingerprint())


def test_a_refused_candidate_is_reported_and_the_search_goes_on(tmp_path):
    server = FakeServer(MLP_CONFIG, refuse={2})
    outcome, _ = analyse(tmp_path, server, FakeMeasure(server))
    refused = [v for v in outcome.ranked if v.result.error]
    assert [v.result.candidate["instance_count"] for v in refused] == [2]
    assert refused[0].result.error == "load failed: instance count 2 refused"
    assert outcome.ranked[-1] is refused[0]
    assert outcome.winner.best.throughput > outcome.default.best.throughput


def test_a_server_that_refuses_the_models_own_config_stops_the_run(tmp_path):
    server = FakeServer(MLP_CONFIG, refuse={1})
    with pytest.raises(AnalysisError, match="model-control-mode explicit"):
        analyse(tmp_path, server, FakeMeasure(server))

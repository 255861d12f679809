"""naiad perf in every mode, against naiad serve and against the real Triton 2.51.

Each run is lean (200 ms windows, at most 3 of them, one worker process) and asserts what a
busy machine cannot break: requests were measured, none failed, and the server's statistics
extension counted at least as many successful requests as the client did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from test_perf_analyzer import ADD_SUB_DATA, STRINGS_DATA

from naiad_perf import LoadSpec, Measurement, PerfError, measure

# Short windows (200 ms), a stability limit no run can miss (percent): three windows, then done.
LEAN = {"measurement_interval_ms": 200, "max_trials": 3, "stability_percentage": 100000.0,
        "workers": 1}
# Streams of a sequence model: two sequences of three steps each.
SEQUENCE_DATA = {"data": [[{"INPUT": [1]}, {"INPUT": [2]}, {"INPUT": [3]}],
                          [{"INPUT": [10]}, {"INPUT": [20]}, {"INPUT": [30]}]]}


@dataclass(frozen=True)
class Mode:
    id: str
    model: str
    protocol: str = "http"
    spec: dict[str, Any] = field(default_factory=dict)
    concurrency: tuple[int, ...] = (1,)
    rates: tuple[float, ...] = ()
    distribution: str = "constant"
    responses_per_request: int = 1


SHM = {"shared_memory": "system", "output_shared_memory_size": 64}
MODES = [
    Mode("http", "add_sub", concurrency=(1, 2)),
    Mode("grpc", "add_sub", "grpc"),
    Mode("http-async", "add_sub", spec={"async_mode": True}, concurrency=(2,)),
    Mode("grpc-async", "add_sub", "grpc", {"async_mode": True}),
    Mode("grpc-streaming", "add_sub", "grpc", {"streaming": True}),
    Mode("grpc-async-streaming", "add_sub", "grpc", {"streaming": True, "async_mode": True}),
    Mode("grpc-streaming-decoupled", "repeat", "grpc",
         {"streaming": True, "shapes": {"IN": [3]}, "input_data": "zero"},
         responses_per_request=3),
    Mode("http-shared-memory", "add_sub", spec=SHM),
    Mode("grpc-shared-memory", "add_sub", "grpc", SHM),
    Mode("http-input-zero", "add_sub", spec={"input_data": "zero"}),
    Mode("http-input-json", "add_sub", spec={"input_data": "{data}/add_sub.json"}),
    Mode("grpc-strings-json-shared-memory", "strings", "grpc",
         {"input_data": "{data}/strings.json", **SHM}),
    Mode("http-strings", "strings", spec={"shapes": {"INPUT0": [3]}, "string_length": 8}),
    Mode("http-batch", "identity_batch", spec={"batch_size": 4, "shapes": {"INPUT0": [5]}}),
    Mode("http-sequence", "accumulate", spec={"sequence_length": 4}, concurrency=(2,)),
    Mode("grpc-sequence-streaming-ids", "accumulate", "grpc",
         {"streaming": True, "sequence_length": 3, "sequence_id_range": (100, 104)},
         concurrency=(3,)),
    Mode("http-sequence-json-streams", "accumulate",
         spec={"input_data": "{data}/sequences.json"}, concurrency=(2,)),
    Mode("http-rate-constant", "add_sub", rates=(50.0,)),
    Mode("grpc-rate-poisson", "add_sub", "grpc", rates=(50.0,), distribution="poisson"),
    Mode("http-count-windows-percentile", "add_sub",
         spec={"measurement_mode": "count_windows", "measurement_request_count": 30,
               "percentile": 95}),
]
TRITON_MODES = ("grpc", "grpc-streaming-decoupled", "http-shared-memory",
                "grpc-sequence-streaming-ids")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("perf-data")
    for name, document in (("add_sub", ADD_SUB_DATA), ("strings", STRINGS_DATA),
                           ("sequences", SEQUENCE_DATA)):
        (folder / f"{name}.json").write_text(json.dumps(document), encoding="utf-8")
    return folder


def spec_for(server: Any, mode: Mode, data: Path) -> LoadSpec:
    url = server.grpc_url if mode.protocol == "grpc" else f"127.0.0.1:{server.http_port}"
    values = {k: v.format(data=data) if isinstance(v, str) else v for k, v in mode.spec.items()}
    return LoadSpec(url=url, model=mode.model, protocol=mode.protocol, **{**LEAN, **values})


def server_successes(server: Any, model: str) -> int:
    import tritonclient.http as httpclient

    with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as client:
        stats = client.get_inference_statistics(model)["model_stats"]
    return sum(s["inference_stats"]["success"]["count"] for s in stats)


def run_mode(server: Any, mode: Mode, data: Path) -> list[Measurement]:
    spec = spec_for(server, mode, data)
    before = server_successes(server, mode.model)
    lines: list[str] = []
    results = measure(spec, concurrency=() if mode.rates else mode.concurrency,
                      request_rates=mode.rates, distribution=mode.distribution,
                      progress=lines.append)
    after = server_successes(server, mode.model)
    assert len(results) == len(mode.rates or mode.concurrency)
    assert lines and all("window" in line for line in lines)
    for m in results:
        explain = f"{mode.id}: {m}"
        assert m.errors == 0 and not m.error_messages, explain
        assert m.request_count > 0 and m.throughput > 0, explain
        assert m.response_count == m.request_count * mode.responses_per_request, explain
        assert 0 < m.latency_us["p50"] <= m.latency_us["p99"], explain
        assert m.client_cpu_percent > 0, explain
        # the server saw every request the client measured (and the windows' edges more)
        assert m.server["request_count"] >= m.request_count * 0.9, explain
        if mode.rates:
            assert m.request_rate == mode.rates[0] and m.concurrency is None
        else:
            assert m.concurrency in mode.concurrency and m.request_rate is None
    assert after - before >= sum(m.request_count for m in results)
    return results


@pytest.mark.parametrize("mode", [pytest.param(m, id=m.id) for m in MODES])
def test_naiad(perf_server: Any, mode: Mode, data: Path) -> None:
    results = run_mode(perf_server, mode, data)
    if mode.spec.get("batch_size"):
        m = results[0]
        # throughput counts inferences: requests x batch size
        assert m.throughput == pytest.approx(m.request_count * 4 / m.duration_s)


@pytest.mark.parametrize("mode", [pytest.param(m, id=m.id) for m in MODES
                                  if m.id in TRITON_MODES])
def test_triton(triton_perf_server: Any, mode: Mode, data: Path) -> None:
    run_mode(triton_perf_server, mode, data)


def test_sequence_ids_must_cover_the_live_sequences(perf_server: Any, data: Path) -> None:
    mode = Mode("narrow-ids", "accumulate", spec={"sequence_id_range": (5, 7)})
    with pytest.raises(PerfError, match="holds 2 ids, fewer than the 3 sequences"):
        measure(spec_for(perf_server, mode, data), concurrency=[3])


@pytest.mark.parametrize(("changes", "message"), [
    ({"model": "missing"}, "model 'missing' .* is not ready"),
    ({"model": "repeat"}, "decoupled: it answers over a gRPC stream only"),
    ({"model": "strings"}, r"variable dims \[-1\]: give them with --shape INPUT0:4"),
    ({"batch_size": 2}, "does not batch"),
    ({"model": "identity_batch", "shapes": {"INPUT0": [2]}, "batch_size": 9},
     "exceeds the max_batch_size of model 'identity_batch', 8"),
    ({"shapes": {"NOPE": [1]}}, "has no input 'NOPE'"),
    ({"input_data": "/nonexistent.json"}, "expected zero, random or a JSON file"),
    ({"streaming": True}, "needs the gRPC protocol"),
])
def test_refused_before_any_load(perf_server: Any, data: Path, changes: dict[str, Any],
                                 message: str) -> None:
    spec = replace(spec_for(perf_server, Mode("x", "add_sub"), data), **changes)
    with pytest.raises(PerfError, match=message):
        measure(spec, concurrency=[1])


def test_bad_json_data_names_the_input(perf_server: Any, tmp_path: Path, data: Path) -> None:
    path = tmp_path / "short.json"
    path.write_text(json.dumps({"data": [{"INPUT0": [1.0, 2.0]}]}))
    spec = replace(spec_for(perf_server, Mode("x", "add_sub"), data), input_data=str(path))
    with pytest.raises(PerfError, match=r"step 0: no value for input\(s\) INPUT1"):
        measure(spec, concurrency=[1])
    path.write_text(json.dumps({"data": [{"INPUT0": [1.0], "INPUT1": [1, 2, 3, 4]}]}))
    with pytest.raises(PerfError, match=r"'INPUT0' has 1 values, its shape \[4\] needs 4"):
        measure(spec, concurrency=[1])

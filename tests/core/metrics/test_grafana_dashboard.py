"""deploy/grafana/naiad.json uses only metric names naiad exports.

Every PromQL expression of the dashboard (panels and variables) is reduced to the metric
names it reads, and each name is looked up in a live exposition of a real naiad server
process serving a cached model and a dynamically batched one with a response cache
configured. GPU names are checked against what naiad.metrics.gpu_lines renders (this
machine has no GPU).
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, IDENTITY_PY, identity_config, write_model

from naiad.metrics.gpu_lines import GPU_FAMILIES
from naiad.testing import ServerProcess, naiad_server

DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "naiad.json"
# PromQL words that look like names but are not metrics
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset",
             "bool", "and", "or", "unless", "inf", "nan"}
_NAME = re.compile(r"(?<![\w$:.])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (functions, keywords, label names,
    strings, durations and Grafana variables left out)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label_values' too)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range durations
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "",
                  expr)  # label lists
    return {name for name, call in _NAME.findall(expr) if not call and name not in _KEYWORDS}


def test_the_extractor_finds_names_and_only_names():
    assert metric_names('histogram_quantile(0.99, sum by (le, model) (rate(x_bucket{'
                        'model=~"$model"}[$__rate_interval])))') == {"x_bucket"}
    assert metric_names("sum(rate(a_total[5m])) / ignoring(reason) group_left "
                        "b_count offset 1h > 0 and on(model) c") == {"a_total", "b_count", "c"}
    assert metric_names("label_values(nv_inference_request_success, model)") == {
        "nv_inference_request_success", "model"}  # label_values: its 2nd word is a label


def _panels(panels: list[dict]) -> Iterator[dict]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def used_names() -> dict[str, set[str]]:
    """Panel title -> the metric names its queries read (variables under "$name")."""
    dashboard = _dashboard()
    used = {}
    for panel in _panels(dashboard["panels"]):
        targets = panel.get("targets", [])
        if targets:
            used[panel["title"]] = set().union(*(metric_names(t["expr"]) for t in targets))
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            # label_values(METRIC, LABEL): only the metric is a name
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", query["query"].strip())
            assert match, query
            used[f"${variable['name']}"] = metric_names(match.group(1))
    return used


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every sample name of a live exposition (``x_bucket``, ``x_count`` ... included)."""
    repo = tmp_path_factory.mktemp("dashboard")
    write_model(repo, "add_sub", ADD_SUB_CONFIG + "response_cache { enable: true }\n",
                ADD_SUB_PY)
    write_model(repo, "batched", identity_config("batched", "TYPE_FP32", 8)
                + "dynamic_batching { }\n", IDENTITY_PY)
    with naiad_server("--model-repository", str(repo),
                      "--cache-config", "local,size=1048576") as server:
        _traffic(server)
        return _sample_names(server)


def _traffic(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensors = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in tensors:
            tensor.set_data_from_numpy(np.zeros(4, np.float32))
        client.infer("add_sub", tensors)
        tensor = httpclient.InferInput("INPUT0", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 2), np.float32))
        client.infer("batched", [tensor])


def _sample_names(server: ServerProcess) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                timeout=10) as answer:
        text = answer.read().decode()
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def test_the_dashboard_has_a_datasource_and_a_model_variable():
    dashboard = _dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["model"]["type"] == "query" and variables["model"]["multi"]
    for panel in _panels(dashboard["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_the_dashboard_shows_what_an_operator_asks_first():
    used = used_names()
    every = set().union(*used.values())
    for needed in ("nv_inference_request_success", "nv_inference_request_failure",
                   "naiad_inference_request_duration_ms_bucket",
                   "naiad_inference_queue_duration_ms_bucket",
                   "naiad_inference_compute_infer_duration_ms_bucket",
                   "naiad_inference_exec_batch_size_bucket", "naiad_batch_cut_total",
                   "nv_cache_num_hits_per_model", "nv_cache_num_misses_per_model",
                   "nv_gpu_utilization", "nv_gpu_memory_used_bytes"):
        assert needed in every, needed
    percentiles = [e for e in _exprs() if e.startswith("histogram_quantile(0.99")]
    assert percentiles and [e for e in _exprs() if e.startswith("histogram_quantile(0.5")]


def _exprs() -> list[str]:
    return [t["expr"] for p in _panels(_dashboard()["panels"]) for t in p.get("targets", [])]


def test_every_name_the_dashboard_reads_is_exported(live):
    gpu = {name for name, _, _ in GPU_FAMILIES}
    assert not gpu & live  # no GPU here: those names come from gpu_metrics alone
    unknown = {f"{title}: {name}" for title, names in used_names().items() for name in names
               if name not in live and name not in gpu}
    assert not unknown, sorted(unknown)

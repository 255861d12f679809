"""deploy/helm/naiad: the chart lints, renders with Helm's own engine for each repository kind
and the values users set, and every object validates as deploy/kubernetes' do."""

from __future__ import annotations

from typing import Any

import pytest
from deploy_objects import (
    CHART,
    HelmCallError,
    deployment_shutdown_timings,
    helm_call,
    one,
    render_chart,
    serve_arguments,
    validate_all,
)

VALUES: dict[str, dict[str, Any]] = {
    "defaults (pvc)": {},
    "s3": {"repository": {"kind": "s3"}, "backendConfig": {"onnxruntime": {
        "intra_op_thread_count": "2"}}, "extraArgs": ["--log-verbose=1"]},
    "path, queue-time autoscaling, long drain": {
        "repository": {"kind": "path", "path": "/srv/models"}, "exitTimeoutSeconds": 300,
        "preStopSleepSeconds": 15, "autoscaling": {"queueTimeMicroseconds": 50000},
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        "resources": {"limits": {"nvidia.com/gpu": 1}}},
    "minimal (no hpa, pdb, monitor)": {
        "autoscaling": {"enabled": False}, "podDisruptionBudget": {"enabled": False},
        "serviceMonitor": {"enabled": False}, "repository": {"pvc": {"create": False,
                                                                     "claimName": "mine"}}},
}


@pytest.fixture(scope="module", params=sorted(VALUES))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict]]:
    return request.param, render_chart(VALUES[request.param])


def test_the_chart_lints() -> None:
    report = helm_call("lint", chart=str(CHART))
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert not problems and not report["errors"], report


def test_every_object_validates(rendered: tuple[str, list[dict]]) -> None:
    name, items = rendered
    kinds = set(validate_all(items))
    if name.startswith("minimal"):
        assert kinds == {"Deployment", "Service"}
    else:
        assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                "ServiceMonitor"} <= kinds
    assert ("PersistentVolumeClaim" in kinds) == (name == "defaults (pvc)")


def test_the_grace_period_outlasts_the_drain(rendered: tuple[str, list[dict]]) -> None:
    grace, exit_within, pause = deployment_shutdown_timings(one(rendered[1], "Deployment"))
    assert grace > exit_within + pause, (grace, exit_within, pause)


def test_values_reach_the_command_line(rendered: tuple[str, list[dict]]) -> None:
    name, items = rendered
    [container] = one(items, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = serve_arguments(container["args"])
    expected = {"defaults (pvc)": "/models", "s3": "s3://my-bucket/model_repository",
                "path, queue-time autoscaling, long drain": "/srv/models",
                "minimal (no hpa, pdb, monitor)": "/models"}[name]
    assert args.model_repository == [expected]
    if name == "s3":
        assert args.model_control_mode == "poll"
        assert args.backend_config == [("onnxruntime", "intra_op_thread_count", "2")]
        assert args.log_verbose == 1
    if name.startswith("path"):
        assert args.exit_timeout_secs == 300
        metrics = one(items, "HorizontalPodAutoscaler")["spec"]["metrics"]
        assert metrics[1]["pods"]["target"]["averageValue"] == "50000"
    if name.startswith("minimal"):
        volumes = one(items, "Deployment")["spec"]["template"]["spec"]["volumes"]
        assert volumes[0]["persistentVolumeClaim"]["claimName"] == "mine"


def test_an_unknown_repository_kind_is_refused() -> None:
    with pytest.raises(HelmCallError, match=r"repository\.kind must be pvc, s3 or path") as raised:
        render_chart({"repository": {"kind": "nfs"}})
    assert raised.value.kind == "HelmRenderError"

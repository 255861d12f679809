"""deploy/kubernetes: every overlay renders with kustomize and every object validates offline
(Kubernetes' schemas, strict; the ServiceMonitor CRD excerpt); the shutdown timings hold."""

from __future__ import annotations

import jsonschema
import kubernetes_validate
import pytest
from deploy_objects import (
    KUSTOMIZE,
    deployment_shutdown_timings,
    one,
    render_kustomization,
    serve_arguments,
    validate_all,
)

OVERLAYS = sorted(p.name for p in (KUSTOMIZE / "overlays").iterdir())
EVERY_RENDERING = ["base", *(f"overlays/{name}" for name in OVERLAYS)]


@pytest.fixture(scope="module", params=EVERY_RENDERING)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict]]:
    return request.param, render_kustomization(KUSTOMIZE / request.param)


def test_the_overlays_are_the_documented_ones() -> None:
    assert OVERLAYS == ["gpu", "pvc", "s3"]


def test_every_object_validates(rendered: tuple[str, list[dict]]) -> None:
    name, items = rendered
    kinds = validate_all(items)
    expected = {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                "ServiceMonitor"}
    assert expected <= set(kinds), name
    if name in ("overlays/pvc", "overlays/gpu"):
        assert "PersistentVolumeClaim" in kinds


def test_the_grace_period_outlasts_the_drain(rendered: tuple[str, list[dict]]) -> None:
    """The kubelet's SIGKILL must not cut naiad's drain short: the grace period counts from
    the preStop hook, then naiad waits up to --exit-timeout-secs for requests in flight and
    exits at most --exit-grace-secs later."""
    grace, exit_within, pause = deployment_shutdown_timings(one(rendered[1], "Deployment"))
    assert grace > exit_within + pause, (grace, exit_within, pause)


def test_probes_ports_and_selectors(rendered: tuple[str, list[dict]]) -> None:
    items = rendered[1]
    deployment = one(items, "Deployment")
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": 8000, "grpc": 8001, "metrics": 8002}
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    labels = pod["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector and selector.items() <= labels.items()
    for kind in ("Service", "PodDisruptionBudget"):
        spec = one(items, kind)["spec"]
        assert (spec["selector"].get("matchLabels") or spec["selector"]).items() <= labels.items()
    service = one(items, "Service")
    monitor = one(items, "ServiceMonitor")["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["endpoints"]] == ["metrics"]
    hpa = one(items, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["metrics"][0]["resource"]["name"] == "cpu"


def test_the_overlays_choose_the_repository() -> None:
    pvc = one(render_kustomization(KUSTOMIZE / "overlays/pvc"), "Deployment")
    s3 = one(render_kustomization(KUSTOMIZE / "overlays/s3"), "Deployment")
    gpu_items = render_kustomization(KUSTOMIZE / "overlays/gpu")
    gpu = one(gpu_items, "Deployment")
    assert serve_arguments(pvc["spec"]["template"]["spec"]["containers"][0]["args"]) \
        .model_repository == ["/models"]
    s3_container = s3["spec"]["template"]["spec"]["containers"][0]
    assert serve_arguments(s3_container["args"]).model_repository[0].startswith("s3://")
    secrets = {e["valueFrom"]["secretKeyRef"]["key"] for e in s3_container["env"]
               if "valueFrom" in e}
    assert secrets == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    gpu_spec = gpu["spec"]
    assert gpu_spec["strategy"]["rollingUpdate"]["maxSurge"] == 0
    assert gpu_spec["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"] == 1
    assert gpu_spec["template"]["spec"]["containers"][0]["image"] == "naiad:gpu"
    metrics = one(gpu_items, "HorizontalPodAutoscaler")["spec"]["metrics"]
    assert metrics[1]["pods"]["metric"]["name"] == "avg_time_queue_us"


@pytest.mark.parametrize("kind, path, mistake", [
    ("Deployment", ("spec", "template", "spec", "containers", 0), {"ports": "8000"}),
    ("Deployment", ("spec", "template", "spec"), {"terminationGracePeriod": 45}),
    ("ServiceMonitor", ("spec", "endpoints", 0), {"interval": "15 seconds"}),
    ("ServiceMonitor", ("spec",), {"selectors": {}}),
])
def test_validation_refuses_mistakes(kind: str, path: tuple, mistake: dict) -> None:
    """The validators are not lenient: a misspelt field or a bad value in a rendered object
    fails (so the tests above can)."""
    item = one(render_kustomization(KUSTOMIZE / "base"), kind)
    target = item
    for key in path:
        target = target[key]
    target.update(mistake)
    with pytest.raises((kubernetes_validate.ValidationError, jsonschema.ValidationError)):
        validate_all([item])

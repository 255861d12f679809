"""What the deployment tests share: rendering deploy/kubernetes (kustomize) and deploy/helm (Helm's
own engine), validating every object offline, and reading a Deployment's shutdown timings."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from referencing import Registry, Resource

from naiad.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUSTOMIZE = DEPLOY / "kubernetes"
CHART = DEPLOY / "helm" / "naiad"
KSERVE_SCHEMA = DEPLOY / "kserve" / "schemas" / "kserve-0.21.0.schema.json"
SERVICEMONITOR_SCHEMA = KUSTOMIZE / "schemas" / "servicemonitor-v1.schema.json"
#: the oldest and newest Kubernetes releases kubernetes-validate knows; every object must
#: validate against both
K8S_VERSIONS = (kubernetes_validate.utils.all_versions()[0], kubernetes_validate.latest_version())
#: how a Deployment's container finds the command line: KServe's Triton runtime (and Triton's
#: own chart) start with `tritonserver`, naiad's manifests with `naiad serve`
KSERVE_KINDS = {"ClusterServingRuntime": "V1alpha1ClusterServingRuntime",
                "ServingRuntime": "V1alpha1ServingRuntime",
                "InferenceService": "V1beta1InferenceService"}


def kustomize_command() -> list[str]:
    """A renderer for kustomizations: `kustomize build`, else `kubectl kustomize` (kustomize 5
    is inside kubectl since 1.27); skips the test when neither is installed."""
    if found := shutil.which("kustomize"):
        return [found, "build"]
    if found := shutil.which("kubectl"):
        version = subprocess.run([found, "version", "--client", "-o", "json"],
                                 capture_output=True, text=True, timeout=60)
        kustomize = json.loads(version.stdout or "{}").get("kustomizeVersion", "")
        if kustomize.startswith("v5"):
            return [found, "kustomize"]
        pytest.skip(f"kubectl {found} bundles kustomize {kustomize or '(none)'}; "
                    "deploy/kubernetes needs kustomize 5 (kubectl 1.27 or later)")
    pytest.skip("neither kustomize nor kubectl is installed: deploy/kubernetes is not rendered")


def render_kustomization(folder: Path) -> list[dict[str, Any]]:
    rendered = subprocess.run([*kustomize_command(), str(folder)], capture_output=True,
                              text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    return [item for item in yaml.safe_load_all(rendered.stdout) if item]


# One helm-python-sdk call, in a child Python: argv[1] is the call ("lint" or "render"), stdin
# its JSON arguments, stdout its JSON answer, or (exit status 3) the error it raised.
_HELM_CALL = """
import json, sys
import helm_python as helm
args = json.load(sys.stdin)
try:
    if sys.argv[1] == "lint":
        answer = helm.lint(args["chart"], strict=True)
    else:
        answer = helm.Chart.load(args["chart"]).render(args["values"], name=args["release"],
                                                        namespace=args["namespace"])
except Exception as exc:
    json.dump({"error": type(exc).__name__, "message": str(exc)}, sys.stdout)
    sys.exit(3)
json.dump(answer, sys.stdout)
"""
# A lint or a render takes well under a second.
HELM_TIMEOUT_S = 120


class HelmCallError(Exception):
    """What helm-python-sdk raised in the child: ``kind`` is its exception's class name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def helm_call(call: str, **args: Any) -> Any:
    """What helm-python-sdk answers to ``call`` ("lint" or "render"), run in a child process.
    The SDK runs Helm's Go runtime inside the Python that loads it: once, in a full run,
    it took its pytest worker down during the lint, and pytest-xdist then waited for the
    lost worker for ever. In a child, such a crash fails the test that made the call, with
    the child's output; an error the SDK raises is a :class:`HelmCallError`. Skips the test
    when helm-python-sdk is not installed."""
    pytest.importorskip("helm_python", reason="helm-python-sdk (requirements-test.txt) "
                        "renders and lints the Helm chart")
    run = subprocess.run([sys.executable, "-c", _HELM_CALL, call], input=json.dumps(args),
                         capture_output=True, text=True, timeout=HELM_TIMEOUT_S)
    if run.returncode == 3:
        raised = json.loads(run.stdout)
        raise HelmCallError(raised["error"], raised["message"])
    if run.returncode != 0:
        pytest.fail(f"helm-python-sdk's {call} exited with {run.returncode}: "
                    f"{(run.stdout + run.stderr)[-3000:]}")
    return json.loads(run.stdout)


def render_chart(values: dict[str, Any], release: str = "demo") -> list[dict[str, Any]]:
    """The chart rendered by Helm's own template engine (the Helm 4 Go SDK in helm-python-sdk),
    offline, as `helm template` does."""
    manifests = helm_call("render", chart=str(CHART), values=values, release=release,
                          namespace="serving")
    return [item for text in manifests.values() for item in yaml.safe_load_all(text) if item]


@cache
def _kubernetes_definitions() -> Resource:
    folder = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    text = (folder / f"v{K8S_VERSIONS[1]}-local-strict" / "_definitions.json").read_text()
    return Resource.from_contents(json.loads(text))


@cache
def _schema(path: Path) -> Resource:
    return Resource.from_contents(json.loads(path.read_text()))


def _validate_with(schema: dict[str, Any], item: dict[str, Any], *extra: Resource) -> None:
    registry: Registry = Registry().with_resources(
        [(resource.id(), resource) for resource in (_kubernetes_definitions(), *extra)])
    jsonschema.Draft202012Validator(schema, registry=registry).validate(item)


def validate(item: dict[str, Any]) -> None:
    """One object against its schema: Kubernetes' own (strict: unknown fields refused) for both
    ends of K8S_VERSIONS, the ServiceMonitor excerpt, or KServe's types."""
    kind = item["kind"]
    if kind == "ServiceMonitor":
        _validate_with(_schema(SERVICEMONITOR_SCHEMA).contents, item)
    elif kind in KSERVE_KINDS:
        assert item["apiVersion"] == ("serving.kserve.io/v1beta1" if kind == "InferenceService"
                                      else "serving.kserve.io/v1alpha1")
        kserve = _schema(KSERVE_SCHEMA)
        _validate_with({"$ref": f"{kserve.id()}#/$defs/{KSERVE_KINDS[kind]}"}, item, kserve)
    else:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(item, version, strict=True)


def validate_all(items: Iterable[dict[str, Any]]) -> list[str]:
    """Validate every object; their kinds, for the caller to check that all came out."""
    kinds = []
    for item in items:
        validate(item)
        kinds.append(item["kind"])
    return kinds


def one(items: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [item for item in items if item["kind"] == kind]
    return found


def serve_arguments(args: list[str]) -> Any:
    """A container's args parsed by naiad's own command line (`naiad serve ...` or Triton's
    `tritonserver ...`): a flag naiad does not take fails the test."""
    if args[:2] == ["naiad", "serve"]:
        args = args[2:]
    elif args[:1] == ["tritonserver"]:
        args = args[1:]
    else:
        raise AssertionError(f"the container does not start naiad: {args}")
    return build_parser().parse_args(["serve", *args])


#: Kubernetes' default terminationGracePeriodSeconds
DEFAULT_GRACE_PERIOD_S = 30


def shutdown_timings(pod: dict[str, Any], container: dict[str, Any]) -> tuple[float, float, float]:
    """(terminationGracePeriodSeconds, the longest naiad may take to exit after SIGTERM, the
    preStop pause) of a pod spec and its naiad container. naiad exits within
    --exit-timeout-secs (the drain) plus --exit-grace-secs (ending what is left), whatever its
    models do."""
    args = serve_arguments(container["args"])
    command = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    pause = float(command[1]) if command and command[0] == "sleep" else 0.0
    return (pod.get("terminationGracePeriodSeconds", DEFAULT_GRACE_PERIOD_S),
            args.exit_timeout_secs + args.exit_grace_secs, pause)


def deployment_shutdown_timings(deployment: dict[str, Any]) -> tuple[float, float, float]:
    pod = deployment["spec"]["template"]["spec"]
    [container] = [c for c in pod["containers"] if c["name"] == "naiad"]
    return shutdown_timings(pod, container)

"""deploy/kserve: the ClusterServingRuntime and the example InferenceService validate against
KServe's API types (deploy/kserve/schemas), follow KServe's conventions, and naiad starts with
the runtime's own arguments."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml
from deploy_objects import DEPLOY, REPO, serve_arguments, shutdown_timings, validate
from source_serving import add_sub_over_http

from naiad.testing import ServerProcess

RUNTIME = DEPLOY / "kserve" / "naiad-runtime.yaml"
EXAMPLE = DEPLOY / "kserve" / "inferenceservice-example.yaml"
EXAMPLES_REPOSITORY = REPO / "examples" / "model_repository"


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_the_objects_validate() -> None:
    validate(load(RUNTIME))
    validate(load(EXAMPLE))


@pytest.mark.parametrize("path, mistake", [
    (("spec", "supportedModelFormats", 0), {"autoselect": True}),
    (("spec",), {"protocolVersions": "v2"}),
    (("spec", "containers", 0), {"args": "naiad serve"}),
])
def test_validation_refuses_mistakes(path: tuple, mistake: dict) -> None:
    runtime = copy.deepcopy(load(RUNTIME))
    target = runtime
    for key in path:
        target = target[key]
    target.update(mistake)
    with pytest.raises(jsonschema.ValidationError):
        validate(runtime)


def test_the_example_needs_its_model_format() -> None:
    service = load(EXAMPLE)
    del service["spec"]["predictor"]["model"]["modelFormat"]
    with pytest.raises(jsonschema.ValidationError, match="modelFormat"):
        validate(service)


def test_kserve_conventions() -> None:
    runtime = load(RUNTIME)["spec"]
    assert runtime["protocolVersions"] == ["v2", "grpc-v2"]
    formats = {f["name"]: f.get("autoSelect", False) for f in runtime["supportedModelFormats"]}
    # autoSelect where KServe's Triton runtime has it (triton, onnx); pytorch and python are
    # served when an InferenceService names the runtime
    assert formats == {"triton": True, "onnx": True, "pytorch": False, "python": False}
    assert runtime["annotations"]["serving.kserve.io/enable-prometheus-scraping"] == "true"
    assert runtime["annotations"]["prometheus.kserve.io/port"] == "8002"
    [container] = runtime["containers"]
    assert container["name"] == "kserve-container"
    args = serve_arguments(container["args"])
    assert (args.model_repository, args.http_port, args.grpc_port) == (["/mnt/models"], 8080, 9000)
    for flag in ("--model-store=/mnt/models", "--http-port=8080", "--grpc-port=9000"):
        assert flag in container["args"]
    model = load(EXAMPLE)["spec"]["predictor"]["model"]
    assert model["runtime"] == load(RUNTIME)["metadata"]["name"]
    assert model["modelFormat"]["name"] in formats


def test_naiad_exits_within_the_grace_period() -> None:
    """KServe's pods get the runtime's container in the predictor's pod spec; its grace period
    (Kubernetes' default unless the InferenceService sets one) must outlast naiad's exit."""
    [container] = load(RUNTIME)["spec"]["containers"]
    grace, exit_within, pause = shutdown_timings(load(EXAMPLE)["spec"]["predictor"], container)
    assert grace > exit_within + pause, (grace, exit_within, pause)


def test_naiad_starts_with_the_runtimes_arguments() -> None:
    """The runtime's arguments as KServe passes them, with the repository KServe would mount at
    /mnt/models and KServe's ports 8080/9000 swapped for free ones (this machine is shared)."""
    args = load(RUNTIME)["spec"]["containers"][0]["args"]
    assert args[:2] == ["naiad", "serve"]
    swaps = {"--model-store=/mnt/models": f"--model-store={EXAMPLES_REPOSITORY}",
             "--http-port=8080": "--http-port={http_port}",
             "--grpc-port=9000": "--grpc-port={grpc_port}"}
    command = [sys.executable, "-m", "naiad", *(swaps.get(a, a) for a in args[1:]),
               "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
               "--metrics-address=127.0.0.1", "--metrics-port={metrics_port}"]
    with ServerProcess(command) as server:
        add_sub_over_http(server)
        inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
                  grpcclient.InferInput("INPUT1", [4], "FP32")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full(4, 2, np.float32))

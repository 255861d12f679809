"""``pb_utils.load_model(name, config, files)`` end to end: a Python model (in a worker
process and in-process) deploys another Python model from the files it sends, then calls it
(BLS), on a real ``naiad serve --model-control-mode explicit``; a bad file name comes back
as a :class:`TritonModelException` naming it."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from naiad.testing import ServerProcess, naiad_server

MODES = ["isolated", "in_process"]

# The deployed model: OUT = IN * 3 + its version number's file content (a second file).
CHILD_PY = b"""
import json
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "data", "offset.txt")) as f:
            self.offset = float(f.read())

        self.here = here
        self.marker = json.loads(args["model_config"]).get("parameters", {}).get(
            "MARKER", {}).get("string_value")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 3 + self.offset)])
            for r in requests]

    def finalize(self):
        if self.marker:  # the model's files are still there while it unloads
            time.sleep(0.5)
            with open(os.path.join(self.here, "data", "offset.txt")) as f:
                content = f.read()
            with open(self.marker, "w") as out:
                out.write(content)
"""

CHILD_CONFIG = {
    "backend": "python", "max_batch_size": 0,
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [2]}],
    "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]}],
}

DEPLOYER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
parameters { key: "EXECUTION_MODE" value: { string_value: "%s" } }
"""

DEPLOYER_PY = f"""
import json
import triton_python_backend_utils as pb_utils

CHILD_PY = {CHILD_PY!r}
CONFIG = {json.dumps(CHILD_CONFIG)!r}


class TritonPythonModel:
    def initialize(self, args):
        self.mode = args["model_name"].split("_", 1)[1]

    def execute(self, requests):
        child = "child_" + self.mode
        try:
            pb_utils.load_model(child, CONFIG, {{"file:1/model.py": CHILD_PY,
                                                "file:../escape.py": b"x"}})
        except pb_utils.TritonModelException as exc:
            if "'file:../escape.py' leaves the model folder" not in exc.message():
                raise
        else:
            raise pb_utils.TritonModelException("a name outside the folder was accepted")
        pb_utils.load_model(child, CONFIG, {{"file:1/model.py": CHILD_PY,
                                            "file:1/data/offset.txt": b"0.5"}})
        answers = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name=child, requested_output_names=["OUT"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")])
            response = call.exec()
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            answers.append(pb_utils.InferenceResponse(
                [pb_utils.get_output_tensor_by_name(response, "OUT")]))
        return answers
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    base = tmp_path_factory.mktemp("deploy_bls")
    for mode in MODES:
        folder = base / "repo" / f"deployer_{mode}"
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(textwrap.dedent(DEPLOYER_CONFIG % mode))
        (folder / "1" / "model.py").write_text(DEPLOYER_PY)
    args = ["--model-repository", str(base / "repo"), "--model-control-mode", "explicit",
            "--load-files-directory", str(base / "staging")]
    for mode in MODES:
        args += ["--load-model", f"deployer_{mode}"]
    with naiad_server(*args) as process:
        yield process, base


@pytest.mark.parametrize("mode", MODES)
def test_a_python_model_deploys_another_from_files_and_calls_it(
        server: tuple[ServerProcess, Path], mode: str) -> None:
    process, base = server
    client = httpclient.InferenceServerClient(process.http_url)
    tensor = httpclient.InferInput("IN", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1, 2], np.float32))
    result = client.infer(f"deployer_{mode}", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUT"), [3.5, 6.5])
    assert client.is_model_ready(f"child_{mode}", "1")
    [folder] = (base / "staging").glob(f"naiad-staging-*/load-*/child_{mode}")
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "1/data/offset.txt", "1/model.py"]
    assert not list(base.rglob("escape.py"))


@pytest.mark.parametrize("mode", MODES)
def test_a_replaced_deployed_model_finds_its_files_until_it_has_unloaded(
        server: tuple[ServerProcess, Path], mode: str) -> None:
    """A load returns as soon as the new version serves; the one it replaced unloads after
    (its ``finalize`` runs then): that one's staged files go only once it has."""
    process, base = server
    name, marker = f"finalizing_{mode}", base / f"finalized_{mode}.txt"
    config = json.dumps(dict(CHILD_CONFIG, parameters={
        "MARKER": {"string_value": str(marker)}, "EXECUTION_MODE": {"string_value": mode}}))
    client = httpclient.InferenceServerClient(process.http_url)
    client.load_model(name, config=config,
                      files={"file:1/model.py": CHILD_PY, "file:1/data/offset.txt": b"7"})
    [first] = (base / "staging").glob(f"naiad-staging-*/load-*/{name}")
    client.load_model(name, config=config,
                      files={"file:1/model.py": CHILD_PY, "file:1/data/offset.txt": b"8"})
    deadline = time.monotonic() + 30
    while first.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not first.exists()
    assert marker.read_text() == "7"  # the first version's finalize read its own file
    client.unload_model(name)
    assert marker.read_text() == "8"
    assert not list((base / "staging").glob(f"naiad-staging-*/load-*/{name}"))

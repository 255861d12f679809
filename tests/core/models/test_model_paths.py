"""Paths a model configuration names stay inside the model folder (issue 17, item 1).

A load request's ``config`` override naming ``/somewhere/evil.py`` or ``../../x/evil.py``
used to import and run that file. Every such load is now refused with 400 /
INVALID_ARGUMENT before any backend sees the configuration; the evil file, which would
write a marker, never runs; the model keeps serving what it served.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig
from tritonclient.utils import InferenceServerException
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.backend_utils import model_file_path
from naiad.errors import InferenceServerError, Status
from naiad.models.configure import configure
from naiad.models.paths import check_config_paths, inside_folder, name_problem
from naiad.models.records import LoadOptions
from naiad.plugins import PluginManager
from naiad.testing import naiad_server

EVIL_PY = """
from pathlib import Path

Path({marker!r}).write_text("the load API ran code from outside the model folder")


class TritonPythonModel:
    def execute(self, requests):
        return []
"""


def _config(**fields: object) -> ModelConfig:
    config = ModelConfig()
    json_format.ParseDict(fields, config)
    return config


def _refused(call: Callable[..., object], *args: object, **kwargs: object
             ) -> InferenceServerError:
    with pytest.raises(InferenceServerError) as caught:
        call(*args, **kwargs)
    assert caught.value.status is Status.INVALID_ARG
    return caught.value


# --- the rule by spelling ----------------------------------------------------------------


@pytest.mark.parametrize(("name", "problem"), [
    ("", "is empty"),
    ("/etc/evil.py", "is an absolute path"),
    ("../evil.py", "leaves the model folder"),
    ("a/../../evil.py", "leaves the model folder"),
    ("model\0.py", "NUL"),
])
def test_names_that_leave_their_folder_by_their_spelling(name: str, problem: str) -> None:
    assert problem in (name_problem(name) or "")


@pytest.mark.parametrize("name", ["model.py", "sub/model.onnx", "./model.pt", "a..b.py"])
def test_names_inside_their_folder(name: str) -> None:
    assert name_problem(name) is None


def test_the_backend_helper_refuses_a_name_outside_naming_model_and_field(tmp_path: Path
                                                                          ) -> None:
    assert model_file_path(tmp_path, "model.onnx", "m") == tmp_path / "model.onnx"
    error = _refused(model_file_path, tmp_path, "/tmp/x.onnx", "m")
    assert "model 'm': default_model_filename '/tmp/x.onnx' is an absolute path" in error.message


# --- links: the operator's followed, a request's refused ---------------------------------


@pytest.fixture
def linked_model(tmp_path: Path) -> Path:
    """A model folder whose version folder holds a link to a file outside it."""
    outside = tmp_path / "shared"
    outside.mkdir()
    (outside / "weights.py").write_text("")
    model_dir = tmp_path / "repo" / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text("")
    os.symlink(outside / "weights.py", model_dir / "1" / "linked.py")
    return model_dir


def test_a_repository_config_may_name_a_link_the_operator_made(linked_model: Path) -> None:
    config = _config(default_model_filename="linked.py")
    check_config_paths("m", linked_model, config, from_request=False)


def test_a_request_may_not_name_a_link_that_leads_out(linked_model: Path) -> None:
    config = _config(default_model_filename="linked.py")
    error = _refused(check_config_paths, "m", linked_model, config, from_request=True)
    assert "default_model_filename 'linked.py' resolves to" in error.message
    assert "outside the model folder" in error.message
    check_config_paths("m", linked_model, _config(default_model_filename="model.py"),
                       from_request=True)


def test_the_model_folder_itself_may_be_a_link(linked_model: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    os.symlink(linked_model, alias)
    inside_folder(alias / "1", "model.py", model="m", field="f", model_dir=alias)


@pytest.mark.parametrize(("fields", "field"), [
    ({"cc_model_filenames": {"8.6": "../../x.plan"}}, "cc_model_filenames['8.6']"),
    ({"model_warmup": [{"name": "w", "inputs": {"X": {
        "data_type": "TYPE_FP32", "dims": [1], "input_data_file": "../../../etc/passwd"}}}]},
     "model_warmup[0] input 'X' input_data_file"),
    ({"sequence_batching": {"state": [{"input_name": "S", "output_name": "T",
                                       "data_type": "TYPE_FP32", "dims": [1],
                                       "initial_state": [{"data_type": "TYPE_FP32",
                                                          "dims": [1], "name": "s",
                                                          "data_file": "/etc/passwd"}]}]}},
     "sequence_batching state 'S' initial_state data_file"),
])
def test_every_path_field_is_checked(linked_model: Path, fields: dict, field: str) -> None:
    for from_request in (False, True):
        error = _refused(check_config_paths, "m", linked_model, _config(**fields),
                         from_request=from_request)
        assert field in error.message


def test_execution_env_path_from_a_request_stays_in_the_model_folder(linked_model: Path
                                                                     ) -> None:
    def env(value: str) -> ModelConfig:
        return _config(parameters={"EXECUTION_ENV_PATH": {"string_value": value}})

    check_config_paths("m", linked_model, env("$$TRITON_MODEL_DIRECTORY/env.tar.gz"),
                       from_request=True)
    # Triton's documented use: a shared environment anywhere, named by the operator.
    check_config_paths("m", linked_model, env("/opt/envs/py310.tar.gz"), from_request=False)
    for value in ("/opt/envs/py310.tar.gz", "$$TRITON_MODEL_DIRECTORY/../../env.tar.gz",
                  "$$TRITON_MODEL_DIRECTORY/1/linked.py"):
        error = _refused(check_config_paths, "m", linked_model, env(value), from_request=True)
        assert "parameters['EXECUTION_ENV_PATH']" in error.message


def test_configure_refuses_before_the_backend_reads_the_model(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    (tmp_path / "evil.py").write_text(textwrap.dedent(EVIL_PY.format(marker=str(marker))))
    model_dir = write_model(tmp_path / "repo", "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    override = json.dumps({"backend": "python", "default_model_filename":
                           str(tmp_path / "evil.py"), "parameters": {"EXECUTION_MODE": {
                               "string_value": "in_process"}}})
    error = _refused(configure, "add_sub", model_dir, override, LoadOptions(), PluginManager())
    assert "model 'add_sub': default_model_filename" in error.message
    assert not marker.exists()


# --- over the load API, HTTP and gRPC ------------------------------------------------------


@pytest.fixture(scope="module")
def evil(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("paths")
    marker = root / "marker"
    outside = root / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text(textwrap.dedent(EVIL_PY.format(marker=str(marker))))
    repo = root / "repo"
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    # The operator links a model file to shared code outside the repository, and names it.
    linked = write_model(repo, "linked", ADD_SUB_CONFIG.replace("add_sub", "linked")
                         + 'default_model_filename: "shared.py"\n', ADD_SUB_PY)
    (outside / "shared.py").write_text(textwrap.dedent(ADD_SUB_PY))
    os.symlink(outside / "shared.py", linked / "1" / "shared.py")
    os.symlink(outside / "evil.py", repo / "add_sub" / "1" / "link_to_evil.py")
    return {"root": root, "marker": marker, "repo": repo, "evil": outside / "evil.py"}


@pytest.fixture(scope="module")
def server(evil: dict[str, Path]):  # type: ignore[no-untyped-def]
    with naiad_server("--model-repository", str(evil["repo"]), "--model-control-mode=explicit",
                      "--load-model=add_sub", "--load-model=linked") as process:
        yield process


def _overrides(evil: dict[str, Path]) -> list[tuple[str, str]]:
    """(field, config override) pairs that each name the evil file."""
    relative = os.path.relpath(evil["evil"], evil["repo"] / "add_sub" / "1")
    return [(f"default_model_filename '{name}'",
             json.dumps({"backend": "python", "default_model_filename": name}))
            for name in (str(evil["evil"]), relative, "link_to_evil.py")]


def _add_sub_serves(url: str) -> None:
    inputs = [httpclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
    with httpclient.InferenceServerClient(url) as client:
        result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4) * 2)


def test_http_load_naming_a_file_outside_is_400_and_runs_nothing(server, evil) -> None:  # type: ignore[no-untyped-def]
    with httpclient.InferenceServerClient(server.http_url) as client:
        for field, override in _overrides(evil):
            with pytest.raises(InferenceServerException) as caught:
                client.load_model("add_sub", config=override)
            assert caught.value.status() == "400", caught.value
            assert f"model 'add_sub': {field}" in caught.value.message()
            assert "must stay inside the model folder" in caught.value.message()
        assert client.is_model_ready("add_sub")
        assert client.is_model_ready("linked")  # the operator's own link loads
    assert not evil["marker"].exists(), server.log()
    _add_sub_serves(server.http_url)


def test_grpc_load_naming_a_file_outside_is_invalid_argument(server, evil) -> None:  # type: ignore[no-untyped-def]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for field, override in _overrides(evil):
            with pytest.raises(InferenceServerException) as caught:
                client.load_model("add_sub", config=override)
            assert caught.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
            assert f"model 'add_sub': {field}" in caught.value.message()
        assert client.is_model_ready("add_sub")
    assert not evil["marker"].exists(), server.log()
    _add_sub_serves(server.http_url)

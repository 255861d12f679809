"""naiad.models.manager: the model lifecycle without a server or a frontend.

A real repository folder and a small backend registered in-process (as an embedding
application would): loading every model, a failed load that leaves the others serving,
version policies, which version serves a request, a reload, and unloading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import naiad
from naiad.errors import InferenceServerError, Status
from naiad.models.manager import ModelManager
from naiad.models.records import READY, UNAVAILABLE, LoadOptions
from naiad.plugins import PluginManager
from naiad.types import Backend, InferenceRequest, InferenceResponse, ModelInstance, Tensor

CONFIG = """
backend: "doubler"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


class Doubler(ModelInstance):
    def __init__(self, factor: float) -> None:
        self.factor = factor

    def execute(self, requests):
        return [InferenceResponse(outputs=[Tensor("Y", "FP32", r.inputs["X"].shape,
                                                  r.inputs["X"].data * self.factor)])
                for r in requests]


class DoublerBackend(Backend):
    name = "doubler"
    default_model_filename = "factor.txt"

    def create_instance(self, context, instance):
        text = (context.version_dir / self.default_model_filename).read_text()
        return Doubler(float(text))  # "broken" fails the load with ValueError's message


class Plugin:
    @naiad.hookimpl
    def naiad_backend(self, name, backend_config):
        return DoublerBackend() if name == "doubler" else None


def write_model(repo: Path, name: str, versions: dict[int, str], extra: str = "") -> None:
    (repo / name).mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(CONFIG + extra)
    for version, factor in versions.items():
        (repo / name / str(version)).mkdir(exist_ok=True)
        (repo / name / str(version) / "factor.txt").write_text(factor)


def manager(repo: Path) -> ModelManager:
    plugins = PluginManager()
    plugins.register(Plugin(), name="doubler")
    return ModelManager([repo], plugins, LoadOptions())


def infer(models: ModelManager, name: str, version: str = "") -> list[float]:
    model = models.get(name, version)
    request = InferenceRequest(name, -1, {"X": Tensor("X", "FP32", (1, 2),
                                                      np.array([[1, 2]], np.float32))})
    return model.scheduler.submit(request).result(10).outputs[0].data.ravel().tolist()


async def test_every_model_loads_and_a_broken_one_leaves_the_others_serving(tmp_path):
    write_model(tmp_path, "twice", {1: "2"})
    write_model(tmp_path, "broken", {1: "not a number"})
    models = manager(tmp_path)
    try:
        failures = await models.load_all()
        assert set(failures) == {"broken"} and "could not convert" in failures["broken"]
        assert infer(models, "twice") == [2.0, 4.0]
        index = {entry["name"]: entry for entry in models.index()}
        assert index["twice"]["state"] == READY and index["broken"]["state"] == UNAVAILABLE
        with pytest.raises(InferenceServerError) as caught:  # as Triton: its reason with it
            models.get("broken")
        assert caught.value.status is Status.NOT_FOUND
        assert "has no available versions" in caught.value.message
        assert "could not convert" in caught.value.message
        with pytest.raises(InferenceServerError) as caught:
            models.get("missing")
        assert caught.value.status is Status.NOT_FOUND
    finally:
        await models.unload_all()


async def test_the_latest_version_serves_unless_a_request_names_another(tmp_path):
    write_model(tmp_path, "m", {1: "1", 2: "2", 3: "3"},
                "version_policy: { specific: { versions: [ 1, 3 ] } }")
    models = manager(tmp_path)
    try:
        assert await models.load_all() == {}
        assert infer(models, "m") == [3.0, 6.0]
        assert infer(models, "m", "1") == [1.0, 2.0]
        assert models.is_ready("m", "3") and not models.is_ready("m", "2")
        with pytest.raises(InferenceServerError):
            models.get("m", "2")
    finally:
        await models.unload_all()


async def test_a_reload_serves_the_new_files_and_an_unload_removes_the_model(tmp_path):
    write_model(tmp_path, "m", {1: "2"})
    models = manager(tmp_path)
    try:
        await models.load_all()
        assert infer(models, "m") == [2.0, 4.0]
        (tmp_path / "m" / "1" / "factor.txt").write_text("10")
        await models.load("m")
        assert infer(models, "m") == [10.0, 20.0]
        await models.unload("m")
        assert not models.is_ready("m")
        with pytest.raises(InferenceServerError):
            models.get("m")
    finally:
        await models.unload_all()

"""naiad.pytriton's pieces without a server: the config PyTriton would send, TritonConfig's
flags and environment, the decorators, and the errors for what is not supported."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from naiad.pytriton.decorators import (
    ConstantPadder,
    TritonContext,
    batch,
    current_context,
    fill_optionals,
    first_value,
    group_by_keys,
    group_by_values,
    pad_batch,
    sample,
)
from naiad.pytriton.exceptions import (
    PyTritonBadParameterError,
    PyTritonNotSupportedError,
    PyTritonRuntimeError,
    PyTritonValidationError,
)
from naiad.pytriton.model_config import DynamicBatcher, ModelConfig, QueuePolicy, Tensor
from naiad.pytriton.model_config.generator import model_config_dict
from naiad.pytriton.model_config.parser import parse_model_config
from naiad.pytriton.model_config.triton_model_config import TensorSpec, TritonModelConfig
from naiad.pytriton.proxy.types import Request
from naiad.pytriton.triton import (
    Model,
    Triton,
    TritonConfig,
    TritonSecurityConfig,
    Workspace,
    serve_arguments,
)


def _model(tmp_path: pathlib.Path, **kwargs: object) -> Model:
    defaults: dict[str, object] = dict(
        model_name="M", model_version=1, infer_func=lambda requests: requests,
        inputs=[Tensor(dtype=np.float32, shape=(-1,)), Tensor(dtype=object, shape=(1,))],
        outputs=[Tensor(dtype=np.float32, shape=(-1,))], config=ModelConfig(), strict=False,
        triton_context=TritonContext(), workspace=Workspace(tmp_path / "ws"))
    defaults.update(kwargs)
    return Model(**defaults)  # type: ignore[arg-type]


def test_config_is_what_pytriton_sends(tmp_path: pathlib.Path) -> None:
    model = _model(tmp_path, config=ModelConfig(max_batch_size=16, batcher=DynamicBatcher(
        max_queue_delay_microseconds=100, preferred_batch_size=[4, 8],
        default_queue_policy=QueuePolicy(max_queue_size=3))), infer_func=[len, len])
    assert model_config_dict(model.triton_config) == {
        "name": "M", "backend": "python", "max_batch_size": 16,
        "dynamic_batching": {"maxQueueDelayMicroseconds": 100, "preferredBatchSize": [4, 8],
                             "defaultQueuePolicy": {"timeoutAction": "REJECT",
                                                    "defaultTimeoutMicroseconds": 0,
                                                    "allowTimeoutOverride": False,
                                                    "maxQueueSize": 3}},
        "input": [{"name": "INPUT_1", "dims": [-1], "data_type": "TYPE_FP32"},
                  {"name": "INPUT_2", "dims": [1], "data_type": "TYPE_STRING"}],
        "output": [{"name": "OUTPUT_1", "dims": [-1], "data_type": "TYPE_FP32"}],
        "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
        "parameters": {"workspace-path": {"string_value": (tmp_path / "ws").as_posix()}},
    }
    decoupled = _model(tmp_path, config=ModelConfig(batching=False, decoupled=True,
                                                     response_cache=True))
    found = model_config_dict(decoupled.triton_config)
    assert found["max_batch_size"] == 0 and "dynamic_batching" not in found
    assert found["model_transaction_policy"] == {"decoupled": True}
    assert found["response_cache"] == {"enable": True}
    parsed = parse_model_config(found)
    assert parsed.decoupled and not parsed.batching and parsed.inputs[1].dtype is np.bytes_


def test_bind_refuses_what_pytriton_refuses(tmp_path: pathlib.Path) -> None:
    with pytest.raises(PyTritonValidationError, match="cannot be optional"):
        _model(tmp_path, outputs=[Tensor(dtype=np.float32, shape=(-1,), optional=True)])
    with pytest.raises(PyTritonBadParameterError, match="max_batch_size"):
        _model(tmp_path, config=ModelConfig(max_batch_size=0))
    with pytest.raises(PyTritonValidationError, match="alphanumeric"):
        Triton._validate_model_name("bad name")


def test_an_unpicklable_callable_is_refused_naming_the_model(tmp_path: pathlib.Path) -> None:
    import threading

    lock = threading.Lock()
    with pytest.raises(PyTritonBadParameterError, match=r"model 'M'.*cannot be pickled"):
        _model(tmp_path, infer_func=lambda requests: (lock, requests))


def test_triton_config_flags_environment_and_unsupported_fields(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_GRPC_PORT", "45436")
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_ALLOW_METRICS", "false")
    monkeypatch.setenv("PYTRITON_TRITON_CONFIG_CACHE_CONFIG_0", "local,size=1048576")
    found = TritonConfig.from_env()
    assert (found.grpc_port, found.allow_metrics) == (45436, False)
    assert found.cache_config == ["local,size=1048576"]
    security = TritonSecurityConfig(access_token="t0k")
    args = serve_arguments(TritonConfig(http_header_forward_pattern="header.*", log_verbose=1,
                                        cache_config=["local,size=1024"]), security, tmp_path)
    assert "--model-control-mode=explicit" in args
    assert f"--model-repository={tmp_path}" in args
    assert "--http-header-forward-pattern=header.*" in args
    assert "--cache-config=local,size=1024" in args
    # naiad's OpenAI frontend (installed here) stays off: PyTriton has no OpenAI API.
    assert "--allow-openai=false" in args
    assert ("--http-restricted-api=shared-memory,model-repository,statistics,trace,logging:"
            "triton-access-token=t0k") in args
    with pytest.raises(PyTritonNotSupportedError, match=r"TritonConfig\.allow_sagemaker"):
        serve_arguments(TritonConfig(allow_sagemaker=True), security, tmp_path)
    with pytest.raises(PyTritonValidationError):
        TritonConfig(allow_http=False, allow_grpc=False)
    with pytest.raises(PyTritonValidationError, match="Invalid endpoint names: nope"):
        TritonSecurityConfig(restricted_endpoints=["nope"])
    assert TritonSecurityConfig(restricted_endpoints=[]).access_token is None


def _config(**kwargs: object) -> TritonModelConfig:
    values: dict[str, object] = dict(
        model_name="M", max_batch_size=8, batcher=DynamicBatcher(preferred_batch_size=[4]),
        inputs=[TensorSpec("a", (-1,), np.float32), TensorSpec("t", (1,), np.float32, True)],
        outputs=[TensorSpec("out", (-1,), np.float32)])
    values.update(kwargs)
    return TritonModelConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
def context() -> TritonContext:
    found = TritonContext()
    found.model_configs.default = _config()
    token = current_context.set(found)
    yield found
    current_context.reset(token)


def test_batch_concatenates_and_splits_per_request(context: TritonContext) -> None:
    @batch
    def double(a):
        return [a * 2]

    requests = [Request({"a": np.ones((2, 1), np.float32)}),
                Request({"a": np.full((1, 1), 3, np.float32)})]
    results = double(requests)
    assert [r["out"].tolist() for r in results] == [[[2.0], [2.0]], [[6.0]]]

    @batch
    def wrong(a):
        return {"out": a[:1]}

    with pytest.raises(ValueError, match="Expected batch size: 3"):
        wrong(requests)


def test_batch_streams_generator_results(context: TritonContext) -> None:
    @batch
    def count(a):
        for i in range(2):
            yield {"out": a + i}

    steps = list(count([Request({"a": np.zeros((1, 1), np.float32)})]))
    assert [step[0]["out"].tolist() for step in steps] == [[[0.0]], [[1.0]]]


def test_sample_fill_optionals_and_first_value(context: TritonContext) -> None:
    @fill_optionals(t=np.array([2.0], np.float32))
    @batch
    @first_value("t")
    def add(a, t):
        assert isinstance(t, np.floating)
        return {"out": a + t}

    result = add([Request({"a": np.ones((2, 1), np.float32)})])
    assert result[0]["out"].tolist() == [[3.0], [3.0]]

    @batch
    @first_value("t")
    def strict(a, t):
        return {"out": a}

    with pytest.raises(PyTritonRuntimeError, match="not equal"):
        strict([Request({"a": np.ones((2, 1), np.float32),
                         "t": np.array([[1.0], [2.0]], np.float32)})])
    with pytest.raises(PyTritonBadParameterError, match="Could not found nope"):
        fill_optionals(nope=np.array([1.0]))(lambda requests: requests)(
            [Request({"a": np.ones((1, 1), np.float32)})])

    @sample
    def one(a):
        return {"out": a + 1}

    assert one([{"a": np.array([1.0], np.float32)}])[0]["out"].tolist() == [2.0]


def test_group_by_keys_values_and_pad_batch(context: TritonContext) -> None:
    calls = []

    @group_by_keys
    @batch
    def by_keys(**inputs):
        calls.append(sorted(inputs))
        return {"out": inputs["a"]}

    requests = [Request({"a": np.ones((1, 1), np.float32)}),
                Request({"a": np.zeros((1, 1), np.float32), "t": np.ones((1, 1), np.float32)}),
                Request({"a": np.full((1, 1), 2, np.float32)})]
    assert [r["out"].tolist() for r in by_keys(requests)] == [[[1.0]], [[0.0]], [[2.0]]]
    assert sorted(calls) == [["a"], ["a", "t"]]

    @batch
    @group_by_values("t", pad_fn=ConstantPadder(0))
    def by_values(a, t):
        return {"out": np.repeat(a * t, int(t[0][0]), axis=1)}

    grouped = by_values([Request({"a": np.ones((3, 1), np.float32),
                                  "t": np.array([[1.0], [2.0], [1.0]], np.float32)})])
    assert grouped[0]["out"].tolist() == [[1.0, 0.0], [2.0, 2.0], [1.0, 0.0]]

    @pad_batch
    def padded(a):
        return a.shape[0]

    assert padded(a=np.ones((3, 1))) == 4


def test_decorated_methods_see_their_instance(context: TritonContext) -> None:
    class Model:
        factor = 3.0

        @batch
        def __call__(self, a):
            return {"out": a * self.factor}

    result = Model()([Request({"a": np.ones((1, 1), np.float32)})])
    assert result[0]["out"].tolist() == [[3.0]]

"""PyTorch models served by a real ``naiad serve``, called with tritonclient (HTTP and gRPC).

Every expected output is computed by running the saved torch module directly.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from backend_torch_helpers import (
    SCRIPT_IS_DEPRECATED,
    AddSub,
    DictModel,
    Guarded,
    ScaleAdd,
    WrongDtype,
    export_mlp,
    mlp,
    write,
)
from tritonclient.utils import InferenceServerException

from naiad.testing import ServerProcess, naiad_server

pytestmark = pytest.mark.filterwarnings(SCRIPT_IS_DEPRECATED)

PROTOCOLS = ("http", "grpc")
REJECTED = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}
RESULT_WAIT_SECONDS = 60.0


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("torch-repo")
    write(root, "add_sub", """
        platform: "pytorch_libtorch"
        max_batch_size: 8
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] },
                { name: "INPUT__1" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] },
                 { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ -1 ] } ]
    """, torch.jit.script(AddSub()))
    # Inputs listed y before x: they must reach forward(x, y) by name, not by position.
    write(root, "scale_add", """
        backend: "pytorch"
        max_batch_size: 0
        input [ { name: "y" data_type: TYPE_INT64 dims: [ 3 ] },
                { name: "x" data_type: TYPE_INT64 dims: [ 3 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_INT64 dims: [ 3 ] } ]
    """, torch.jit.script(ScaleAdd()))
    write(root, "mlp", """
        platform: "pytorch_libtorch"
        max_batch_size: 16
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        dynamic_batching { }
        instance_group [ { count: 2 kind: KIND_CPU } ]
    """, torch.jit.trace(mlp(), torch.zeros(1, 4)))
    write(root, "dict_io", """
        backend: "pytorch"
        max_batch_size: 4
        input [ { name: "a" data_type: TYPE_INT32 dims: [ 2 ] },
                { name: "b" data_type: TYPE_INT32 dims: [ 2 ] } ]
        output [ { name: "total" data_type: TYPE_INT32 dims: [ 2 ] },
                 { name: "doubled" data_type: TYPE_INT32 dims: [ 2 ] } ]
    """, torch.jit.script(DictModel()))
    # A long queue delay with a preferred size of 4: four requests sent together are
    # executed as one batch, and one of them makes forward() raise.
    write(root, "guarded", """
        backend: "pytorch"
        max_batch_size: 4
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 5000000 }
    """, torch.jit.script(Guarded()))
    write(root, "wrong_dtype", """
        backend: "pytorch"
        max_batch_size: 0
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
    """, torch.jit.script(WrongDtype()))
    write(root, "bf16", """
        backend: "pytorch"
        max_batch_size: 0
        input [ { name: "INPUT__0" data_type: TYPE_BF16 dims: [ -1 ] },
                { name: "INPUT__1" data_type: TYPE_BF16 dims: [ -1 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_BF16 dims: [ -1 ] },
                 { name: "OUTPUT__1" data_type: TYPE_BF16 dims: [ -1 ] } ]
    """, torch.jit.script(AddSub()))
    # torch.export: with a full config, with only the backend named, and with no config at
    # all (the program saved as model.pt, the file name the core detects).
    write(root, "export_full", """
        backend: "pytorch"
        max_batch_size: 4
        input [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        dynamic_batching { }
    """, export_mlp(), filename="model.pt2")
    write(root, "export_partial", 'backend: "pytorch"\n', export_mlp(), filename="model.pt2")
    write(root, "export_noconfig", None, export_mlp())
    # Load failures: a BYTES input, and TorchScript with no inputs or outputs in its config.
    write(root, "bytes_input", """
        backend: "pytorch"
        max_batch_size: 0
        input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
    """, torch.jit.script(WrongDtype()))
    write(root, "script_noconfig", None, torch.jit.script(AddSub()))
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with naiad_server("--model-repository", str(repo), "--exit-on-error=false",
                      "--strict-readiness=false") as process:
        yield process


@pytest.fixture(scope="module")
def clients(server: ServerProcess) -> Iterator[dict[str, object]]:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    yield {"http": http, "grpc": grpc}
    http.close()
    grpc.close()


def infer(clients: dict, protocol: str, model: str, inputs: dict[str, tuple[str, np.ndarray]],
          outputs: list[str] | None = None) -> dict[str, np.ndarray]:
    """One request; returns every output as numpy."""
    module = httpclient if protocol == "http" else grpcclient
    tensors = []
    for name, (datatype, array) in inputs.items():
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    requested = None if outputs is None else [module.InferRequestedOutput(o) for o in outputs]
    result = clients[protocol].infer(model, tensors, outputs=requested)
    response = result.get_response()
    names = ([o["name"] for o in response["outputs"]] if protocol == "http"
             else [o.name for o in response.outputs])
    return {name: result.as_numpy(name) for name in names}


def close(got: np.ndarray, want: torch.Tensor) -> None:
    """``got`` (a read-only array from tritonclient) equals ``want`` to float tolerance."""
    torch.testing.assert_close(torch.tensor(got), want)


def rejected(clients: dict, protocol: str, model: str,
             inputs: dict[str, tuple[str, np.ndarray]], *fragments: str,
             status: dict[str, str] = REJECTED) -> str:
    with pytest.raises(InferenceServerException) as info:
        infer(clients, protocol, model, inputs)
    message = info.value.message() or ""
    assert info.value.status() == status[protocol], (info.value.status(), message)
    for fragment in (model, *fragments):
        assert fragment in message, (fragment, message)
    return message


# --- TorchScript: Triton's naming conventions -----------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_add_sub_named_index(clients, protocol):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 0.5, dtype=np.float32)
    got = infer(clients, protocol, "add_sub", {"INPUT__0": ("FP32", a), "INPUT__1": ("FP32", b)})
    want = AddSub()(torch.from_numpy(a), torch.from_numpy(b))
    close(got["OUTPUT__0"], want[0])
    close(got["OUTPUT__1"], want[1])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_requested_output_only(clients, protocol):
    a = np.ones((1, 4), np.float32)
    got = infer(clients, protocol, "add_sub", {"INPUT__0": ("FP32", a), "INPUT__1": ("FP32", a)},
                outputs=["OUTPUT__1"])
    assert list(got) == ["OUTPUT__1"]
    np.testing.assert_array_equal(got["OUTPUT__1"], np.zeros((1, 4), np.float32))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_named_arguments_bind_by_name(clients, protocol):
    x = np.array([1, 2, 3], np.int64)
    y = np.array([10, 20, 30], np.int64)
    got = infer(clients, protocol, "scale_add", {"y": ("INT64", y), "x": ("INT64", x)})
    want = ScaleAdd()(x=torch.from_numpy(x), y=torch.from_numpy(y))
    np.testing.assert_array_equal(got["OUTPUT__0"], want.numpy())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dictionary_input_and_output(clients, protocol):
    a = np.array([[1, 2], [3, 4]], np.int32)
    b = np.array([[5, 6], [7, 8]], np.int32)
    got = infer(clients, protocol, "dict_io", {"a": ("INT32", a), "b": ("INT32", b)})
    want = DictModel()({"a": torch.from_numpy(a), "b": torch.from_numpy(b)})
    np.testing.assert_array_equal(got["total"], want["total"].numpy())
    np.testing.assert_array_equal(got["doubled"], want["doubled"].numpy())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bf16_without_float32_rounding(clients, protocol):
    # Values whose sum needs all of bfloat16's bits: a detour through float32 and back
    # would still be exact, so the check is bit equality with torch's own bf16 result.
    a = torch.tensor([1.0078125, -3.5, 256.0, 1e-3], dtype=torch.bfloat16)
    b = torch.tensor([0.0078125, 0.25, 1.0, 2e-3], dtype=torch.bfloat16)
    a_np = a.view(torch.int16).numpy().view(np.dtype("bfloat16"))
    b_np = b.view(torch.int16).numpy().view(np.dtype("bfloat16"))
    got = infer(clients, protocol, "bf16", {"INPUT__0": ("BF16", a_np), "INPUT__1": ("BF16", b_np)})
    for name, want in zip(("OUTPUT__0", "OUTPUT__1"), AddSub()(a, b), strict=True):
        assert got[name].dtype == np.dtype("bfloat16")
        np.testing.assert_array_equal(got[name].view(np.int16), want.view(torch.int16).numpy())


# --- batching -------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mlp_batch(clients, protocol):
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    got = infer(clients, protocol, "mlp", {"INPUT__0": ("FP32", x)})
    with torch.inference_mode():
        want = mlp()(torch.from_numpy(x))
    close(got["OUTPUT__0"], want)


def test_mlp_concurrent_requests_each_get_their_rows(clients):
    rng = np.random.default_rng(2)
    sent = {i: rng.standard_normal((1 + i % 3, 4)).astype(np.float32) for i in range(12)}
    results: queue.Queue = queue.Queue()
    for i, x in sent.items():
        tensor = grpcclient.InferInput("INPUT__0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        clients["grpc"].async_infer("mlp", [tensor], callback=lambda result, error, i=i:
                                    results.put((i, result, error)))
    model = mlp()
    for _ in sent:
        i, result, error = results.get(timeout=RESULT_WAIT_SECONDS)
        assert error is None, error
        with torch.inference_mode():
            want = model(torch.from_numpy(sent[i]))
        close(result.as_numpy("OUTPUT__0"), want)


def test_a_failing_request_in_a_batch_fails_alone(clients, server):
    """Four requests become one batch; forward() raises on one of them. That one gets 400
    naming the model and its input; the other three get their answers."""
    sent = {i: np.full((1, 3), 2000.0 if i == 2 else float(i), np.float32) for i in range(4)}
    results: queue.Queue = queue.Queue()
    for i, x in sent.items():
        tensor = grpcclient.InferInput("INPUT__0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        clients["grpc"].async_infer("guarded", [tensor], callback=lambda result, error, i=i:
                                    results.put((i, result, error)))
    for _ in sent:
        i, result, error = results.get(timeout=RESULT_WAIT_SECONDS)
        if i == 2:
            assert error is not None
            assert error.status() == "StatusCode.INVALID_ARGUMENT", error
            assert "guarded" in error.message() and "INPUT__0" in error.message(), error
            assert "sum over 1000" in error.message(), error
        else:
            assert error is None, error
            np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), sent[i] * 3)
    [stats] = clients["grpc"].get_inference_statistics("guarded").model_stats
    assert stats.execution_count == 1, stats  # the four were merged into one execution


# --- torch.export ---------------------------------------------------------------------


@pytest.mark.parametrize("model", ["export_full", "export_partial", "export_noconfig"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exported_program_serves(clients, protocol, model):
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    name = "OUTPUT__0"
    input_name = "input"  # the forward() argument of torch.nn.Sequential
    got = infer(clients, protocol, model, {input_name: ("FP32", x)})
    want = export_mlp().module()(torch.from_numpy(x))
    close(got[name], want)


@pytest.mark.parametrize("model", ["export_partial", "export_noconfig"])
def test_auto_complete_from_exported_program(clients, model):
    full = clients["grpc"].get_model_config("export_full").config
    filled = clients["grpc"].get_model_config(model).config
    for field in ("input", "output", "max_batch_size", "dynamic_batching", "backend",
                  "platform"):
        assert getattr(filled, field) == getattr(full, field), (field, filled)
    metadata = clients["http"].get_model_metadata(model)
    assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["inputs"]] == [
        ("input", "FP32", [-1, 4])]
    assert [(t["name"], t["datatype"], t["shape"]) for t in metadata["outputs"]] == [
        ("OUTPUT__0", "FP32", [-1, 3])]


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_wrong_datatype_is_rejected(clients, protocol):
    x = np.ones((1, 4), np.int32)
    rejected(clients, protocol, "mlp", {"INPUT__0": ("INT32", x)}, "INPUT__0", "FP32")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_wrong_shape_is_rejected(clients, protocol):
    x = np.ones((1, 5), np.float32)
    rejected(clients, protocol, "mlp", {"INPUT__0": ("FP32", x)}, "INPUT__0", "[-1,4]")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_forward_error_names_model_and_tensors(clients, protocol):
    # The config allows any width; the model cannot add widths 3 and 4.
    a = np.ones((1, 3), np.float32)
    b = np.ones((1, 4), np.float32)
    message = rejected(clients, protocol, "add_sub",
                       {"INPUT__0": ("FP32", a), "INPUT__1": ("FP32", b)},
                       "INPUT__0", "INPUT__1", "[1, 3]", "must match")
    # ...and the server keeps serving.
    assert "PyTorch execute failure" in message
    got = infer(clients, protocol, "add_sub", {"INPUT__0": ("FP32", b), "INPUT__1": ("FP32", b)})
    np.testing.assert_array_equal(got["OUTPUT__0"], b * 2)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_output_datatype_mismatch_is_a_server_error(clients, protocol):
    x = np.ones(2, np.float32)
    rejected(clients, protocol, "wrong_dtype", {"INPUT__0": ("FP32", x)}, "OUTPUT__0",
             "torch.float64", "FP32", status={"http": "500", "grpc": "StatusCode.INTERNAL"})


# --- load failures --------------------------------------------------------------------


def test_load_failures_are_reported(clients):
    index = {entry["name"]: entry for entry in clients["http"].get_model_repository_index()}
    bytes_model = index["bytes_input"]
    assert bytes_model["state"] == "UNAVAILABLE", bytes_model
    assert "TEXT" in bytes_model["reason"] and "TYPE_STRING" in bytes_model["reason"]
    script = index["script_noconfig"]
    assert script["state"] == "UNAVAILABLE", script
    assert "lists no inputs" in script["reason"] and "forward(a, b)" in script["reason"]
    assert not clients["grpc"].is_model_ready("script_noconfig")
    # the others are ready
    for name in ("add_sub", "mlp", "export_full", "export_noconfig"):
        assert index[name]["state"] == "READY", index[name]

"""Executing PyTorch models in-process: datatypes, copies, threads and execution settings."""

from __future__ import annotations

import threading
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
import torch
from backend_torch_helpers import (
    SCRIPT_IS_DEPRECATED,
    AddSub,
    Identity,
    context_for,
    instance_info,
    parse_config,
    request,
    write,
)
from expect import rejected

from naiad.datatypes import NUMPY_DTYPES
from naiad.errors import Status
from naiad_backend_torch.backend import TorchBackend
from naiad_backend_torch.dtypes import DATATYPES, TORCH_DTYPES, to_numpy, to_tensor
from naiad_backend_torch.threads import ThreadBudget

pytestmark = pytest.mark.filterwarnings(SCRIPT_IS_DEPRECATED)


def identity_config(datatype: str, parameters: str = "") -> str:
    return f"""
        backend: "pytorch"
        max_batch_size: 8
        input [ {{ name: "INPUT__0" data_type: TYPE_{datatype} dims: [ -1 ] }} ]
        output [ {{ name: "OUTPUT__0" data_type: TYPE_{datatype} dims: [ -1 ] }} ]
        {parameters}
    """


@pytest.fixture
def load(tmp_path):
    """``load(module, config)``: save ``module`` (scripted) and create an instance of it on
    the calling thread; every instance is closed at the end."""
    made = []
    backend = TorchBackend()

    def _load(module, config: str, name: str = "m"):
        if not (tmp_path / name).exists():
            write(tmp_path, name, None, torch.jit.script(module))
        instance = backend.create_instance(context_for(tmp_path / name, parse_config(config)),
                                           instance_info(name, len(made)))
        made.append(instance)
        return instance

    yield _load
    for instance in made:
        instance.close()


def sample(datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    values = np.arange(int(np.prod(shape))).reshape(shape) % 7
    if datatype == "BOOL":
        return values % 2 == 1
    return values.astype(NUMPY_DTYPES[datatype])


# --- datatypes and copies -------------------------------------------------------------


@pytest.mark.parametrize("datatype", sorted(DATATYPES))
def test_arrays_cross_to_torch_and_back_without_copies(datatype):
    array = sample(datatype, (2, 3))
    tensor = to_tensor(array)
    assert tensor.dtype == TORCH_DTYPES[datatype]
    assert tensor.data_ptr() == array.ctypes.data  # the same memory
    back = to_numpy(tensor)
    assert back.dtype == array.dtype
    assert np.shares_memory(back, array)
    np.testing.assert_array_equal(back.view(np.uint8), array.view(np.uint8))


def test_bf16_keeps_every_bit():
    bits = np.array([0x3F81, 0xC060, 0x7F7F, 0x0001, 0x8000], np.uint16)  # odd mantissas too
    tensor = to_tensor(bits.view(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(tensor.view(torch.int16).numpy().view(np.uint16), bits)


def test_a_read_only_array_is_copied_before_torch_sees_it():
    array = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), np.float32)
    assert not array.flags.writeable
    tensor = to_tensor(array)
    assert tensor.data_ptr() != array.ctypes.data
    np.testing.assert_array_equal(tensor.numpy(), array)


@pytest.mark.parametrize("datatype", sorted(DATATYPES))
def test_identity_in_every_datatype(load, datatype):
    instance = load(Identity(), identity_config(datatype))
    array = sample(datatype, (3, 5))
    [response] = instance.execute([request("m", {"INPUT__0": array})])
    [output] = response.outputs
    assert (output.name, output.datatype, output.shape) == ("OUTPUT__0", datatype, (3, 5))
    np.testing.assert_array_equal(output.data.view(np.uint8), array.view(np.uint8))


# --- batches --------------------------------------------------------------------------


def test_a_batch_runs_once_and_each_request_gets_its_rows(load):
    calls = []

    class Counting(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor):
            return a + b, a - b

    instance = load(Counting(), """
        backend: "pytorch"
        max_batch_size: 8
        input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 2 ] },
                { name: "INPUT__1" data_type: TYPE_INT32 dims: [ 2 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 2 ] },
                 { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 2 ] } ]
    """)
    module = instance.loaded.module
    instance.loaded = replace(instance.loaded,
                              module=lambda *args: calls.append(args[0].shape) or module(*args))
    requests = [request("m", {"INPUT__0": np.full((rows, 2), rows, np.int32),
                              "INPUT__1": np.ones((rows, 2), np.int32)}) for rows in (1, 3, 2)]
    responses = instance.execute(requests)
    assert calls == [torch.Size([6, 2])]
    for rows, response in zip((1, 3, 2), responses, strict=True):
        out = {t.name: t.data for t in response.outputs}
        np.testing.assert_array_equal(out["OUTPUT__0"], np.full((rows, 2), rows + 1))
        np.testing.assert_array_equal(out["OUTPUT__1"], np.full((rows, 2), rows - 1))


def test_requested_outputs_only(load):
    instance = load(AddSub(), """
        backend: "pytorch"
        max_batch_size: 0
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] },
                { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] },
                 { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 2 ] } ]
    """)
    x = np.ones(2, np.float32)
    [response] = instance.execute([request("m", {"INPUT__0": x, "INPUT__1": x}, ["OUTPUT__1"])])
    assert [t.name for t in response.outputs] == ["OUTPUT__1"]


def test_an_output_index_the_model_lacks_is_reported(load):
    instance = load(Identity(), identity_config("FP32").replace(
        'output [ { name: "OUTPUT__0"', 'output [ { name: "OUTPUT__1"'))
    rejected(lambda: instance.execute([request("m", {"INPUT__0": np.ones((1, 2), np.float32)})]),
             "model 'm'", "OUTPUT__1", "index 1", status=Status.INTERNAL)


# --- threads and execution settings ---------------------------------------------------


def run_on_new_thread(instance, array: np.ndarray) -> dict:
    """Execute on a fresh thread (as a naiad worker does); report that thread's torch state."""
    seen: dict = {}

    def work():
        instance.execute([request("m", {"INPUT__0": array})])
        seen["threads"] = torch.get_num_threads()
        seen["optimize"] = torch._C._get_graph_executor_optimize()

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return seen


def test_intra_op_thread_count_applies_to_the_instance_thread(load):
    instance = load(Identity(), identity_config("FP32", """
        parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "1" } }
        parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value { string_value: "true" } }
    """))
    seen = run_on_new_thread(instance, np.ones((1, 2), np.float32))
    assert seen == {"threads": 1, "optimize": False}
    assert torch._C._get_graph_executor_optimize()  # other threads keep their own setting


def test_instances_share_the_cores_by_default(load):
    first = load(Identity(), identity_config("FP32"))
    cores = first._budget.cores
    assert run_on_new_thread(first, np.ones((1, 2), np.float32))["threads"] == cores
    second = load(Identity(), identity_config("FP32"))
    expected = max(1, cores // 2)
    for instance in (first, second):
        assert run_on_new_thread(instance, np.ones((1, 2), np.float32))["threads"] == expected
    second.close()
    assert run_on_new_thread(first, np.ones((1, 2), np.float32))["threads"] == cores


def test_thread_budget_never_goes_below_one():
    budget = ThreadBudget(cores=2)
    for _ in range(5):
        budget.join()
    assert budget.share() == 1
    for _ in range(4):
        budget.leave()
    assert budget.share() == 2


def test_inference_mode_by_default_and_no_grad_when_disabled(load):
    seen = []

    def spy(instance):
        module = instance.loaded.module

        def forward(*args):
            seen.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
            return module(*args)
        instance.loaded = replace(instance.loaded, module=forward)
        return instance

    x = np.zeros((1, 1), np.float32)
    spy(load(Identity(), identity_config("FP32"))).execute([request("m", {"INPUT__0": x})])
    spy(load(Identity(), identity_config("FP32", """
        parameters { key: "INFERENCE_MODE" value { string_value: "false" } }
    """))).execute([request("m", {"INPUT__0": x})])
    assert seen == [(True, False), (False, False)]

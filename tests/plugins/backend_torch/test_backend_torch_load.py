"""Loading PyTorch models in-process: model files, devices, settings and auto-complete."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from backend_torch_helpers import (
    SCRIPT_IS_DEPRECATED,
    AddSub,
    Identity,
    context_for,
    export_mlp,
    instance_info,
    mlp,
    parse_config,
    write,
)
from expect import rejected
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.errors import Status
from naiad_backend_torch.autocomplete import DEFAULT_MAX_BATCH_SIZE
from naiad_backend_torch.backend import TorchBackend
from naiad_backend_torch.parameters import TorchSettings, read_settings
from naiad_backend_torch.threads import ProcessSettings

pytestmark = pytest.mark.filterwarnings(SCRIPT_IS_DEPRECATED)

ADD_SUB = """
    backend: "pytorch"
    max_batch_size: 8
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] },
            { name: "INPUT__1" data_type: TYPE_FP32 dims: [ -1 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def load(model_dir: Path, config: str, instance: str = "KIND_CPU", index: int = 0,
         backend: TorchBackend | None = None):
    backend = backend or TorchBackend()
    return backend.create_instance(context_for(model_dir, parse_config(config)),
                                   instance_info(model_dir.name, index, instance))


def test_the_entry_point_does_not_import_torch():
    code = ("import sys, naiad_backend_torch.plugin, naiad_backend_torch; "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


# --- model files ----------------------------------------------------------------------


def test_missing_model_file(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    rejected(lambda: load(tmp_path / "m", ADD_SUB), "unable to find", "model.pt", "'m'",
             status=Status.UNAVAILABLE)


def test_a_pickled_module_is_not_torchscript(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    torch.save(AddSub(), tmp_path / "m" / "1" / "model.pt")
    rejected(lambda: load(tmp_path / "m", ADD_SUB), "model 'm'", "as TorchScript",
             "torch.save", status=Status.UNAVAILABLE)


def test_bytes_is_refused_naming_the_tensor(tmp_path):
    write(tmp_path, "m", None, torch.jit.script(AddSub()))
    config = ADD_SUB.replace('name: "INPUT__1" data_type: TYPE_FP32',
                             'name: "INPUT__1" data_type: TYPE_STRING')
    rejected(lambda: load(tmp_path / "m", config), "model 'm'", "input 'INPUT__1'",
             "TYPE_STRING")


def test_input_count_must_match_forward(tmp_path):
    write(tmp_path, "m", None, torch.jit.script(Identity()))
    rejected(lambda: load(tmp_path / "m", ADD_SUB), "model 'm'",
             "configuration expects 2 inputs, model provides 1")


def test_model_pt2_is_found_when_model_pt_is_absent(tmp_path):
    write(tmp_path, "m", None, export_mlp(), filename="model.pt2")
    instance = load(tmp_path / "m", """
        backend: "pytorch"
        default_model_filename: "model.pt"
        max_batch_size: 4
        input [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
    """)
    assert instance.loaded.exported
    assert instance.loaded.path.name == "model.pt2"
    instance.close()


def test_default_model_filename_picks_the_file(tmp_path):
    write(tmp_path, "m", None, torch.jit.script(AddSub()), filename="weights.ts")
    instance = load(tmp_path / "m", ADD_SUB + 'default_model_filename: "weights.ts"\n')
    assert instance.loaded.path.name == "weights.ts"
    assert not instance.loaded.exported
    instance.close()


# --- devices --------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_gpu_instance_without_cuda_is_a_clear_load_error(tmp_path):
    write(tmp_path, "m", None, torch.jit.script(AddSub()))
    rejected(lambda: load(tmp_path / "m", ADD_SUB, instance="KIND_GPU"),
             "model 'm'", "instance 'm_0_0'", "GPU 0", "KIND_GPU", "KIND_CPU",
             status=Status.UNAVAILABLE)


def test_kind_model_keeps_the_model_device(tmp_path):
    write(tmp_path, "m", None, torch.jit.trace(mlp(), torch.zeros(1, 4)))
    instance = load(tmp_path / "m", """
        backend: "pytorch"
        max_batch_size: 4
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
    """, instance="KIND_MODEL")
    assert instance.device == torch.device("cpu")
    instance.close()


# --- parameters -----------------------------------------------------------------------


def test_settings_default_to_triton_defaults():
    assert read_settings(ModelConfig(), "m") == TorchSettings()
    assert TorchSettings().inference_mode


def test_settings_are_read_from_parameters():
    config = parse_config("""
        parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value { string_value: "true" } }
        parameters { key: "INFERENCE_MODE" value { string_value: "false" } }
        parameters { key: "ENABLE_WEIGHT_SHARING" value { string_value: "TRUE" } }
        parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "3" } }
        parameters { key: "NUM_INTEROP_THREADS" value { string_value: "2" } }
        parameters { key: "SOMETHING_ELSE" value { string_value: "kept for others" } }
    """)
    settings = read_settings(config, "m")
    assert not settings.optimized_execution
    assert not settings.inference_mode
    assert settings.weight_sharing
    assert (settings.intra_op_threads, settings.inter_op_threads) == (3, 2)


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("INFERENCE_MODE", "maybe", '"true" or "false"'),
    ("INTRA_OP_THREAD_COUNT", "0", "positive thread count"),
    ("INTER_OP_THREAD_COUNT", "two", "positive thread count"),
])
def test_bad_parameter_values_fail_the_load(key, value, expected):
    config = parse_config(f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}')
    rejected(lambda: read_settings(config, "m"), "model 'm'", key, expected)


def test_weight_sharing_loads_the_file_once_per_device(tmp_path):
    write(tmp_path, "m", None, torch.jit.script(AddSub()))
    config = ADD_SUB + """
        parameters { key: "ENABLE_WEIGHT_SHARING" value { string_value: "true" } }
    """
    backend = TorchBackend()
    first = load(tmp_path / "m", config, index=0, backend=backend)
    second = load(tmp_path / "m", config, index=1, backend=backend)
    assert first.loaded.module is second.loaded.module
    first.close()
    second.close()
    third = load(tmp_path / "m", config, index=2, backend=backend)
    assert third.loaded.module is not first.loaded.module  # released, then loaded anew
    third.close()


def test_instances_do_not_share_weights_by_default(tmp_path):
    write(tmp_path, "m", None, torch.jit.script(AddSub()))
    backend = TorchBackend()
    first = load(tmp_path / "m", ADD_SUB, index=0, backend=backend)
    second = load(tmp_path / "m", ADD_SUB, index=1, backend=backend)
    assert first.loaded.module is not second.loaded.module
    first.close()
    second.close()


# --- auto-complete --------------------------------------------------------------------


def complete(model_dir: Path, config: str = "", backend_config: dict | None = None
             ) -> tuple[ModelConfig, list[str]]:
    parsed = parse_config(config)
    filled = TorchBackend(backend_config).auto_complete_config(parsed, model_dir)
    return parsed, filled


def test_auto_complete_fills_an_exported_program(tmp_path):
    write(tmp_path, "m", None, export_mlp(), filename="model.pt2")
    config, filled = complete(tmp_path / "m")
    assert sorted(filled) == ["default_model_filename", "dynamic_batching", "input",
                              "max_batch_size", "output"]
    assert config.default_model_filename == "model.pt2"
    assert config.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert [(t.name, list(t.dims)) for t in config.input] == [("input", [4])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("OUTPUT__0", [3])]


def test_auto_complete_takes_the_backends_default_max_batch_size(tmp_path):
    write(tmp_path, "m", None, export_mlp(), filename="model.pt2")
    config, _ = complete(tmp_path / "m", backend_config={"default-max-batch-size": "16"})
    assert config.max_batch_size == 16


def test_auto_complete_stays_within_the_exported_batch_range(tmp_path):
    write(tmp_path, "m", None, export_mlp(batch_max=2), filename="model.pt2")
    config, _ = complete(tmp_path / "m")
    assert config.max_batch_size == 2


def test_auto_complete_keeps_a_given_max_batch_size(tmp_path):
    write(tmp_path, "m", None, export_mlp(), filename="model.pt2")
    config, filled = complete(tmp_path / "m", "max_batch_size: 32")
    assert config.max_batch_size == 32
    assert "max_batch_size" not in filled and "dynamic_batching" not in filled
    assert [list(t.dims) for t in config.input] == [[4]]


def test_a_static_batch_dimension_is_not_a_batch_dimension(tmp_path):
    program = torch.export.export(mlp(), (torch.zeros(2, 4),))
    write(tmp_path, "m", None, program, filename="model.pt2")
    config, filled = complete(tmp_path / "m")
    assert config.max_batch_size == 0 and "max_batch_size" not in filled
    assert [list(t.dims) for t in config.input] == [[2, 4]]


def test_auto_complete_names_dictionary_outputs_by_key(tmp_path):
    class Pair(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"twice": x * 2, "count": x.sum(dim=1).to(torch.int64)}

    program = torch.export.export(Pair(), (torch.zeros(3, 5),))
    write(tmp_path, "m", None, program, filename="model.pt2")
    config, _ = complete(tmp_path / "m")
    assert [(t.name, DataType.Name(t.data_type), list(t.dims)) for t in config.output] == [
        ("twice", "TYPE_FP32", [3, 5]), ("count", "TYPE_INT64", [3])]


def test_torchscript_is_not_auto_completed(tmp_path):
    write(tmp_path, "m", None, torch.jit.script(AddSub()))
    config, filled = complete(tmp_path / "m")
    assert filled == []
    assert not config.input and not config.output


def test_process_wide_settings_first_model_wins(caplog):
    current = torch.get_num_interop_threads()  # set to what it is: the process is unchanged
    settings = ProcessSettings()
    settings.apply("first", TorchSettings(inter_op_threads=current))
    with caplog.at_level("WARNING", logger="naiad.backend.pytorch"):
        settings.apply("second", TorchSettings(inter_op_threads=current + 1))
    assert torch.get_num_interop_threads() == current
    [record] = caplog.records
    assert "'second' sets INTER_OP_THREAD_COUNT" in record.getMessage()
    assert f"model 'first' already set it to {current}" in record.getMessage()

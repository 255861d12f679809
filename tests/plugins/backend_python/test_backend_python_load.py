"""Loading Triton Python models: imports, ``initialize`` arguments and failures, finalize,
auto-complete, and the plugin's registration."""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys

import numpy as np
import pytest
from backend_python_helpers import (
    ADD_SUB_PY,
    add_sub_request,
    context_for,
    in_process_only,
    instance_info,
    parse_config,
    write_model,
)

from naiad.errors import InferenceServerError, Status
from naiad.plugins import PluginManager
from naiad_backend_python import InProcessInstance, IsolatedInstance, PythonBackend, plugin

RECORD_ARGS_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

STATE = []


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        STATE.append(args["model_instance_name"])

    def execute(self, requests):
        data = np.array([json.dumps(STATE).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]) for _ in requests]

    def finalize(self):
        STATE.append("finalized")
"""


@in_process_only
def test_initialize_gets_tritons_args(load, tmp_path):
    instance = load("recorder", RECORD_ARGS_PY)
    args = instance.model.args
    assert all(isinstance(value, str) for value in args.values())
    assert {k: v for k, v in args.items() if k != "model_config"} == {
        "model_instance_kind": "CPU",
        "model_instance_name": "recorder_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(tmp_path / "recorder"),
        "model_version": "1",
        "model_name": "recorder",
    }
    config = json.loads(args["model_config"])
    assert config["name"] == "recorder"
    assert config["input"][0]["dims"] == [4]  # numbers, not protobuf's int64 strings
    assert config["output"][1]["data_type"] == "TYPE_FP32"
    assert config["max_batch_size"] == 0
    assert "," + '"' in args["model_config"] and ", " not in args["model_config"]  # compact


@in_process_only
def test_instance_kind_names(tmp_path, backend):
    model_dir = write_model(tmp_path, "gpu_model", RECORD_ARGS_PY)
    info = instance_info("gpu_model", kind="KIND_GPU")
    instance = backend.create_instance(context_for(model_dir), info)
    try:
        assert instance.model.args["model_instance_kind"] == "GPU"
    finally:
        instance.close()


@in_process_only
def test_two_models_named_model_py_do_not_share_module_state(load):
    first = load("first", RECORD_ARGS_PY)
    second = load("second", RECORD_ARGS_PY)
    assert first.module is not second.module
    assert first.module.STATE == ["first_0_0"]
    assert second.module.STATE == ["second_0_0"]
    [response] = second.execute([add_sub_request()])
    assert json.loads(response.outputs[0].data[0]) == ["second_0_0"]


@in_process_only
def test_each_instance_imports_its_own_copy(tmp_path, backend):
    model_dir = write_model(tmp_path, "twice", RECORD_ARGS_PY)
    a = backend.create_instance(context_for(model_dir), instance_info("twice", 0))
    b = backend.create_instance(context_for(model_dir), instance_info("twice", 1))
    try:
        assert a.module.STATE == ["twice_0_0"]
        assert b.module.STATE == ["twice_0_1"]
    finally:
        a.close()
        b.close()


@in_process_only
def test_close_calls_finalize_and_forgets_the_module(load):
    instance = load("finalizing", RECORD_ARGS_PY)
    module_name = instance.module.__name__
    assert module_name in sys.modules
    instance.close()
    assert instance.module.STATE[-1] == "finalized"
    assert module_name not in sys.modules
    instance.close()  # a second close is harmless
    assert instance.module.STATE.count("finalized") == 1


def test_failing_finalize_is_logged_not_raised(load, caplog):
    instance = load("bad_finalize", """
        class TritonPythonModel:
            def execute(self, requests):
                return []

            def finalize(self):
                raise RuntimeError("finalize broke")
    """)
    instance.close()
    assert "finalize broke" in caplog.text


def test_sibling_modules_import_as_in_triton(load):
    instance = load("siblings", """
        import numpy as np
        import helper
        import triton_python_backend_utils as pb_utils
        from . import helper as relative_helper
        from pkg.sub import VALUE

        class TritonPythonModel:
            def execute(self, requests):
                value = helper.VALUE + relative_helper.VALUE + VALUE
                return [pb_utils.InferenceResponse([pb_utils.Tensor(
                            "OUTPUT0", np.full(4, value, np.float32))]) for _ in requests]
    """, files={"helper.py": "VALUE = 1\n", "pkg/__init__.py": "", "pkg/sub.py": "VALUE = 10\n"})
    [response] = instance.execute([add_sub_request()])
    np.testing.assert_array_equal(response.outputs[0].data, np.full(4, 12))


def test_models_with_same_named_siblings_each_get_their_own(load):
    model_py = """
        import helper
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([pb_utils.Tensor(
                            "OUTPUT0", np.full(4, helper.VALUE, np.float32))]) for _ in requests]
    """
    one = load("one", model_py, files={"helper.py": "VALUE = 1\n"})
    two = load("two", model_py, files={"helper.py": "VALUE = 2\n"})
    assert one.execute([add_sub_request()])[0].outputs[0].data[0] == 1
    assert two.execute([add_sub_request()])[0].outputs[0].data[0] == 2


@in_process_only
def test_sibling_named_like_a_stdlib_module_loses_as_in_triton(load):
    instance = load("shadow", """
        import json
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def initialize(self, args):
                assert hasattr(json, "dumps"), json

            def execute(self, requests):
                return []
    """, files={"json.py": "BROKEN = True\n"})
    assert instance.model is not None


def test_exception_in_initialize_fails_the_load_naming_the_model(load):
    with pytest.raises(InferenceServerError) as info:
        load("init_fails", """
            class TritonPythonModel:
                def initialize(self, args):
                    raise ValueError("no weights found")
        """)
    message = info.value.message
    assert "model 'init_fails'" in message
    assert "ValueError: no weights found" in message
    assert "model.py(4): initialize" in message
    assert info.value.status is Status.UNAVAILABLE
    assert not [m for m in sys.modules.values()
                if getattr(m, "__file__", None) and "init_fails" in m.__file__]


def test_import_error_fails_the_load_naming_the_model(load):
    with pytest.raises(InferenceServerError) as info:
        load("import_fails", "import no_such_module_for_naiad_tests\n")
    message = info.value.message
    assert "model 'import_fails'" in message
    assert "ModuleNotFoundError: No module named 'no_such_module_for_naiad_tests'" in message


def test_syntax_error_fails_the_load(load):
    with pytest.raises(InferenceServerError, match="SyntaxError"):
        load("syntax", "class TritonPythonModel(:\n")


def test_missing_model_class_or_file(load, tmp_path, backend):
    with pytest.raises(InferenceServerError, match="does not define a class named "
                                                   "TritonPythonModel"):
        load("no_class", "X = 1\n")
    model_dir = write_model(tmp_path, "no_file", ADD_SUB_PY)
    (model_dir / "1" / "model.py").unlink()
    with pytest.raises(InferenceServerError, match="Python model file not found"):
        backend.create_instance(context_for(model_dir), instance_info("no_file"))


def test_default_model_filename_is_honoured(tmp_path, backend):
    model_dir = write_model(tmp_path, "renamed", ADD_SUB_PY)
    (model_dir / "1" / "model.py").rename(model_dir / "1" / "my_model.py")
    config = parse_config(model_dir)
    config.default_model_filename = "my_model.py"
    instance = backend.create_instance(context_for(model_dir, config),
                                               instance_info("renamed"))
    try:
        assert instance.execute([add_sub_request()])[0].error is None
    finally:
        instance.close()


# --- auto-complete ----------------------------------------------------------------------

AUTO_COMPLETE_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.add_output(
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return []
"""


def test_auto_complete_fills_the_config(tmp_path, backend):
    model_dir = write_model(tmp_path, "auto", AUTO_COMPLETE_PY, config='name: "auto"\n'
                            'backend: "python"\n')
    config = parse_config(model_dir)
    filled = backend.auto_complete_config(config, model_dir)
    assert sorted(filled) == ["dynamic_batching", "input", "max_batch_size", "output"]
    assert config.max_batch_size == 8
    assert [(i.name, list(i.dims)) for i in config.input] == [("INPUT0", [4])]
    assert [(o.name, o.data_type) for o in config.output] == [("OUTPUT0", 11)]  # TYPE_FP32
    assert config.HasField("dynamic_batching")
    assert config.name == "auto" and config.backend == "python"


def test_auto_complete_uses_the_newest_version(tmp_path, backend):
    model_dir = write_model(tmp_path, "versions", ADD_SUB_PY, config='backend: "python"')
    write_model(tmp_path, "versions", AUTO_COMPLETE_PY, config='backend: "python"', version=3)
    config = parse_config(model_dir)
    assert "input" in backend.auto_complete_config(config, model_dir)


def test_auto_complete_without_the_method_changes_nothing(tmp_path, backend):
    model_dir = write_model(tmp_path, "plain", ADD_SUB_PY)
    config = parse_config(model_dir)
    before = config.SerializeToString()
    assert backend.auto_complete_config(config, model_dir) == []
    assert config.SerializeToString() == before
    assert backend.auto_complete_config(config, tmp_path / "missing") == []


def test_auto_complete_keeps_a_matching_config_and_adds_nothing(tmp_path, backend):
    config_text = """
        name: "matching"
        backend: "python"
        max_batch_size: 8
        dynamic_batching {}
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
    """
    model_dir = write_model(tmp_path, "matching", AUTO_COMPLETE_PY, config=config_text)
    config = parse_config(model_dir)
    assert backend.auto_complete_config(config, model_dir) == []


@pytest.mark.parametrize(("call", "message"), [
    ('c.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4], "bogus": 1})',
     "input 'INPUT0' in auto-complete-config function for model 'bad' contains property "
     "other than 'name', 'data_type', 'dims' and 'optional'."),
    ('c.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4], "optional": 1})',
     "contains property other than 'name', 'data_type' and 'dims'."),
    ('c.add_input({"data_type": "TYPE_FP32", "dims": [4]})', "is missing 'name' property."),
    ('c.add_input({"name": "INPUT0", "dims": [4]})', "is missing 'data_type' property."),
    ('c.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32"})',
     "output 'OUTPUT0' in auto-complete-config function for model 'bad' is missing 'dims' "
     "property."),
    ('c.add_input({"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [4]})',
     "unable to load model 'bad', configuration expects datatype TYPE_FP32 for input "
     "'INPUT0', model provides TYPE_INT32"),
    ('c.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [5]})',
     "model 'bad', tensor 'INPUT0': the model expects dims [5] but the model configuration "
     "specifies dims [4]"),
    ("c.set_max_batch_size(2)",
     "configuration specified max_batch_size 4, but in auto-complete-config function for "
     "model 'bad' specified max_batch_size 2"),
    ('c.set_model_transaction_policy({"decoupled": True, "x": 1})',
     "contains property other than 'decoupled'."),
])
def test_auto_complete_checks_as_triton_does(tmp_path, call, message, backend):
    config_text = """
        name: "bad"
        backend: "python"
        max_batch_size: 4
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
    """
    model_py = f"""
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(c):
        {call}
        return c
"""
    model_dir = write_model(tmp_path, "bad", model_py, config=config_text)
    # In-process the model's ValueError propagates; from a worker it arrives described.
    with pytest.raises((ValueError, InferenceServerError)) as info:
        backend.auto_complete_config(parse_config(model_dir), model_dir)
    assert message in str(info.value)


def test_auto_complete_must_return_the_config(tmp_path, backend):
    model_py = """
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(c):
                c.set_max_batch_size(4)
    """
    model_dir = write_model(tmp_path, "forgot", model_py, config='name: "forgot"')
    with pytest.raises(InferenceServerError, match=re.escape(
            "auto_complete_config function in model 'forgot' must return a valid "
            "pb.ModelConfig object.")):
        backend.auto_complete_config(parse_config(model_dir), model_dir)


def test_auto_complete_result_must_be_a_valid_config(tmp_path, backend):
    model_py = """
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(c):
                c.add_input({"name": "X", "data_type": "NOT_A_TYPE", "dims": [1]})
                return c
    """
    model_dir = write_model(tmp_path, "invalid", model_py, config='name: "invalid"')
    with pytest.raises(InferenceServerError, match="not valid") as info:
        backend.auto_complete_config(parse_config(model_dir), model_dir)
    assert info.value.status is Status.INVALID_ARG


def test_transaction_policy_and_model_dir_in_auto_complete(tmp_path, backend):
    model_py = """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(c):
                assert pb_utils.get_model_dir().endswith("policy/1"), pb_utils.get_model_dir()
                c.set_model_transaction_policy({"decoupled": False})
                return c
    """
    model_dir = write_model(tmp_path, "policy", model_py, config='name: "policy"')
    config = parse_config(model_dir)
    assert backend.auto_complete_config(config, model_dir) == [
        "model_transaction_policy"]
    assert config.HasField("model_transaction_policy")


# --- registration -----------------------------------------------------------------------


def test_hook_claims_only_python():
    backend = plugin.naiad_backend(name="python", backend_config={"k": "v"})
    assert isinstance(backend, PythonBackend)
    assert backend.name == "python"
    assert backend.default_model_filename == "model.py"
    assert backend.backend_config == {"k": "v"}
    assert plugin.naiad_backend(name="onnxruntime", backend_config={}) is None


def test_entry_point_is_found_by_the_plugin_manager():
    [entry_point] = importlib.metadata.entry_points(group="naiad.backends", name="python")
    assert entry_point.value == "naiad_backend_python.plugin"
    backend = PluginManager().backend("python", {})
    assert isinstance(backend, PythonBackend)


def test_instance_is_a_model_instance(load):
    from naiad.types import ModelInstance

    instance = load("kind", ADD_SUB_PY)
    assert isinstance(instance, ModelInstance)
    assert isinstance(instance, (InProcessInstance, IsolatedInstance))


def test_parallel_loads_keep_siblings_apart(tmp_path, backend):
    """The core creates instances in parallel threads; imports must not mix models up."""
    from concurrent.futures import ThreadPoolExecutor

    model_py = """
        import helper
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([pb_utils.Tensor(
                            "OUTPUT0", np.full(4, helper.VALUE, np.float32))]) for _ in requests]
    """
    dirs = [write_model(tmp_path, f"par{i}", model_py, files={"helper.py": f"VALUE = {i}\n"})
            for i in range(6)]
    with ThreadPoolExecutor(6) as pool:
        instances = list(pool.map(
            lambda d: backend.create_instance(context_for(d), instance_info(d.name)), dirs))
    try:
        for i, instance in enumerate(instances):
            assert instance.execute([add_sub_request()])[0].outputs[0].data[0] == i
    finally:
        for instance in instances:
            instance.close()

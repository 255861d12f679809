"""Running Triton Python models through ``PythonModelInstance.execute``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from backend_python_helpers import (
    ADD_SUB_PY,
    add_sub_request,
    context_for,
    in_process_only,
    instance_info,
    request,
    write_model,
)

from naiad.errors import InferenceServerError, Status

EXAMPLE_ADD_SUB = Path(__file__).parents[3] / "examples" / "model_repository" / "add_sub"


def outputs(response):
    assert response.error is None, response.error
    return {t.name: t for t in response.outputs}


def test_add_sub(load):
    instance = load("add_sub", ADD_SUB_PY)
    [response] = instance.execute([add_sub_request()])
    out = outputs(response)
    assert out["OUTPUT0"].datatype == "FP32"
    assert out["OUTPUT0"].shape == (4,)
    np.testing.assert_array_equal(out["OUTPUT0"].data, [5, 5, 5, 5])
    np.testing.assert_array_equal(out["OUTPUT1"].data, [-3, -1, 1, 3])


def test_example_add_sub_model_runs(tmp_path, backend):
    """The example the quick start serves: use it if present, else the same model here."""
    if (EXAMPLE_ADD_SUB / "1" / "model.py").is_file():
        model_dir = EXAMPLE_ADD_SUB
    else:
        model_dir = write_model(tmp_path, "add_sub", ADD_SUB_PY)
    instance = backend.create_instance(context_for(model_dir), instance_info("add_sub"))
    try:
        [response] = instance.execute([add_sub_request()])
        out = outputs(response)
        np.testing.assert_array_equal(out["OUTPUT0"].data, [5, 5, 5, 5])
        np.testing.assert_array_equal(out["OUTPUT1"].data, [-3, -1, 1, 3])
        assert out["OUTPUT0"].data.dtype == np.float32
    finally:
        instance.close()


@in_process_only
def test_one_execute_call_for_the_whole_batch(load):
    instance = load("batch", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            calls = []

            def execute(self, requests):
                self.calls.append(len(requests))
                responses = []
                for i, r in enumerate(requests):
                    x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    out = pb_utils.Tensor("OUTPUT0", x * i)
                    responses.append(pb_utils.InferenceResponse([out]))
                return responses
    """)
    responses = instance.execute([add_sub_request(model="batch") for _ in range(3)])
    assert instance.model.calls == [3]
    for i, response in enumerate(responses):
        np.testing.assert_array_equal(outputs(response)["OUTPUT0"].data, np.arange(1, 5) * i)


@in_process_only
def test_inputs_and_outputs_are_not_copied(load):
    instance = load("echo", """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([pb_utils.Tensor(
                            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                        for r in requests]
    """)
    req = add_sub_request(model="echo")
    [response] = instance.execute([req])
    assert outputs(response)["OUTPUT0"].data is req.inputs["INPUT0"].data


def test_only_requested_outputs_are_returned(load):
    instance = load("add_sub", ADD_SUB_PY)
    [response] = instance.execute([add_sub_request(outputs=["OUTPUT1"])])
    assert list(outputs(response)) == ["OUTPUT1"]


def test_outputs_outside_the_config_are_pruned_as_triton_does(load):
    instance = load("extra", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([
                            pb_utils.Tensor("OUTPUT0", np.zeros(4, np.float32)),
                            pb_utils.Tensor("EXTRA", np.zeros(2, np.int64))]) for r in requests]
    """)
    [response] = instance.execute([add_sub_request(model="extra")])
    assert list(outputs(response)) == ["OUTPUT0"]


def test_output_datatypes_follow_numpy(load):
    instance = load("types", """
        import ml_dtypes
        import numpy as np
        import triton_python_backend_utils as pb_utils

        DTYPES = [np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16,
                  np.int32, np.int64, np.float16, np.float32, np.float64, ml_dtypes.bfloat16]

        class TritonPythonModel:
            def execute(self, requests):
                tensors = [pb_utils.Tensor(f"T{i}", np.zeros((2, 3), d))
                           for i, d in enumerate(DTYPES)]
                return [pb_utils.InferenceResponse(tensors) for r in requests]
    """, config='name: "types" backend: "python"')
    [response] = instance.execute([add_sub_request(model="types")])
    got = [(t.datatype, t.shape) for t in response.outputs]
    assert got == [(d, (2, 3)) for d in ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8",
                                          "INT16", "INT32", "INT64", "FP16", "FP32", "FP64",
                                          "BF16")]


BYTES_CONFIG = """
name: "{name}"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ -1 ] }
]
"""


def test_bytes_model(load):
    instance = load("strings", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                responses = []
                for request in requests:
                    in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
                    assert in0.triton_dtype() == 13
                    values = in0.as_numpy()
                    assert values.dtype == np.object_
                    out = np.array([v.upper() for v in values], dtype=np.object_)
                    responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
                return responses
    """, config=BYTES_CONFIG)
    data = np.array([b"ab", b"", b"\x00c"], dtype=object)
    [response] = instance.execute([request("strings", {"INPUT0": data})])
    out = outputs(response)["OUTPUT0"]
    assert out.datatype == "BYTES"
    assert out.data.dtype == np.object_
    assert list(out.data) == [b"AB", b"", b"\x00C"]


def test_bytes_outputs_become_object_arrays_of_bytes(load):
    instance = load("strs", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUTPUT0", np.array(["é", 7, b"raw"], dtype=np.object_)),
                    pb_utils.Tensor("OUTPUT1", np.array([b"ab", b"c"], dtype=np.bytes_))])
                    for r in requests]
    """, config=BYTES_CONFIG)
    [response] = instance.execute([request("strs", {"INPUT0": np.array([b"x"], dtype=object)})])
    out = outputs(response)
    assert list(out["OUTPUT0"].data) == ["é".encode(), b"7", b"raw"]
    assert [type(v) for v in out["OUTPUT1"].data] == [bytes, bytes]
    assert out["OUTPUT1"].datatype == "BYTES"


def test_error_response_keeps_the_message_and_default_internal_code(load):
    instance = load("error_response", """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse(
                            output_tensors=[], error=pb_utils.TritonError("deliberate error"))
                        for _ in requests]
    """)
    [response] = instance.execute([add_sub_request(model="error_response")])
    assert response.outputs == []
    assert response.error.message == "deliberate error"
    # tritonserver 2.51 answers a TritonError without a code with 500 (INTERNAL)
    assert response.error.status is Status.INTERNAL


@pytest.mark.parametrize(("code", "status"), [
    ("INVALID_ARG", Status.INVALID_ARG),
    ("NOT_FOUND", Status.NOT_FOUND),
    ("UNAVAILABLE", Status.UNAVAILABLE),
    ("UNSUPPORTED", Status.UNSUPPORTED),
    ("ALREADY_EXISTS", Status.ALREADY_EXISTS),
    ("CANCELLED", Status.CANCELLED),
    ("INTERNAL", Status.INTERNAL),
    ("UNKNOWN", Status.UNKNOWN),  # Triton: gRPC UNKNOWN (L0_backend_python lifecycle)
])
def test_error_codes_map_to_statuses(load, code, status):
    instance = load(f"coded_{code.lower()}", f"""
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse(error=pb_utils.TritonError(
                            "coded", pb_utils.TritonError.{code})) for _ in requests]
    """)
    [response] = instance.execute([add_sub_request()])
    assert response.error.status is status
    assert response.error.message == "coded"


def test_only_the_failing_request_of_a_batch_gets_the_error(load):
    instance = load("mixed", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                out = []
                for r in requests:
                    if r.request_id() == "bad":
                        out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                            "bad request", pb_utils.TritonError.INVALID_ARG)))
                    else:
                        out.append(pb_utils.InferenceResponse(
                            [pb_utils.Tensor("OUTPUT0", np.ones(4, np.float32))]))
                return out
    """)
    good, bad = instance.execute([add_sub_request(id="good"), add_sub_request(id="bad")])
    assert good.error is None and good.outputs[0].name == "OUTPUT0"
    assert bad.error.status is Status.INVALID_ARG


RAISES_PY = """
class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("deliberate failure in execute")
"""


def test_exception_in_execute_fails_every_request_of_the_batch(load):
    instance = load("raises", RAISES_PY)
    # The whole batch fails: the backend raises, the core answers every request with it.
    with pytest.raises(InferenceServerError) as info:
        instance.execute([add_sub_request(model="raises") for _ in range(3)])
    error = info.value
    assert error.status is Status.INVALID_ARG  # Triton: INTERNAL (docs/compatibility.md)
    assert error.message.startswith(
        "Failed to process the request(s) for model 'raises_0_0', message: "
        "RuntimeError: deliberate failure in execute")
    assert "model.py(4): execute" in error.message  # the model's frame, as Triton shows


def test_raising_a_triton_error_uses_its_code(load):
    instance = load("raises_coded", """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                raise pb_utils.TritonError("no such thing", pb_utils.TritonError.NOT_FOUND)
    """)
    with pytest.raises(InferenceServerError) as info:
        instance.execute([add_sub_request()])
    assert info.value.status is Status.NOT_FOUND
    assert "no such thing" in info.value.message


def test_wrong_number_of_responses(load):
    instance = load("too_few", """
        class TritonPythonModel:
            def execute(self, requests):
                return []
    """)
    with pytest.raises(InferenceServerError) as info:
        instance.execute([add_sub_request(), add_sub_request()])
    assert info.value.status is Status.INTERNAL
    assert ("Number of InferenceResponse objects do not match the number of "
            "InferenceRequest objects. InferenceRequest(s) size is:2, and "
            "InferenceResponse(s) size is:0") in info.value.message
    assert "model 'too_few_0_0'" in info.value.message


@pytest.mark.parametrize(("body", "expected"), [
    ("return tuple()", "Expected a list in the execute return, found type '<class 'tuple'>'."),
    ("return [3]", "Expected an 'InferenceResponse' object in the execute function return "
                   "list, found type '<class 'int'>'."),
    ("return [pb_utils.InferenceResponse(['x'])]", "Expected a 'Tensor' object"),
])
def test_malformed_returns_fail_the_batch(load, body, expected):
    instance = load("malformed", f"""
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                {body}
    """)
    with pytest.raises(InferenceServerError) as info:
        instance.execute([add_sub_request()])
    assert expected in info.value.message
    assert info.value.status is Status.INTERNAL


def test_a_request_execute_returned_none_for_and_never_answered_gets_an_error(load):
    """``return [None]`` is Triton's way to answer through the response sender later; a
    request the model then lets go of unanswered fails instead of waiting forever (in a
    worker), or fails the batch as before (in-process, where nothing can come later)."""
    instance = load("unanswered", """
        class TritonPythonModel:
            def execute(self, requests):
                return [None for _ in requests]
    """)
    try:
        [response] = instance.execute([add_sub_request(id="r1")])
    except InferenceServerError as exc:  # in-process
        assert "found type '<class 'NoneType'>'" in exc.message
        assert "in-process" in exc.message
        return
    assert response.error is not None and response.error.status is Status.INTERNAL
    assert "let go of it without sending its response" in response.error.message
    assert "'unanswered'" in response.error.message and "'r1'" in response.error.message


def test_model_without_execute(load):
    instance = load("no_execute", "class TritonPythonModel:\n    pass\n")
    with pytest.raises(InferenceServerError) as info:
        instance.execute([add_sub_request()])
    assert "does not implement `execute` method." in info.value.message


def test_request_accessors(load):
    instance = load("inspect", """
        import json
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                out = []
                for r in requests:
                    seen = {
                        "id": r.request_id(),
                        "correlation_id": r.correlation_id(),
                        "flags": r.flags(),
                        "parameters": r.parameters(),
                        "timeout": r.timeout(),
                        "requested": sorted(r.requested_output_names()),
                        "inputs": [t.name() for t in r.inputs()],
                        "shape": pb_utils.get_input_tensor_by_name(r, "INPUT0").shape(),
                        "missing": pb_utils.get_input_tensor_by_name(r, "NOPE"),
                        "cancelled": r.is_cancelled(),
                    }
                    data = np.array([json.dumps(seen).encode()], dtype=np.object_)
                    out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
                return out
    """)
    plain, sequence = instance.execute([
        add_sub_request(id="r1"),
        add_sub_request(id="r2", outputs=["OUTPUT1"], parameters={
            "sequence_id": 42, "sequence_start": True, "sequence_end": True, "priority": 1,
            "timeout": 1000, "binary_data_output": True, "custom": "v", "n": 3}),
    ])
    plain_seen = json.loads(plain.outputs[0].data[0])
    assert plain_seen == {
        "id": "r1", "correlation_id": 0, "flags": 0, "parameters": "{}", "timeout": 0,
        "requested": ["OUTPUT0", "OUTPUT1"], "inputs": ["INPUT0", "INPUT1"], "shape": [4],
        "missing": None, "cancelled": False}
    assert sequence.outputs == []  # it asked for OUTPUT1 only, which the model did not make
    [again] = instance.execute([add_sub_request(id="r2", outputs=["OUTPUT0"], parameters={
        "sequence_id": "abc", "sequence_start": True, "custom": "v", "n": 3, "timeout": 5})])
    seen = json.loads(again.outputs[0].data[0])
    assert seen["correlation_id"] == "abc"
    assert seen["flags"] == 1
    assert seen["timeout"] == 5
    assert json.loads(seen["parameters"]) == {"custom": "v", "n": 3}
    assert seen["requested"] == ["OUTPUT0"]


def test_response_sender_in_non_decoupled_mode(load):
    instance = load("sender", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                for r in requests:
                    out = pb_utils.Tensor("OUTPUT0", np.ones(4, np.float32))
                    r.get_response_sender().send(
                        pb_utils.InferenceResponse([out]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return None
    """)
    [response] = instance.execute([add_sub_request()])
    np.testing.assert_array_equal(outputs(response)["OUTPUT0"].data, np.ones(4))


def test_response_parameters_pass_through(load):
    instance = load("params", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse(
                            [pb_utils.Tensor("OUTPUT0", np.ones(4, np.float32))],
                            parameters={"a": 1, "b": "x", "c": True}) for r in requests]
    """)
    [response] = instance.execute([add_sub_request()])
    assert response.parameters == {"a": 1, "b": "x", "c": True}


def test_async_execute(load):
    instance = load("async_model", """
        import asyncio
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            async def execute(self, requests):
                await asyncio.sleep(0)
                out = pb_utils.Tensor("OUTPUT0", np.ones(4, np.float32))
                return [pb_utils.InferenceResponse([out]) for r in requests]
    """)
    for _ in range(2):
        [response] = instance.execute([add_sub_request()])
        assert outputs(response)["OUTPUT0"].data.sum() == 4


def test_get_model_dir_and_logger(load, caplog, tmp_path):
    instance = load("logs", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                pb_utils.Logger.log_info("model dir " + pb_utils.get_model_dir())
                pb_utils.Logger.log("at warning", pb_utils.Logger.WARNING)
                out = pb_utils.Tensor("OUTPUT0", np.ones(4, np.float32))
                return [pb_utils.InferenceResponse([out]) for r in requests]
    """)
    with caplog.at_level("INFO", logger="naiad.model"):
        instance.execute([add_sub_request()])
    messages = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    version_dir = str(tmp_path / "logs" / "1")
    assert ("naiad.model", "INFO", f"model dir {version_dir}") in messages
    assert ("naiad.model", "WARNING", "at warning") in messages
    assert all(r.filename == "model.py" for r in caplog.records if r.name == "naiad.model")


def test_an_input_the_model_keeps_is_not_overwritten_by_the_next_batch(load):
    """A worker reads inputs as views of shared memory that the next batch reuses: a model
    that keeps one past execute must still see what it was given."""
    instance = load("keeper", """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def initialize(self, args):
                self.kept = []

            def execute(self, requests):
                for r in requests:
                    self.kept.append(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())
                first = np.asarray(self.kept[0], np.float32)
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", first)])
                        for r in requests]
    """)
    for value in (1, 2, 3):
        [response] = instance.execute([request("keeper", {
            "INPUT0": np.full(4, value, np.float32), "INPUT1": np.zeros(4, np.float32)})])
        np.testing.assert_array_equal(outputs(response)["OUTPUT0"].data, [1, 1, 1, 1])

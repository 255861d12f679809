"""Unit tests of naiad.scheduling.ensemble_plan: the load-time checks of an ensemble's steps.

``build_plan`` sees only the ensemble's own config (the graph of tensors); ``check_steps``
also sees the signatures of the models the steps call, through a lookup.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import tritonclient.grpc.model_config_pb2 as mc
from expect import rejected
from google.protobuf import text_format

from naiad.errors import Status, not_found
from naiad.models.signature import ModelSignature
from naiad.scheduling.ensemble_plan import EnsemblePlan, build_plan, check_steps


def _tensors(spec: str, dims: str = "4") -> str:
    """``"NAME:TYPE NAME:TYPE"`` -> config tensors of those names and types and ``dims``."""
    return ", ".join(f'{{ name: "{n}", data_type: TYPE_{t}, dims: [ {dims} ] }}'
                     for n, t in (item.split(":") for item in spec.split()))


def ensemble(inputs: str, outputs: str, steps: str, name: str = "ens",
             max_batch_size: int = 0) -> mc.ModelConfig:
    """An ensemble config; ``inputs``/``outputs`` are ``NAME:TYPE`` lists (dims [4])."""
    text = f"""
        name: "{name}"
        platform: "ensemble"
        max_batch_size: {max_batch_size}
        input [ {_tensors(inputs)} ]
        output [ {_tensors(outputs)} ]
        ensemble_scheduling {{ step [ {steps} ] }}
    """
    return text_format.Parse(text, mc.ModelConfig())


def step(model: str, reads: dict[str, str], writes: dict[str, str]) -> str:
    """One step: ``reads`` maps model input -> ensemble tensor, ``writes`` model output ->
    ensemble tensor."""
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in reads.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in writes.items()]
    return f'{{ model_name: "{model}" model_version: -1 {" ".join(maps)} }}'


def steps(*parts: str) -> str:
    return ", ".join(parts)


def model(name: str, inputs: str, outputs: str, dims: str = "4",
          max_batch_size: int = 0) -> ModelSignature:
    """The signature of a composing model; ``inputs``/``outputs`` are ``NAME:TYPE`` lists,
    every tensor with ``dims``."""
    text = f"""
        name: "{name}"
        backend: "python"
        max_batch_size: {max_batch_size}
        input [ {_tensors(inputs, dims)} ]
        output [ {_tensors(outputs, dims)} ]
    """
    return ModelSignature(name, text_format.Parse(text, mc.ModelConfig()))


def lookup_of(*signatures: ModelSignature):
    """A lookup serving exactly these models, as the model manager would."""
    served = {s.name: s for s in signatures}

    def lookup(name: str, version: str) -> ModelSignature:
        assert version == ""  # every step here asks for the latest version
        if name not in served:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        return served[name]
    return lookup


def unavailable(call, *fragments: str) -> str:
    return rejected(call, *fragments, status=Status.UNAVAILABLE)


# add_sub -> mul, the example pipeline
PIPELINE = ensemble(
    "INPUT0:FP32 INPUT1:FP32", "OUTPUT:FP32",
    steps(step("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"},
               {"OUTPUT0": "sum", "OUTPUT1": "difference"}),
          step("mul", {"A": "sum", "B": "difference"}, {"PRODUCT": "OUTPUT"})),
    name="pipeline")
ADD_SUB = model("add_sub", "INPUT0:FP32 INPUT1:FP32", "OUTPUT0:FP32 OUTPUT1:FP32")
MUL = model("mul", "A:FP32 B:FP32", "PRODUCT:FP32")


def order(plan: EnsemblePlan) -> list[int]:
    return [s.index for s in plan.steps]


# --- build_plan: the graph -------------------------------------------------------------


def test_a_chain_keeps_its_order_and_maps():
    plan = build_plan(PIPELINE)
    assert plan.name == "pipeline"
    assert order(plan) == [0, 1]
    first, second = plan.steps
    assert (first.model_name, first.model_version, first.after) == ("add_sub", "", ())
    assert first.inputs == (("INPUT0", "INPUT0"), ("INPUT1", "INPUT1"))
    assert first.outputs == (("OUTPUT0", "sum"), ("OUTPUT1", "difference"))
    assert (second.model_name, second.after) == ("mul", (0,))
    assert plan.output_producers == {"OUTPUT": 1}
    assert first.describe() == "step 0 (model 'add_sub')"


def test_steps_listed_backwards_run_producers_first():
    config = ensemble(
        "X:FP32", "Z:FP32",
        steps(step("last", {"IN": "y"}, {"OUT": "Z"}),
              step("middle", {"IN": "x"}, {"OUT": "y"}),
              step("first", {"IN": "X"}, {"OUT": "x"})))
    plan = build_plan(config)
    assert order(plan) == [2, 1, 0]
    assert {s.index: s.after for s in plan.steps} == {2: (), 1: (2,), 0: (1,)}
    assert plan.output_producers == {"Z": 0}


def test_a_pinned_model_version_is_kept():
    config = ensemble("X:FP32", "Y:FP32", step("m", {"IN": "X"}, {"OUT": "Y"}))
    config.ensemble_scheduling.step[0].model_version = 3
    assert build_plan(config).steps[0].model_version == "3"


def test_diamond_waits_for_both_branches():
    config = ensemble(
        "X:FP32", "OUT:FP32 LEFT:FP32",
        steps(step("split", {"IN": "X"}, {"A": "a", "B": "b"}),
              step("left", {"IN": "a"}, {"OUT": "LEFT"}),
              step("right", {"IN": "b"}, {"OUT": "r"}),
              step("join", {"A": "LEFT", "B": "r"}, {"OUT": "OUT"})))
    plan = build_plan(config)
    assert order(plan) == [0, 1, 2, 3]
    assert {s.index: s.after for s in plan.steps} == {0: (), 1: (0,), 2: (0,), 3: (1, 2)}
    # an intermediate tensor can also be an ensemble output
    assert plan.output_producers == {"OUT": 3, "LEFT": 1}


def test_independent_steps_read_only_ensemble_inputs():
    config = ensemble(
        "X:FP32", "A:FP32 B:FP32",
        steps(step("a", {"IN": "X"}, {"OUT": "A"}), step("b", {"IN": "X"}, {"OUT": "B"})))
    plan = build_plan(config)
    assert [s.after for s in plan.steps] == [(), ()]


def test_a_cycle_names_its_steps():
    config = ensemble(
        "X:FP32", "Y:FP32",
        steps(step("head", {"IN": "X", "BACK": "b"}, {"OUT": "a"}),
              step("ping", {"IN": "a"}, {"OUT": "p"}),
              step("pong", {"IN": "p"}, {"OUT": "b", "COPY": "Y"})))
    unavailable(lambda: build_plan(config), "ensemble 'ens'", "steps 0, 1, 2",
                "cycle")


def test_a_step_reading_its_own_output_is_a_cycle():
    config = ensemble("X:FP32", "Y:FP32",
                      step("loop", {"IN": "X", "STATE": "Y"}, {"OUT": "Y"}))
    unavailable(lambda: build_plan(config), "ensemble 'ens'", "steps 0 ", "cycle")


def test_reading_a_tensor_nobody_produces():
    config = ensemble(
        "X:FP32", "Y:FP32",
        steps(step("first", {"IN": "X"}, {"OUT": "x"}),
              step("second", {"IN": "x", "EXTRA": "ghost"}, {"OUT": "Y"})))
    unavailable(lambda: build_plan(config), "ensemble 'ens'", "step 1 (model 'second')",
                "'ghost'", "'EXTRA'", "no step produces it")


def test_a_tensor_produced_twice():
    config = ensemble(
        "X:FP32", "Y:FP32",
        steps(step("a", {"IN": "X"}, {"OUT": "Y"}), step("b", {"IN": "X"}, {"OUT": "Y"})))
    unavailable(lambda: build_plan(config), "ensemble 'ens'", "tensor 'Y'",
                "step 0 and step 1")


def test_an_output_written_onto_an_ensemble_input():
    config = ensemble(
        "X:FP32 W:FP32", "Y:FP32",
        steps(step("a", {"IN": "X", "IN2": "W"}, {"OUT": "Y", "OTHER": "W"})))
    unavailable(lambda: build_plan(config), "ensemble 'ens'", "step 0 (model 'a')",
                "'OTHER'", "'W'", "input of the ensemble")


def test_an_ensemble_output_nobody_produces():
    config = ensemble("X:FP32", "Y:FP32 MISSING:FP32",
                      step("a", {"IN": "X"}, {"OUT": "Y"}))
    unavailable(lambda: build_plan(config), "ensemble 'ens'", "ensemble output 'MISSING'")


def test_an_ensemble_output_that_is_an_ensemble_input():
    # passing an input straight through is not a step producing it
    config = ensemble("X:FP32", "Y:FP32 X:FP32",
                      step("a", {"IN": "X"}, {"OUT": "Y"}))
    unavailable(lambda: build_plan(config), "ensemble 'ens'", "ensemble output 'X'")


def test_an_unused_ensemble_input():
    config = ensemble("X:FP32 UNUSED:FP32 IDLE:FP32", "Y:FP32",
                      step("a", {"IN": "X"}, {"OUT": "Y"}))
    unavailable(lambda: build_plan(config), "ensemble 'ens'", "'IDLE', 'UNUSED'",
                "not read by any step")


# --- check_steps: the graph against the models that serve it -----------------------------


def test_matching_models_pass():
    check_steps(build_plan(PIPELINE), PIPELINE, lookup_of(ADD_SUB, MUL))


def test_a_step_may_leave_model_outputs_unmapped():
    config = ensemble("INPUT0:FP32 INPUT1:FP32", "SUM:FP32",
                      step("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"},
                           {"OUTPUT0": "SUM"}))
    check_steps(build_plan(config), config, lookup_of(ADD_SUB))


def test_a_step_whose_model_is_not_served():
    message = unavailable(lambda: check_steps(build_plan(PIPELINE), PIPELINE,
                                              lookup_of(ADD_SUB)),
                          "ensemble 'pipeline'", "step 1 (model 'mul')", "cannot be served")
    assert "'mul' is not found" in message  # the lookup's own reason is kept


def test_an_unknown_model_input_name():
    config = ensemble("INPUT0:FP32 INPUT1:FP32", "OUTPUT:FP32", steps(
        step("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"},
             {"OUTPUT0": "sum", "OUTPUT1": "difference"}),
        step("mul", {"A": "sum", "NOT_B": "difference"}, {"PRODUCT": "OUTPUT"})))
    unavailable(lambda: check_steps(build_plan(config), config, lookup_of(ADD_SUB, MUL)),
                "ensemble 'ens'", "step 1 (model 'mul')", "'difference'", "'NOT_B'",
                "does not have", "'A', 'B'")


def test_an_unknown_model_output_name():
    config = ensemble("INPUT0:FP32 INPUT1:FP32", "OUTPUT:FP32", steps(
        step("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"},
             {"OUTPUT0": "sum", "OUTPUT9": "difference"}),
        step("mul", {"A": "sum", "B": "difference"}, {"PRODUCT": "OUTPUT"})))
    unavailable(lambda: check_steps(build_plan(config), config, lookup_of(ADD_SUB, MUL)),
                "ensemble 'ens'", "step 0 (model 'add_sub')", "'OUTPUT9'", "does not have",
                "'OUTPUT0', 'OUTPUT1'")


def test_a_datatype_mismatch_on_an_ensemble_input():
    config = ensemble("INPUT0:INT32 INPUT1:FP32", "OUTPUT:FP32", steps(
        step("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"},
             {"OUTPUT0": "sum", "OUTPUT1": "difference"}),
        step("mul", {"A": "sum", "B": "difference"}, {"PRODUCT": "OUTPUT"})))
    unavailable(lambda: check_steps(build_plan(config), config, lookup_of(ADD_SUB, MUL)),
                "ensemble 'ens'", "step 0 (model 'add_sub')", "'INPUT0'", "FP32",
                "INT32")


def test_a_datatype_mismatch_between_steps():
    int_mul = model("mul", "A:INT64 B:FP32", "PRODUCT:FP32")
    unavailable(lambda: check_steps(build_plan(PIPELINE), PIPELINE,
                                    lookup_of(ADD_SUB, int_mul)),
                "ensemble 'pipeline'", "step 1 (model 'mul')", "input 'A' is INT64",
                "'sum'", "FP32")


def test_a_datatype_mismatch_on_an_ensemble_output():
    fp64_mul = model("mul", "A:FP32 B:FP32", "PRODUCT:FP64")
    unavailable(lambda: check_steps(build_plan(PIPELINE), PIPELINE,
                                    lookup_of(ADD_SUB, fp64_mul)),
                "ensemble 'pipeline'", "ensemble output 'OUTPUT' is FP32", "step 1",
                "model 'mul'", "FP64")


@pytest.mark.parametrize("missing", ["add_sub", "mul"])
def test_every_step_is_looked_up(missing):
    served = [s for s in (ADD_SUB, MUL) if s.name != missing]
    unavailable(lambda: check_steps(build_plan(PIPELINE), PIPELINE, lookup_of(*served)),
                f"(model '{missing}') cannot be served")


def test_a_cycle_names_only_the_steps_on_it():
    # 0 <-> 1 wait on each other; 2 only reads from the cycle, so it is not on it.
    config = ensemble("X:FP32", "Z:FP32", steps(
        step("a", {"IN": "X", "IN2": "B"}, {"OUT": "A"}),
        step("b", {"IN": "A"}, {"OUT": "B"}),
        step("c", {"IN": "A"}, {"OUT": "Z"})))
    message = unavailable(lambda: build_plan(config), "steps 0, 1 wait on each other")
    assert "2" not in message.split("wait on")[0].split("steps")[1]


def test_a_batching_ensemble_needs_batching_steps():
    config = ensemble("INPUT0:FP32 INPUT1:FP32", "OUTPUT:FP32", steps(
        step("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"},
             {"OUTPUT0": "sum", "OUTPUT1": "difference"}),
        step("mul", {"A": "sum", "B": "difference"}, {"PRODUCT": "OUTPUT"})),
        max_batch_size=8)
    unavailable(lambda: check_steps(build_plan(config), config, lookup_of(ADD_SUB, MUL)),
                "ensemble 'ens'", "batches of up to 8", "step 0 (model 'add_sub')",
                "allows 0")


# --- shapes along the edges ------------------------------------------------------------------


def test_a_shape_mismatch_between_steps_names_both_ends():
    narrow_mul = model("mul", "A:FP32 B:FP32", "PRODUCT:FP32", "3")
    unavailable(lambda: check_steps(build_plan(PIPELINE), PIPELINE,
                                    lookup_of(ADD_SUB, narrow_mul)),
                "ensemble 'pipeline'", "tensor 'sum'", "inconsistent shape",
                "[4] from step 0 (model 'add_sub'), output 'OUTPUT0'",
                "[3] for step 1 (model 'mul'), input 'A'")


def test_a_variable_dimension_matches_any_size():
    any_mul = model("mul", "A:FP32 B:FP32", "PRODUCT:FP32", "-1")
    check_steps(build_plan(PIPELINE), PIPELINE, lookup_of(ADD_SUB, any_mul))


def test_a_batching_step_needs_the_batch_dimension_from_a_non_batching_ensemble():
    # The ensemble hands add_sub [4]; a batching add_sub reads [-1,4] (batch first).
    batching_add_sub = model("add_sub", "INPUT0:FP32 INPUT1:FP32",
                                    "OUTPUT0:FP32 OUTPUT1:FP32", "4", max_batch_size=8)
    unavailable(lambda: check_steps(build_plan(PIPELINE), PIPELINE,
                                    lookup_of(batching_add_sub, MUL)),
                "tensor 'INPUT0'", "[4] from ensemble 'pipeline'",
                "[-1,4] for step 0 (model 'add_sub'), input 'INPUT0'")


def test_a_shape_mismatch_on_an_ensemble_output():
    wide_mul = model("mul", "A:FP32 B:FP32", "PRODUCT:FP32", "4")
    wide_mul.outputs["PRODUCT"] = replace(wide_mul.outputs["PRODUCT"], dims=(8,))
    unavailable(lambda: check_steps(build_plan(PIPELINE), PIPELINE,
                                    lookup_of(ADD_SUB, wide_mul)),
                "tensor 'OUTPUT'", "[8] from step 1 (model 'mul'), output 'PRODUCT'",
                "[4] for ensemble output 'OUTPUT'")

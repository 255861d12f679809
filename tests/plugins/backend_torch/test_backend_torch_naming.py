"""Triton's tensor naming rules for PyTorch models (naiad_backend_torch.naming)."""

from __future__ import annotations

import pytest
from expect import rejected

from naiad_backend_torch.naming import (
    Arguments,
    Convention,
    bind_inputs,
    bind_outputs,
    named_index,
)

TWO = Arguments(("x", "y"), required=2)


@pytest.mark.parametrize(("name", "index"), [
    ("INPUT__0", 0), ("OUTPUT__12", 12), ("x__3", 3),
    ("INPUT0", None), ("INPUT__", None), ("INPUT__a", None), ("INPUT__-1", None),
    # Like Triton, the index is what follows the first "__".
    ("my__input__1", None),
])
def test_named_index(name, index):
    assert named_index(name) == index


def test_forward_argument_names_win_over_config_order():
    binding = bind_inputs("m", ["y", "x"], TWO)
    assert binding.convention is Convention.FORWARD_ARGUMENT
    assert binding.positions == {"y": 1, "x": 0}
    assert binding.count == 2


def test_named_index_gives_positions():
    binding = bind_inputs("m", ["INPUT__1", "INPUT__0"], TWO)
    assert binding.convention is Convention.NAMED_INDEX
    assert binding.positions == {"INPUT__1": 1, "INPUT__0": 0}


def test_other_names_follow_config_order():
    binding = bind_inputs("m", ["second", "first"], TWO)
    assert binding.convention is Convention.STRICT_CONFIG_ORDERING
    assert binding.positions == {"second": 0, "first": 1}


def test_a_dictionary_argument_takes_every_input_by_name():
    binding = bind_inputs("m", ["a", "b", "c"], Arguments(("inputs",), 1, dictionary=True))
    assert binding.convention is Convention.DICTIONARY


def test_arguments_with_defaults_may_be_left_out():
    binding = bind_inputs("m", ["x"], Arguments(("x", "scale"), required=1))
    assert binding.count == 1


def test_too_many_inputs_is_a_load_error():
    rejected(lambda: bind_inputs("m", ["INPUT__0", "INPUT__1", "INPUT__2"], TWO),
             "model 'm'", "configuration expects 3 inputs, model provides 2")


def test_too_few_inputs_is_a_load_error():
    rejected(lambda: bind_inputs("m", ["x"], TWO),
             "model 'm'", "configuration expects 1 inputs, model provides 2")


def test_a_gap_in_input_indices_is_a_load_error():
    rejected(lambda: bind_inputs("m", ["INPUT__0", "INPUT__2"], Arguments(("a", "b", "c"), 0)),
             "model 'm'", "forward() argument 1")


def test_two_inputs_for_one_argument_is_a_load_error():
    rejected(lambda: bind_inputs("m", ["A__0", "B__0"], TWO), "'A__0'", "'B__0'", "index 0")


def test_outputs_by_named_index_may_skip_some():
    assert bind_outputs("m", ["OUTPUT__2", "OUTPUT__0"]) == {"OUTPUT__2": 2, "OUTPUT__0": 0}


def test_outputs_otherwise_follow_config_order():
    assert bind_outputs("m", ["sum", "OUTPUT__0"]) == {"sum": 0, "OUTPUT__0": 1}

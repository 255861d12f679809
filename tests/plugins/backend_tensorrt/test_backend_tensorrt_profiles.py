"""Choosing an optimization profile for a batch, and the profiles an instance group may use:
pure functions on plain shapes, no device."""

from __future__ import annotations

import pytest
from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup

from naiad.errors import InferenceServerError, Status
from naiad_backend_tensorrt.profiles import (
    ProfileShape,
    batch_limit,
    configured_profiles,
    group_profiles,
    select_profile,
)

SMALL = ProfileShape((1, 4), (2, 4), (4, 4))
LARGE = ProfileShape((1, 4), (16, 4), (32, 4))
WIDE = ProfileShape((1, 1), (4, 64), (8, 128))


def test_the_only_profile_that_accepts_the_batch_is_chosen():
    table = {0: {"INPUT0": SMALL}, 1: {"INPUT0": LARGE}}
    assert select_profile(table, {"INPUT0": (20, 4)}, "m") == 1


def test_among_profiles_that_accept_the_nearest_optimum_wins():
    table = {0: {"INPUT0": SMALL}, 1: {"INPUT0": LARGE}}
    assert select_profile(table, {"INPUT0": (3, 4)}, "m") == 0  # |2-3| < |16-3|
    assert select_profile(table, {"INPUT0": (4, 4)}, "m") == 0  # still nearer to 2 than 16
    assert select_profile(table, {"INPUT0": (10, 4)}, "m") == 1  # only profile 1 reaches 10


def test_a_tie_goes_to_the_lowest_index():
    table = {3: {"INPUT0": SMALL}, 1: {"INPUT0": SMALL}}
    assert select_profile(table, {"INPUT0": (2, 4)}, "m") == 1


def test_every_input_must_fit_the_same_profile():
    narrow = ProfileShape((1, 1), (1, 1), (32, 2))
    table = {0: {"A": SMALL, "B": WIDE}, 1: {"A": LARGE, "B": narrow}}
    # 20 rows of A fit only profile 1; B's width 2 fits it too.
    assert select_profile(table, {"A": (20, 4), "B": (20, 2)}, "m") == 1
    # A needs profile 1 (20 rows), B needs profile 0 (width 100): no profile takes both.
    with pytest.raises(InferenceServerError):
        select_profile(table, {"A": (20, 4), "B": (20, 100)}, "m")
    assert select_profile(table, {"A": (3, 4), "B": (3, 64)}, "m") == 0


def test_no_profile_accepts_the_shapes_names_model_shapes_and_ranges():
    table = {0: {"INPUT0": SMALL}, 1: {"INPUT0": LARGE}}
    with pytest.raises(InferenceServerError) as caught:
        select_profile(table, {"INPUT0": (64, 4)}, "resnet")
    error = caught.value
    assert error.status is Status.INVALID_ARG
    assert "model 'resnet'" in error.message
    assert "'INPUT0' [64,4]" in error.message
    assert "profile 0 accepts 'INPUT0' [1,4] to [4,4]" in error.message
    assert "profile 1 accepts 'INPUT0' [1,4] to [32,4]" in error.message


@pytest.mark.parametrize("shape", [(2,), (2, 4, 1), (0, 4), (2, 5), (2, 3)])
def test_rank_and_every_dimension_are_checked(shape):
    with pytest.raises(InferenceServerError):
        select_profile({0: {"INPUT0": SMALL}}, {"INPUT0": shape}, "m")


def test_an_input_the_batch_lacks_fits_no_profile():
    with pytest.raises(InferenceServerError):
        select_profile({0: {"INPUT0": SMALL, "INPUT1": SMALL}}, {"INPUT0": (2, 4)}, "m")


def test_an_instance_without_profiles_is_refused_clearly():
    with pytest.raises(InferenceServerError, match="no optimization profile"):
        select_profile({}, {"INPUT0": (1, 4)}, "m")


def test_batch_limit_is_the_smallest_leading_max_among_inputs():
    assert batch_limit([SMALL, LARGE]) == 4
    assert batch_limit([LARGE]) == 32
    assert batch_limit([]) == 0


def _group(name: str, *profiles: str) -> ModelInstanceGroup:
    return ModelInstanceGroup(name=name, kind=ModelInstanceGroup.KIND_GPU, profile=profiles)


def test_a_group_without_profiles_uses_profile_zero():
    assert group_profiles(_group("g"), 3, "m") == [0]


def test_a_group_lists_its_profiles_in_order_without_repeats():
    assert group_profiles(_group("g", "2", "0", "2"), 3, "m") == [2, 0]


@pytest.mark.parametrize("bad", ["3", "-1", "one", "", "1.0"])
def test_a_profile_the_engine_lacks_is_a_load_error(bad):
    with pytest.raises(InferenceServerError) as caught:
        group_profiles(_group("gpu_group", "0", bad), 3, "m")
    message = caught.value.message
    assert f"instance group 'gpu_group' names optimization profile '{bad}'" in message
    assert "3 profile(s), numbered 0 to 2" in message


def test_configured_profiles_is_the_union_over_groups():
    groups = [_group("a", "1"), _group("b", "2", "1"), _group("c")]
    assert configured_profiles(groups, 3, "m") == [0, 1, 2]
    assert configured_profiles([], 3, "m") == [0]

"""naiad.settings: the one way plugins read KEY=VALUE settings, and its one message shape."""

from __future__ import annotations

import pytest

from naiad.errors import InferenceServerError, Status
from naiad.settings import (
    SettingError,
    boolean,
    integer,
    number,
    read,
    read_env,
    refuse,
    seconds,
)


def refused(call, message: str) -> SettingError:
    with pytest.raises(SettingError) as caught:
        call()
    assert str(caught.value) == caught.value.message == message
    return caught.value


def test_a_refusal_is_invalid_arg_and_a_value_error():
    error = refuse("db", "-1", "a whole number", "--cache-config redis,")
    assert isinstance(error, InferenceServerError) and isinstance(error, ValueError)
    assert error.status is Status.INVALID_ARG
    assert error.message == "--cache-config redis,db=-1: expected a whole number"


@pytest.mark.parametrize(("text", "value"), [("1", True), (" TRUE ", True), ("yes", True),
                                             ("on", True), ("0", False), ("False", False),
                                             ("no", False), ("off", False)])
def test_booleans(text, value):
    assert boolean("tls", text) is value


def test_a_boolean_that_is_neither():
    refused(lambda: boolean("tls_enabled", "maybe", where="--cache-config redis,"),
            "--cache-config redis,tls_enabled=maybe: expected true or false")


def test_whole_numbers_and_their_bounds():
    assert integer("port", " 6379 ", minimum=1, maximum=65535) == 6379
    assert integer("offset", "-3") == -3
    refused(lambda: integer("port", "70000", minimum=1, maximum=65535),
            "port=70000: expected a whole number from 1 to 65535")
    refused(lambda: integer("pool_size", "0", minimum=1),
            "pool_size=0: expected a whole number, at least 1")
    refused(lambda: integer("depth", "9", maximum=8), "depth=9: expected a whole number, at most 8")
    refused(lambda: integer("wait", "1.5", minimum=0, unit="milliseconds"),
            "wait=1.5: expected a whole number of milliseconds, at least 0")


def test_numbers_and_durations():
    assert number("ratio", "0.25", minimum=0, maximum=1) == 0.25
    assert seconds("T", "0.5") == 0.5
    assert seconds("T", "0", allow_zero=True) == 0
    refused(lambda: seconds("T", "0"), "T=0: expected a number of seconds greater than 0")
    refused(lambda: seconds("T", "inf"), "T=inf: expected a number of seconds greater than 0")
    refused(lambda: seconds("T", "-1", allow_zero=True),
            "T=-1: expected a number of seconds, at least 0")
    refused(lambda: number("ratio", "nan", minimum=0, maximum=1),
            "ratio=nan: expected a number from 0 to 1")


def test_read_takes_the_default_only_for_a_missing_key():
    assert read({}, "db", 0, integer, minimum=0) == 0
    assert read({"db": "3"}, "db", 0, integer, minimum=0) == 3
    # Given but empty: refused, never silently the default.
    refused(lambda: read({"db": ""}, "db", 0, integer, minimum=0),
            "db=: expected a whole number, at least 0")


def test_read_env_treats_an_empty_variable_as_unset():
    assert read_env({"T": ""}, "T", 2.0, seconds) == 2.0
    assert read_env({}, "T", 2.0, seconds) == 2.0
    assert read_env({"T": "3"}, "T", 2.0, seconds) == 3.0

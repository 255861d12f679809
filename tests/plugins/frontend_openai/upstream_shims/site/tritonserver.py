"""The names Triton's OpenAI tests take from the ``tritonserver`` package."""

import enum


class ModelControlMode(enum.Enum):
    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


class Server:  # only ever a type annotation in the tests
    pass

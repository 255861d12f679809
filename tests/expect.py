"""Assertions on naiad's errors, shared by the unit tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from naiad.errors import InferenceServerError, Status


def rejected(call: Callable[[], object], *fragments: str,
             status: Status = Status.INVALID_ARG) -> str:
    """Assert ``call`` raises an InferenceServerError of ``status`` whose message holds every
    fragment; return the message."""
    with pytest.raises(InferenceServerError) as info:
        call()
    assert info.value.status is status
    for fragment in fragments:
        assert fragment in info.value.message, (fragment, info.value.message)
    return info.value.message

"""SharedSessions (share_session_between_instances): one session per group key, and the
object whose id() is in the key kept alive while the session is in use, so that a later
load cannot be given this model's session by an id() the freed object left behind."""

from __future__ import annotations

import gc
import weakref

from naiad_backend_onnx.session import SharedSessions


class _Context:
    """Stands for the ModelContext of one load."""


def test_instances_of_one_group_share_one_session_until_the_last_release() -> None:
    shared = SharedSessions()
    made = []

    def create() -> object:
        made.append(object())
        return made[-1]

    context = _Context()
    key = (id(context), "group", 0)
    first = shared.acquire(key, create, owner=context)
    second = shared.acquire(key, create, owner=context)
    assert first is second and len(made) == 1
    shared.release(key)
    shared.release(key)
    assert shared.acquire(key, create, owner=context) is not first  # made anew


def test_the_owner_of_a_key_lives_as_long_as_its_session() -> None:
    shared = SharedSessions()
    context = _Context()
    key = (id(context), "group", 0)
    shared.acquire(key, object, owner=context)
    alive = weakref.ref(context)
    del context
    gc.collect()
    assert alive() is not None  # its id() cannot go to another load's context
    shared.release(key)
    gc.collect()
    assert alive() is None

"""InferenceServer.settle_heap: what ``naiad serve`` keeps out of the garbage collector's
full passes, and that an unloaded model's objects come back within its reach."""

from __future__ import annotations

import gc
import weakref

import pytest
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.models.records import LoadOptions
from naiad.server import InferenceServer, ServerOptions


@pytest.fixture(autouse=True)
def _unfrozen():
    # The freeze is process-wide: leave the test process as it was.
    gc.unfreeze()
    yield
    gc.unfreeze()


class Node:
    """A weak-referenceable object that can sit in a reference cycle."""


def test_frozen_objects_stay_out_of_collections_until_the_next_settle(tmp_path):
    server = InferenceServer(ServerOptions(model_repositories=[str(tmp_path)],
                                           freeze_heap=True))
    node = Node()
    node.me = node  # a cycle: only the collector can free it
    ref = weakref.ref(node)
    server.settle_heap()
    assert gc.get_freeze_count() > 0
    del node
    gc.collect()
    assert ref() is not None, "a frozen cycle must be out of the collector's reach"
    server.settle_heap()  # what a load or an unload does: unfreeze, collect, freeze
    assert ref() is None, "garbage frozen earlier must be collected by the next settle"


def test_without_the_option_nothing_is_frozen(tmp_path):
    server = InferenceServer(ServerOptions(model_repositories=[str(tmp_path)]))
    server.settle_heap()
    assert gc.get_freeze_count() == 0


async def test_start_load_and_unload_settle_the_heap(tmp_path, monkeypatch):
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    # In-process: the model's objects live in this interpreter's heap.
    server = InferenceServer(ServerOptions(model_repositories=[str(tmp_path)],
                                           model_control_mode="explicit",
                                           freeze_heap=True, load=LoadOptions(backend_config={
                                               "python": {"execution-mode": "in_process"}})))
    calls = []
    settle = server.settle_heap
    monkeypatch.setattr(server, "settle_heap", lambda: (calls.append(1), settle()))
    await server.start()
    try:
        assert len(calls) == 1 and gc.get_freeze_count() > 0
        await server.load_model("add_sub")
        # The model's TritonPythonModel class is a reference cycle (a class refers to
        # itself through its __mro__): frozen at load, only the collector frees it.
        class_refs = [weakref.ref(type(w.instance.model)) for w in
                      server.model("add_sub").scheduler.workers]
        assert len(calls) == 2
        await server.unload_model("add_sub")
        assert len(calls) == 3
        assert all(ref() is None for ref in class_refs), \
            "the unloaded model's TritonPythonModel class must not outlive the unload"
    finally:
        await server.shutdown(5)

"""Issue 32, item 6: no per-name state kept for a model name that never loaded. Before the
fix the model manager kept an asyncio lock per name a load or unload mentioned, forever:
200 loads of different 1 MiB names kept +199 MiB. Now a name's lock lives only while a
load or unload of it runs or waits."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from pathlib import Path

import pytest

from naiad.errors import InferenceServerError, Status
from naiad.models.manager import ModelManager
from naiad.models.name_locks import NameLocks
from naiad.models.records import LoadOptions
from naiad.plugins import PluginManager

NAMES = 64
NAME_BYTES = 1 << 20  # 1 MiB each: 64 MiB kept if anything holds the names


async def test_loads_of_names_that_never_load_keep_no_memory(tmp_path: Path) -> None:
    models = ModelManager([tmp_path], PluginManager(), LoadOptions())
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(NAMES):
            name = f"{i:04d}" + "x" * (NAME_BYTES - 4)
            with pytest.raises(InferenceServerError) as failed:
                await models.load(name)
            assert failed.value.status == Status.NOT_FOUND
            await models.unload(name)
            del name, failed
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 4 * NAME_BYTES, f"{kept} bytes kept after {NAMES} loads of unknown names"
    assert not models.models


async def test_a_name_lock_serialises_and_then_goes() -> None:
    locks = NameLocks()
    order: list[str] = []

    async def user(tag: str, name: str) -> None:
        async with locks.hold(name):
            order.append(f"{tag}+")
            await asyncio.sleep(0.01)
            order.append(f"{tag}-")

    await asyncio.gather(user("a", "m"), user("b", "m"), user("c", "other"))
    # one name: a then b, never interleaved; another name ran beside them
    assert order.index("a-") < order.index("b+")
    assert len(locks) == 0

    async def failing() -> None:
        async with locks.hold("m"):
            raise RuntimeError("load failed")

    with pytest.raises(RuntimeError):
        await failing()
    assert len(locks) == 0

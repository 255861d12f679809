"""Retiring model versions: taken out of service at once, unloaded once they are idle.

A version retires when a load replaces it (a reload, a new version, a changed
configuration or version policy) or when its model unloads. Retiring closes the version's
gate (:mod:`naiad.models.gate`) at once, so requests that come now go to the version serving
in its place; then, in the background, it waits for the requests the version admitted,
drains its scheduler, closes its instances (a Python model's ``finalize`` runs) and deletes
its custom metrics. As in Triton, a load returns as soon as the new version serves: the
version it replaced unloads when its last request is done, however long that takes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from naiad.models.loader import stop_workers

if TYPE_CHECKING:
    from naiad.models.records import ModelVersion

log = logging.getLogger("naiad.models")


class Retirements:
    """The versions on their way out, and the tasks that see them out."""

    def __init__(self, on_unloaded: Callable[[ModelVersion], None] | None = None) -> None:
        """``on_unloaded(version)``: called on the event loop once a version is unloaded."""
        self.on_unloaded = on_unloaded
        self._versions: dict[int, ModelVersion] = {}  # id(version) -> version
        self._tasks: set[asyncio.Task[None]] = set()

    def retire(self, leaving: Iterable[ModelVersion], latest: ModelVersion | None
               ) -> asyncio.Task[None] | None:
        """Close the gates of ``leaving`` now (``latest``: the version among them that was
        its model's latest) and unload them in the background once idle. Call it after the
        record that replaces them is installed. Returns the task (None: nothing to do);
        awaiting it is optional (use ``asyncio.shield``: cancelling a wait must not cut an
        unload in half)."""
        leaving = list(leaving)
        if not leaving:
            return None
        for version in leaving:
            version.gate.close(was_latest=version is latest)
            self._versions[id(version)] = version
        task = asyncio.get_running_loop().create_task(self._unload(leaving),
                                                      name="naiad-retire")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    async def _unload(self, leaving: list[ModelVersion]) -> None:
        await asyncio.gather(*(self._unload_one(version) for version in leaving))

    async def _unload_one(self, version: ModelVersion) -> None:
        try:
            if version.gate.inside:
                log.info("model '%s' version %d: waiting for %d request(s) in flight before "
                         "unloading it", version.name, version.version, version.gate.inside)
            await version.gate.emptied()
            await version.scheduler.drain()  # what the scheduler still does on its own
            await stop_workers(version.context.workers)
            if version.metrics is not None:  # after finalize, which may still update them
                version.metrics.close()
        finally:
            del self._versions[id(version)]
            if self.on_unloaded is not None:
                self.on_unloaded(version)
        log.info("unloaded model '%s' version %d", version.name, version.version)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("unloading a retired model version failed", exc_info=task.exception())

    @property
    def versions(self) -> list[ModelVersion]:
        """The versions retired and not unloaded yet (shutdown aborts their work too)."""
        return list(self._versions.values())

    async def wait(self) -> None:
        """Until every version retired so far is unloaded."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

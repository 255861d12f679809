"""``--model-control-mode=poll``: follow the repositories' changes while serving.

Every ``--repository-poll-secs`` seconds the repositories are scanned (in a worker thread:
one ``stat`` per file, see :mod:`naiad.repository.fingerprint`) and compared with the scan
before. New model folders load, removed ones unload, and a model whose files changed loads
again; its unchanged versions keep serving, and when the new load fails the versions that
served before keep serving (the model manager sees to both). As in Triton, a model whose
load failed is tried again at every poll until it loads, changed or not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from contextlib import suppress

from naiad.errors import InferenceServerError
from naiad.models.manager import ModelManager
from naiad.repository.fingerprint import (
    ModelFingerprint,
    RepositoryChanges,
    compare,
    scan_repositories,
)

log = logging.getLogger("naiad.models")


class RepositoryPoller:
    """Applies the changes of the repositories behind ``manager`` every ``interval`` s."""

    def __init__(self, manager: ModelManager, interval: float,
                 after_change: Callable[[], None] | None = None) -> None:
        self.manager = manager
        self.interval = interval
        # called after a poll that loaded or unloaded something (the server settles its heap)
        self.after_change = after_change
        self.seen: dict[str, ModelFingerprint] = {}
        # models whose last load failed: tried again at the next poll
        self.failed: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._current: asyncio.Future[RepositoryChanges] | None = None

    async def scan(self) -> dict[str, ModelFingerprint]:
        """The repositories as they are now (scanned in a worker thread, after the mirrors
        of remote ones are brought up to date)."""
        return await asyncio.to_thread(self._scan)

    def _scan(self) -> dict[str, ModelFingerprint]:
        try:
            self.manager.sync_mirrors()
        except InferenceServerError as exc:  # serve what was mirrored; try at the next poll
            log.error("%s; serving what was mirrored before", exc.message)
        return scan_repositories(self.manager.repositories)

    async def baseline(self) -> None:
        """Remember the repositories as they are before the start-up load, so that a change
        made while models load is applied at the first poll."""
        self.seen = await self.scan()

    def retry(self, names: Iterable[str]) -> None:
        """Try to load ``names`` again at the next poll (models that failed at start-up)."""
        self.failed.update(names)

    def start(self) -> None:
        """Poll on the running event loop until :meth:`stop`."""
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name="naiad-repository-poll")

    async def stop(self) -> None:
        """Stop polling. A poll under way finishes first, so that nothing it loads is left
        behind unmanaged."""
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._current is not None:
            await asyncio.gather(self._current, return_exceptions=True)
            self._current = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            # Shielded: cancelling the poller (at shutdown) must not cut a load in half.
            self._current = asyncio.ensure_future(self.poll_once())
            try:
                await asyncio.shield(self._current)
            except Exception:  # CancelledError is no Exception: stop() ends the loop here
                # One bad poll (a repository unreadable for a moment, a bug) must not end
                # polling for the life of the server.
                log.exception("polling the model repositories failed; trying again in %s s",
                              self.interval)
            self._current = None

    async def poll_once(self) -> RepositoryChanges:
        """Scan once and apply what changed since the scan before."""
        current = await self.scan()
        changes = compare(self.seen, current)
        loading = changes.added + changes.modified
        retry = sorted(name for name in self.failed if name in current and name not in loading)
        if not changes and not retry:
            self.seen = current
            return changes
        if changes:
            log.info("model repository changed: added %s, removed %s, modified %s",
                     changes.added or "none", changes.removed or "none",
                     changes.modified or "none")
        if retry:
            log.info("trying again to load %s (failed before)", ", ".join(retry))
        for name in changes.removed:
            await self.manager.unload(name)
        # load_many logs each failure with its reason and records it for the index.
        failed = await self.manager.load_many(loading + retry, reuse_unchanged=True)
        # Remembered once applied: a poll cut short by an error is done again next time.
        self.seen = current
        self.failed = set(failed)
        if self.after_change is not None:
            self.after_change()
        return changes

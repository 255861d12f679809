"""Admission to one model version: the requests it takes, and when the last one is done.

A request finds its model version (:meth:`ModelManager.get`) a moment before it reaches
the version's scheduler: the HTTP frontend reads the body in between, a gRPC thread decodes
the message, an ensemble builds the step's request. A version being replaced can retire
in that moment, and a request that reached its instances after they closed would be lost
("instance is unloading"). The gate closes that gap:

- the request path :meth:`~VersionGate.enter`\\ s the gate right before it submits, and
  :meth:`~VersionGate.leave`\\ s it when the request is over (its last response sent);
- retiring the version :meth:`~VersionGate.close`\\ s the gate, waits until every request
  that entered has left (:meth:`~VersionGate.emptied`), and only then drains the scheduler
  and closes the instances;
- a request that finds the gate closed goes to the version serving in its place
  (:meth:`ModelManager.replacement`), which was installed before the gate closed.

So a version keeps serving every request it admitted, however long that request runs, and
no request meets an instance that is closing.
"""

from __future__ import annotations

import asyncio
import threading

# How often a retiring version looks whether the requests it admitted have finished.
EMPTY_POLL_S = 0.005


class VersionGate:
    """The door of one model version. Thread-safe: requests enter and leave on any thread;
    the manager closes it and waits for it on the event loop."""

    __slots__ = ("_inside", "_lock", "_open", "was_latest")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = True
        self._inside = 0
        #: set by :meth:`close`: the version was its model's latest when it retired (a
        #: request that looked up "the latest" and comes late goes to the latest now)
        self.was_latest = False

    def enter(self) -> bool:
        """Count one more request in; False (and nothing counted) once the gate closed."""
        lock = self._lock
        lock.acquire()  # not ``with``: half the cost, and this runs for every request
        admitted = self._open
        if admitted:
            self._inside += 1
        lock.release()
        return admitted

    def leave(self, _done: object = None) -> None:
        """One request that entered is over (usable as a future's done-callback)."""
        lock = self._lock
        lock.acquire()
        self._inside -= 1
        lock.release()

    @property
    def inside(self) -> int:
        """Requests that entered and are not over yet."""
        return self._inside

    @property
    def is_open(self) -> bool:
        return self._open

    def close(self, was_latest: bool) -> None:
        """Admit nobody from now on. ``was_latest``: the version was its model's latest."""
        with self._lock:
            self._open = False
            self.was_latest = was_latest

    async def emptied(self) -> None:
        """Wait until every request that entered has left (call after :meth:`close`)."""
        while self._inside:
            await asyncio.sleep(EMPTY_POLL_S)

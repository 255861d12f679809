"""Triton's rate limiter (``--rate-limit=execution_count``): an instance runs a batch only
while the resources its ``instance_group { rate_limiter { resources [...] } }`` names are free.

Resources are counted per device (the instance's GPU; device 0 for CPU instances) unless a
resource is ``global: true``, then there is one pool for the server. Their counts come from
``--rate-limit-resource=NAME:COUNT[:DEVICE]`` (without DEVICE: every device, and the global
pool); a resource no flag names gets, as in Triton, the largest count any one instance needs,
so instances that need it all run one at a time. Counts that can never satisfy an instance,
and a resource that is global for one instance and per device for another, are load errors
with Triton's messages.

Instances that wait are picked by priority as Triton documents it: the priority is a weight,
an instance with priority 2 gets half the chances of one with priority 1 (0 counts as 1).
Each instance carries a virtual time that grows by its priority each time it is picked; the
waiting instance with the smallest one goes first, the earliest waiter on a tie.

How it plugs in: the model manager wraps each instance's worker in a
:class:`RateLimitedWorker` (same ``submit`` / ``busy`` / ``pending`` as the worker), which asks
the limiter before it hands a batch on and gives the resources back when the batch is done.
A scheduler sees an instance that is waiting for resources as busy.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from naiad.errors import InferenceServerError, Status
from naiad.scheduling.worker import Execution, InstanceWorker
from naiad.types import InferenceRequest, InstanceInfo

log = logging.getLogger("naiad.scheduling.rate_limiter")

MODES = ("off", "execution_count")
GLOBAL = -1  # the device key of global resources


@dataclass(frozen=True)
class ResourceFlag:
    """One ``--rate-limit-resource=NAME:COUNT[:DEVICE]``."""

    name: str
    count: int
    device: int | None  # None: every device (and the global pool)


def parse_resource_flag(value: str) -> ResourceFlag:
    """``NAME:COUNT[:DEVICE]`` -> :class:`ResourceFlag`; ValueError names what is wrong."""
    parts = value.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise ValueError(f"--rate-limit-resource '{value}': expected NAME:COUNT[:DEVICE]")
    try:
        count = int(parts[1])
        device = int(parts[2]) if len(parts) == 3 else None
    except ValueError:
        raise ValueError(f"--rate-limit-resource '{value}': COUNT and DEVICE must be "
                         f"integers") from None
    if count < 0 or (device is not None and device < 0):
        raise ValueError(f"--rate-limit-resource '{value}': COUNT and DEVICE must not be "
                         f"negative")
    return ResourceFlag(parts[0], count, device)


@dataclass
class _Instance:
    """An instance the limiter knows: what it needs, its weight, its virtual time."""

    key: str  # "model:version:instance"
    needs: dict[tuple[int, str], int]  # (device or GLOBAL, resource) -> count
    priority: int
    vtime: int = 0
    waiting: list[_Ticket] = field(default_factory=list)


@dataclass
class _Ticket:
    instance: _Instance
    seq: int
    start: Callable[[], None]
    cancelled: bool = False


class RateLimiter:
    """The server's resource pools and the instances waiting for them (thread-safe)."""

    def __init__(self, flags: Sequence[ResourceFlag] = ()) -> None:
        self.flags = list(flags)
        self._lock = threading.Lock()
        self._instances: dict[str, _Instance] = {}
        self._in_use: dict[tuple[int, str], int] = {}
        self._seq = itertools.count()
        self._loads = itertools.count()

    # --- registration (model load / unload) --------------------------------------------

    def register(self, model: str, version: int, config: ModelConfig,
                 instances: Sequence[InstanceInfo]) -> list[str]:
        """Take a model version's instances into account; raises the load error Triton
        gives when a resource is both global and per device, or when a count set by a flag
        can never satisfy one of them. Returns the instances' keys (for :meth:`unregister`)."""
        load = next(self._loads)  # a reload of the same version gets keys of its own
        new = [
            _Instance(f"{model}:{version}:{info.name}#{load}", _needs(group, info),
                      max(group.rate_limiter.priority, 1))
            for info, group in _groups_of(config, instances)
        ]
        with self._lock:
            candidates = {**self._instances, **{i.key: i for i in new}}
            self._check(candidates.values())
            self._instances = candidates
        return [i.key for i in new]

    def unregister(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                self._instances.pop(key, None)

    def _check(self, instances: Any) -> None:
        kinds: dict[str, bool] = {}
        for inst in instances:
            for device, name in inst.needs:
                is_global = device == GLOBAL
                if kinds.setdefault(name, is_global) != is_global:
                    raise InferenceServerError(
                        f'Resource "{name}" is present as both global and device-specific '
                        f"resource in the model configuration.", Status.INVALID_ARG)
        for inst in instances:
            for (device, name), count in inst.needs.items():
                available = self._available(device, name, instances)
                if available < count:
                    raise InferenceServerError(
                        f'Resource count for "{name}" is limited to {available} which will '
                        f"prevent scheduling of one or more model instances, the minimum "
                        f"required count is {count}", Status.INVALID_ARG)

    def _available(self, device: int, name: str, instances: Any) -> int:
        """The pool of ``name`` on ``device``: the flag's count, else the most any one
        instance needs there (Triton's default)."""
        explicit = [f for f in self.flags if f.name == name]
        if explicit:
            exact = [f.count for f in explicit if f.device == device]
            if exact:
                return exact[-1]
            every = [f.count for f in explicit if f.device is None]
            return every[-1] if every else 0
        return max((i.needs.get((device, name), 0) for i in instances), default=0)

    # --- the request path ----------------------------------------------------------------

    def acquire(self, key: str, start: Callable[[], None]) -> _Ticket:
        """Run ``start()`` once ``key``'s resources are allocated to it: at once (on this
        thread) when they are free, else later on the thread of a :meth:`release`."""
        with self._lock:
            inst = self._instances[key]
            ticket = _Ticket(inst, next(self._seq), start)
            if not any(i.waiting for i in self._instances.values()) and self._fits(inst):
                self._allocate(inst)
                granted = [ticket]
            else:
                if not inst.waiting:  # back from idle: no credit for the time it sat out
                    inst.vtime = max(inst.vtime, self._floor())
                inst.waiting.append(ticket)
                granted = []
        for t in granted:
            t.start()
        return ticket

    def withdraw(self, ticket: _Ticket) -> bool:
        """Take a waiting ticket back (its request was cancelled); False once granted."""
        with self._lock:
            if ticket in ticket.instance.waiting:
                ticket.instance.waiting.remove(ticket)
                ticket.cancelled = True
                granted = self._grant()
            else:
                return False
        for t in granted:
            t.start()
        return True

    def release(self, key: str) -> None:
        """Give back the resources of one finished batch of ``key``; start what now fits."""
        with self._lock:
            inst = self._instances.get(key)
            needs = inst.needs if inst is not None else {}
            for slot, count in needs.items():
                self._in_use[slot] = self._in_use.get(slot, 0) - count
            granted = self._grant()
        for t in granted:
            t.start()

    def _floor(self) -> int:
        waiting = [i.vtime for i in self._instances.values() if i.waiting]
        return min(waiting, default=0)

    def _fits(self, inst: _Instance) -> bool:
        instances = self._instances.values()
        return all(self._in_use.get(slot, 0) + count <= self._available(*slot, instances)
                   for slot, count in inst.needs.items())

    def _allocate(self, inst: _Instance) -> None:
        for slot, count in inst.needs.items():
            self._in_use[slot] = self._in_use.get(slot, 0) + count
        inst.vtime += inst.priority

    def _grant(self) -> list[_Ticket]:
        """Allocate to waiting instances in priority order while they fit (under the lock).
        The first in that order that does not fit stops the round, so a large instance is
        not starved by smaller ones slipping past it."""
        granted = []
        while True:
            waiting = [i for i in self._instances.values() if i.waiting]
            if not waiting:
                return granted
            best = min(waiting, key=lambda i: (i.vtime, i.waiting[0].seq))
            if not self._fits(best):
                return granted
            self._allocate(best)
            granted.append(best.waiting.pop(0))


def _groups_of(config: ModelConfig, instances: Sequence[InstanceInfo]
               ) -> list[tuple[InstanceInfo, ModelInstanceGroup]]:
    """Each instance with the instance_group it came from (instances are numbered across
    groups in order and named ``<group name>_<index>``)."""
    out = []
    groups = list(config.instance_group)
    g = 0
    for info in instances:
        while g < len(groups) - 1 and info.name != f"{groups[g].name}_{info.index}":
            g += 1
        out.append((info, groups[g]))
    return out


def _needs(group: ModelInstanceGroup, info: InstanceInfo) -> dict[tuple[int, str], int]:
    needs: dict[tuple[int, str], int] = {}
    for resource in group.rate_limiter.resources:
        slot = (GLOBAL if resource.__getattribute__("global") else info.device_id,
                resource.name)
        needs[slot] = needs.get(slot, 0) + resource.count
    return needs


class RateLimitedWorker:
    """An :class:`InstanceWorker` whose batches wait for the instance's resources.

    Same calls as the worker; a scheduler needs no change. ``cancel()`` on the returned
    future withdraws a batch that still waits for resources."""

    def __init__(self, worker: InstanceWorker, limiter: RateLimiter, key: str) -> None:
        self.worker = worker
        self.limiter = limiter
        self.key = key
        self.info = worker.info
        self.model_name = worker.model_name
        self._waiting = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:  # instance, load, info...
        return getattr(self.worker, name)

    @property
    def pending(self) -> int:
        return self.worker.pending + self._waiting

    def stop(self) -> None:
        """Stop the instance, then forget its resource needs."""
        self.worker.stop()
        self.limiter.unregister([self.key])

    @property
    def busy(self) -> int:
        return self.worker.busy + self._waiting

    def run_elsewhere(self, requests: Sequence[InferenceRequest],
                      then: Callable[[Execution], object]) -> bool:
        """Never: a batch may wait here for resources, and only a future waits for it (the
        worker's own ``run_elsewhere`` would skip the limiter)."""
        return False

    def submit(self, requests: Sequence[InferenceRequest],
               then: Callable[[Execution], Any] | None = None) -> Future[Any]:
        outer: Future[Any] = Future()
        with self._lock:
            self._waiting += 1

        def start() -> None:
            with self._lock:
                self._waiting -= 1
            if not outer.set_running_or_notify_cancel():  # cancelled while it waited
                self.limiter.release(self.key)
                return
            inner = self.worker.submit(requests, then)
            inner.add_done_callback(finished)

        def finished(inner: Future[Any]) -> None:
            self.limiter.release(self.key)
            exc = inner.exception()
            if exc is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(inner.result())

        ticket = self.limiter.acquire(self.key, start)
        outer.add_done_callback(lambda f: f.cancelled() and self._withdrawn(ticket))
        return outer

    def _withdrawn(self, ticket: _Ticket) -> None:
        if self.limiter.withdraw(ticket):
            with self._lock:
                self._waiting -= 1

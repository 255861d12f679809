"""The core's private hook: which scheduler serves a model (not part of the plugin contract).

Schedulers are built into the core (:mod:`.default`, :mod:`.dynamic`, :mod:`.sequence`,
:mod:`.ensemble`): they record a model's statistics and drive its instance workers, core
internals that change with the core. So their hook lives here, beside them, not in the
public :mod:`naiad.hookspecs`, and has no entry point group. The plugin manager adds it with
a second ``add_hookspecs`` (same project, same ``naiad.hookimpl`` marker).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from naiad.hookspecs import hookspec

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from naiad.scheduling.base import SchedulerFactory


@hookspec(firstresult=True)
def naiad_scheduler(config: ModelConfig) -> SchedulerFactory | None:
    """Return the scheduler factory for a model with this ``config``, or None to pass.

    Called once per model version load. The first non-None result wins. The core's own
    plugins claim ``ensemble`` models, ``sequence_batching``, ``dynamic_batching`` and, last
    of all (``trylast``), everything else (the default scheduler).

    Built in only: there is no entry point group for schedulers, so ``naiad serve`` asks
    nothing else. The factory gets a :class:`naiad.scheduling.base.SchedulingContext` and
    builds a :class:`naiad.scheduling.base.Scheduler`. An application that embeds naiad
    may still register an implementation in-process (``PluginManager.register``, with
    ``tryfirst=True`` to be asked before the built-in ones) and pass that manager to
    ``InferenceServer``, accepting that coupling.
    """

"""Creating a model version's instances, each on its own worker thread, and warming them
up before the version serves."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import InferenceServerError, Status
from naiad.metrics.custom_metrics import ModelMetrics
from naiad.models.progress import DEFAULT_PROGRESS_S, progress
from naiad.models.warmup import warm_up, warmup_samples
from naiad.scheduling.worker import InstanceWorker
from naiad.types import Backend, InferenceClient, InstanceInfo, ModelContext


async def load_version(backend: Backend, name: str, version: int, path: Path,
                       config: ModelConfig, instances: list[InstanceInfo],
                       backend_config: dict[str, str],
                       server: InferenceClient | None = None,
                       metrics: ModelMetrics | None = None, *,
                       progress_s: float = DEFAULT_PROGRESS_S,
                       loop_execution_max_us: int = 0) -> list[InstanceWorker]:
    """Create every instance of a model version in parallel, each on the thread it will run
    on. If one fails, the others are stopped and the error names the model and instance.
    Creating them (the backend's environment, the model's ``initialize``) and warming them
    up log that they still run every ``progress_s`` seconds. ``loop_execution_max_us``: see
    :class:`InstanceWorker` (0: every batch runs on its instance's thread)."""
    context = ModelContext(
        name=name,
        version=version,
        config=config,
        model_dir=path,
        version_dir=path / str(version),
        repository=path.parent,
        backend_config=backend_config,
        loop=asyncio.get_running_loop(),
        server=server,
        metrics=metrics,
    )
    samples = warmup_samples(name, version, config, path)
    workers = [InstanceWorker(info, name, loop_execution_max_us * 1000) for info in instances]
    what = f"model '{name}' version {version}"
    async with progress(what, f"initialize ({len(workers)} instance(s))", progress_s):
        results = await asyncio.gather(
            *(w.load(functools.partial(backend.create_instance, context, w.info))
              for w in workers),
            return_exceptions=True,
        )
    failure = _first_failure(workers, results)
    if failure is None and samples:
        # Every instance warms up on its own thread before the version serves.
        async with progress(what, "warmup", progress_s):
            results = await asyncio.gather(*(warm_up(w, samples, name) for w in workers),
                                           return_exceptions=True)
        failure = _first_failure(workers, results)
    if failure is None:
        return workers
    await stop_workers(workers)
    info, exc = failure
    if isinstance(exc, InferenceServerError):
        raise InferenceServerError(f"instance '{info.name}': {exc.message}", exc.status)
    raise InferenceServerError(
        f"model '{name}' version {version} instance '{info.name}' failed to load: "
        f"{type(exc).__name__}: {exc}", Status.UNAVAILABLE)


def _first_failure(workers: list[InstanceWorker], results: Sequence[object]
                   ) -> tuple[InstanceInfo, BaseException] | None:
    return next(((w.info, r) for w, r in zip(workers, results, strict=True)
                 if isinstance(r, BaseException)), None)


async def stop_workers(workers: list[InstanceWorker]) -> None:
    """Close every instance and end its thread, without blocking the event loop."""
    await asyncio.gather(*(asyncio.to_thread(w.stop) for w in workers))

"""Creating a model version's instances, each on its own worker thread."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import InferenceServerError, Status
from naiad.scheduling.base import InstanceWorker
from naiad.types import Backend, InstanceInfo, ModelContext


async def load_version(backend: Backend, name: str, version: int, path: Path,
                       config: ModelConfig, instances: list[InstanceInfo],
                       backend_config: dict[str, str]) -> list[InstanceWorker]:
    """Create every instance of a model version in parallel, each on the thread it will run
    on. If one fails, the others are closed and the error names the model and instance."""
    context = ModelContext(
        name=name,
        version=version,
        config=config,
        model_dir=path,
        version_dir=path / str(version),
        repository=path.parent,
        backend_config=backend_config,
    )
    loop = asyncio.get_running_loop()
    executors = [ThreadPoolExecutor(1, thread_name_prefix=f"naiad-{info.name}")
                 for info in instances]
    results = await asyncio.gather(
        *(loop.run_in_executor(ex, backend.create_instance, context, info)
          for ex, info in zip(executors, instances, strict=False)),
        return_exceptions=True,
    )
    workers, failure = [], None
    for result, info, executor in zip(results, instances, executors, strict=False):
        if isinstance(result, BaseException):
            failure = failure or (info, result)
            executor.shutdown(wait=False)
        else:
            workers.append(InstanceWorker(result, info, name, executor))
    if failure is not None:
        for worker in workers:
            await asyncio.to_thread(worker.close)
        info, exc = failure
        if isinstance(exc, InferenceServerError):
            raise InferenceServerError(
                f"model '{name}' version {version} instance '{info.name}': {exc.message}",
                exc.status)
        raise InferenceServerError(
            f"model '{name}' version {version} instance '{info.name}' failed to load: "
            f"{type(exc).__name__}: {exc}", Status.UNAVAILABLE)
    return workers

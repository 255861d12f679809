"""The repository API's model control: load (or reload, or deploy with its files) and unload
a model on request, in ``--model-control-mode=explicit`` only, as Triton. The files of
deployed models are staged in private folders (naiad.models.staging), removed once no
version uses them. A part of :class:`naiad.server.InferenceServer` (which it is mixed into),
kept apart from the request path."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from naiad.errors import InferenceServerError, Status, invalid_arg
from naiad.models.manager import ModelManager
from naiad.models.staging import ModelStaging
from naiad.server_options import ServerOptions

# Triton's answer to a load or unload request unless --model-control-mode=explicit (in
# "none" mode too); clients and scripts look for this text.
CONTROL_REFUSED = "explicit model load / unload is not allowed if polling is enabled"


class ModelControl:
    """Load and unload on request (a mixin of ``InferenceServer``, whose ``__init__`` sets
    the attributes below and which defines the two methods typed here)."""

    options: ServerOptions
    models: ModelManager
    staging: ModelStaging
    _staging_sweeps: set[asyncio.Task[None]]
    #: collect garbage and freeze the heap after a load or unload (``InferenceServer``)
    settle_heap: Callable[[], None]
    #: bring remote repositories' mirrors of these models up to date (``InferenceServer``)
    _sync_mirrors: Callable[[list[str] | None], Awaitable[None]]

    def _check_control(self) -> None:
        # Triton refuses with UNAVAILABLE (HTTP 503) and this text in "none" and "poll" mode
        # alike, whatever the model; naiad adds which mode it runs in.
        mode = self.options.model_control_mode
        if mode != "explicit":
            raise InferenceServerError(
                f"{CONTROL_REFUSED} (the model control mode is '{mode}'; start with "
                f"--model-control-mode=explicit)", Status.UNAVAILABLE)

    async def load_model(self, name: str, config: str | None = None,
                         files: dict[str, bytes] | None = None) -> None:
        """Load (or reload) model ``name`` from the repositories, ``config`` (JSON)
        overriding its configuration; or, with ``files`` (``file:<path>`` -> content), from
        a private folder holding just those files, ``config`` being its configuration
        (required then, as in Triton). A failed load leaves what served serving."""
        self._check_control()
        folder = None
        if files:
            if config is None:
                raise invalid_arg(f"failed to load '{name}': the 'config' parameter is "
                                  f"required with file parameters (it is the configuration "
                                  f"of the model the files make up)")
            folder = await asyncio.to_thread(self.staging.stage, name, files)
        try:
            if folder is None:
                await self._sync_mirrors([name])
            await self.models.load(name, config, folder=folder)
        except InferenceServerError as exc:
            if exc.status in (Status.NOT_FOUND, Status.INVALID_ARG):
                raise
            # The request was fine; the model is not: Triton answers 400 here.
            raise invalid_arg(f"load failed for model '{name}': {exc.message}") from None
        finally:
            if folder is not None:
                self.staging.done(folder)
            await self._remove_unused_staging()
            self.settle_heap()

    async def _remove_unused_staging(self) -> None:
        """Delete the staged files of deployed models that no version uses: neither one that
        serves nor one still unloading (looked at again once those are unloaded)."""
        retiring = self.models.retirements.versions
        in_use = [version.context.model_dir for version in retiring]
        in_use += [version.context.model_dir for record in list(self.models.models.values())
                   for version in list(record.versions.values())]
        unused = self.staging.unused(folder for folder in in_use if folder is not None)
        if unused:
            await asyncio.to_thread(self.staging.remove, unused)
        if any(self.staging.holds(version.context.model_dir) for version in retiring):
            sweep = asyncio.get_running_loop().create_task(self._sweep_after_retirements())
            self._staging_sweeps.add(sweep)
            sweep.add_done_callback(self._staging_sweeps.discard)

    async def _sweep_after_retirements(self) -> None:
        await self.models.retirements.wait()
        await self._remove_unused_staging()

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self._check_control()
        try:
            await self.models.unload(name, unload_dependents)
        finally:
            await self._remove_unused_staging()
            self.settle_heap()

"""The model lifecycle: find, configure, load, serve, reload and unload model versions.

A model that fails to load is recorded as UNAVAILABLE with its reason (shown by the
repository index and the log); every other model keeps serving.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.config.platforms import ENSEMBLE
from naiad.config.render import config_to_json
from naiad.errors import InferenceServerError, Status, invalid_arg, not_found, unavailable
from naiad.metrics.custom_metrics import CustomMetrics
from naiad.metrics.histogram import Histogram
from naiad.metrics.latency_histograms import distributions_for
from naiad.metrics.stats import ModelStats
from naiad.models.cache_generation import version_generation
from naiad.models.configure import BackendConfigureError
from naiad.models.ensemble_links import composing_models, ensembles_calling
from naiad.models.instances import expand_instance_groups
from naiad.models.loader import load_version, stop_workers
from naiad.models.name_locks import NameLocks
from naiad.models.progress import progress
from naiad.models.records import (
    LOADING,
    READY,
    UNAVAILABLE,
    UNLOADING,
    LoadOptions,
    ModelRecord,
    ModelVersion,
    describe_instances,
    failure_reasons,
    loading_message,
)
from naiad.models.repository_index import repository_index
from naiad.models.retire import Retirements
from naiad.models.reuse import configure_and_fingerprint, unchanged_version
from naiad.models.signature import ModelSignature
from naiad.plugins import PluginManager
from naiad.repository.mirror import RepositoryMirror
from naiad.repository.scan import model_config_versions, model_folders
from naiad.response_cache import ServerCache
from naiad.scheduling.base import Scheduler, SchedulingContext
from naiad.scheduling.ensemble_plan import decoupled_steps
from naiad.scheduling.rate_limiter import RateLimitedWorker, RateLimiter
from naiad.types import InferenceClient

log = logging.getLogger("naiad.models")

#: Triton's default buckets of nv_inference_first_response_histogram_ms (milliseconds).
FIRST_RESPONSE_BUCKETS_MS = (100, 500, 2000, 5000)

# The names a :meth:`ModelManager.load_many` call has tried so far (shared by the tasks it
# starts): a model loaded meanwhile as an ensemble's step is not loaded a second time.
_BATCH: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("naiad_load_batch",
                                                                         default=None)


class ModelManager:
    """Owns every model of the repositories and answers "which version serves this?"."""

    def __init__(self, repositories: list[Path], plugins: PluginManager,
                 options: LoadOptions, track_files: bool = False) -> None:
        self.repositories = repositories
        self.plugins = plugins
        self.options = options
        # --model-control-mode=poll: remember each version's files, so that a poll can keep
        # serving a version whose files did not change (a stat per file at every load)
        self.track_files = track_files
        #: --rate-limit=execution_count: the server's resource pools (None: off)
        self.rate_limiter = (RateLimiter(options.rate_limit_resources)
                             if options.rate_limit == "execution_count" else None)
        self.models: dict[str, ModelRecord] = {}
        #: per-name load/unload serialisation, kept only while in use
        self._locks = NameLocks()
        # Bounds the versions whose instances are being created at once, as Triton's pool
        # of --model-load-thread-count loader threads does.
        self._load_slots = asyncio.Semaphore(max(1, options.load_thread_count))
        # ensemble being loaded -> the composing model whose load it waits for; a wait
        # that would close a circle is skipped instead of deadlocking
        self._waiting: dict[str, str] = {}
        # model -> the ensembles that unloading it unloaded, to load again when it loads
        self._unloaded_with: dict[str, set[str]] = {}
        # versions replaced or unloaded, on their way out once their requests are done
        self.retirements = Retirements(on_unloaded=self._unloaded)
        #: what models that call other models (BLS) get (set by the server)
        self.client: InferenceClient | None = None
        #: where models' custom metrics live (each version gets its view)
        self.custom_metrics = CustomMetrics()
        #: the server's response cache (``--cache-config``), None without one
        self.response_cache: ServerCache | None = None
        #: the remote repositories, mirrored into folders of ``repositories`` (set by the
        #: server): synced at start-up, at every poll and before an explicit load
        self.mirrors: list[RepositoryMirror] = []
        #: models :meth:`load_many` was asked for and has not finished with: a request for
        #: one is told it is loading, not that it is unknown
        self.pending: set[str] = set()

    # --- the request path ---------------------------------------------------------------

    def get(self, name: str, version: str = "") -> ModelVersion:
        """The serving version ``version`` ("" = the latest ready) of model ``name``."""
        record = self.models.get(name)
        if record is None or (not record.versions and not record.states):
            if name in self.pending:
                raise unavailable(loading_message(name))
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if not version:
            if record.latest is None:
                if name in self.pending or any(state == LOADING
                                               for state, _ in record.states.values()):
                    raise unavailable(loading_message(name))
                # Triton's status (NOT_FOUND) with the reason Triton leaves in its log.
                reason = failure_reasons(record)
                raise not_found(f"Request for unknown model: '{name}' has no available versions"
                                + (f" ({reason})" if reason else ""))
            return record.latest
        try:
            number = int(version)
        except ValueError:
            raise invalid_arg(f"model '{name}': version '{version}' is not a number") from None
        found = record.versions.get(number)
        if found is None:
            state = record.states.get(number)
            if state is not None and state[0] != READY:
                # Triton's answer (UNAVAILABLE) for a version loading, unloading, unloaded
                # or failed; naiad adds the reason.
                raise unavailable(f"Request for unknown model: '{name}' version {number} is "
                                  f"not at ready state" + (f" ({state[1]})" if state[1] else ""))
            raise not_found(f"Request for unknown model: '{name}' version {number} is not "
                            f"found (serving versions: {sorted(record.versions) or 'none'})")
        return found

    def replacement(self, retired: ModelVersion, latest: bool = False) -> ModelVersion:
        """The version serving now in place of ``retired``, for a request that found
        ``retired`` just before it retired and reached its gate just after (see
        :mod:`naiad.models.gate`): the latest version when the request asked for the
        latest (``latest``); else the same version number loaded again; else, when
        ``retired`` was the model's latest, the latest now (the request looked up the
        latest, or the version that was the latest until then). Raises what a request for
        it would get now when nothing serves in its place (the model or version unloaded)."""
        if not latest:
            try:
                return self.get(retired.name, str(retired.version))
            except InferenceServerError:
                if not retired.gate.was_latest:
                    raise
        return self.get(retired.name)

    def is_ready(self, name: str, version: str = "") -> bool:
        """Whether the version serves and every instance of it can run requests now (an
        instance whose worker process restarts cannot)."""
        try:
            model = self.get(name, version)
        except InferenceServerError:
            return False
        instances = [worker.instance for worker in model.context.workers]  # read once:
        return all(instance is None or instance.health().ready  # unloads clear them
                   for instance in instances)

    def abort_all(self) -> None:
        """Stop every instance's work in flight at once (see ``ModelInstance.abort``), the
        instances of versions retired and not unloaded yet included."""
        versions = [version for record in list(self.models.values())
                    for version in list(record.versions.values())]
        for version in versions + self.retirements.versions:
            for worker in version.context.workers:
                instance = worker.instance  # read once: an unload clears it
                if instance is not None:
                    instance.abort()

    def busy_instances(self) -> list[str]:
        """``model 'X' version 1 instance 'X_0'`` for every instance running or holding a
        batch now, retired versions included: what a shutdown past its timeout leaves."""
        versions = [version for record in list(self.models.values())
                    for version in list(record.versions.values())]
        return [f"model '{version.name}' version {version.version} instance "
                f"'{worker.info.name}'"
                for version in versions + self.retirements.versions
                for worker in version.context.workers if worker.busy]

    # --- the repository ---------------------------------------------------------------

    def discover(self) -> dict[str, Path]:
        """Model name -> folder over every repository. A name found in two repositories is
        an error for that model, as in Triton."""
        found: dict[str, Path] = {}
        duplicates: set[str] = set()
        for repository in self.repositories:
            for name, path in model_folders(repository).items():
                if name in found:
                    duplicates.add(name)
                found[name] = path
        for name in duplicates:
            self.models[name] = ModelRecord(name, None, states={None: (
                UNAVAILABLE, f"model '{name}' appears in more than one model repository")})
            del found[name]
        for mirror in self.mirrors:  # a remote model that could not be fetched, ever
            for name, reason in mirror.failures.items():
                if name not in found:
                    self.models[name] = ModelRecord(name, None,
                                                    states={None: (UNAVAILABLE, reason)})
        return found

    def sync_mirrors(self, models: list[str] | None = None, settle_s: float = 0.0) -> None:
        """Bring the mirrors of remote repositories up to date (every model, or ``models``);
        on a worker thread. A repository that cannot be listed raises
        :class:`InferenceServerError` naming it, after the others were synced."""
        problems = []
        for mirror in self.mirrors:
            try:
                mirror.sync(models, settle_s)
            except InferenceServerError as exc:
                problems.append(exc)
        if problems:
            raise problems[0] if len(problems) == 1 else unavailable(
                "; ".join(problem.message for problem in problems))

    def index(self, ready_only: bool = False) -> list[dict]:
        """The repository index (see :func:`naiad.models.repository_index.repository_index`)."""
        return repository_index(self.discover(), self.models, ready_only)

    async def load_all(self) -> dict[str, str]:
        return await self.load_many(list(self.discover()))

    async def load(self, name: str, config_override: str | None = None, *,
                   reuse_unchanged: bool = False, folder: Path | None = None) -> None:
        """(Re)load model ``name``; new versions serve before old ones are retired.
        Raises an error naming the model when the load fails (the record keeps the reason).

        ``reuse_unchanged`` keeps serving a version whose files and configuration are the
        same as when it loaded, instead of loading it again (poll mode, as Triton).
        ``folder``: load from this model folder instead of the repositories' (a model
        deployed through the load API, :mod:`naiad.models.staging`); the next load without
        it reads the repositories again, as in Triton."""
        await self._load(name, config_override, reuse_unchanged, once=False, folder=folder)
        await self._reload_dependents(name)

    async def load_many(self, names: Iterable[str], *, reuse_unchanged: bool = False
                        ) -> dict[str, str]:
        """Load ``names`` at the same time (the versions being created at once are bounded
        by ``load_thread_count``); return model name -> reason for those that failed."""
        names = list(dict.fromkeys(names))
        self.pending.update(names)

        async def one(name: str) -> None:
            try:
                await self._load(name, None, reuse_unchanged, once=True)
            finally:
                self.pending.discard(name)

        token = _BATCH.set(set())  # the tasks gather starts copy this context
        try:
            results = await asyncio.gather(*(one(name) for name in names),
                                           return_exceptions=True)
        finally:
            _BATCH.reset(token)
            self.pending.difference_update(names)
        failed = {}
        for name, result in zip(names, results, strict=True):
            if isinstance(result, InferenceServerError):
                failed[name] = result.message
            elif isinstance(result, BaseException):
                raise result
        for name in names:
            if name not in failed:
                await self._reload_dependents(name)
        return failed

    async def _load(self, name: str, config_override: str | None, reuse: bool,
                    once: bool, folder: Path | None = None) -> None:
        async with self._locks.hold(name):
            batch = _BATCH.get()
            if once and batch is not None and name in batch:
                # Loaded meanwhile as the step of an ensemble: report that outcome.
                record = self.models.get(name)
                if record is None or not record.versions:
                    reason = failure_reasons(record) if record is not None else ""
                    raise unavailable(reason or f"model '{name}' failed to load")
                return
            try:
                await self._load_locked(name, config_override, reuse, folder)
            finally:
                if batch is not None:
                    batch.add(name)

    async def _load_locked(self, name: str, config_override: str | None,
                           reuse: bool = False, folder: Path | None = None) -> None:
        path = folder or self.discover().get(name)
        if path is None:
            record = self.models.get(name)
            if record is not None and record.states.get(None, ("",))[0] == UNAVAILABLE:
                raise unavailable(record.states[None][1])
            raise not_found(f"failed to load '{name}': failed to poll model '{name}': model "
                            f"not found in any model repository (no model folder named "
                            f"'{name}' in {', '.join(map(str, self.repositories))})")
        old = self.models.get(name)
        record = ModelRecord(name, path)
        log.info("loading model '%s' from %s", name, path)
        try:
            async with progress(f"model '{name}'", "reading its configuration and completing "
                                "it with its backend (a Python model's requirements.txt "
                                "environment is built in this step)",
                                self.options.progress_s):
                config, filled, fingerprint = await asyncio.to_thread(
                    configure_and_fingerprint, name, path, config_override, self.options,
                    self.plugins, self.track_files)
            versions = model_config_versions(name, path, config)
        except InferenceServerError as exc:
            record.states[None] = (UNAVAILABLE, exc.message)
            record.backend_failed = isinstance(exc, BackendConfigureError)
            self._install(name, record, old)
            log.error("failed to load model '%s': %s", name, exc.message)
            raise
        if config.platform == ENSEMBLE:
            await self._load_steps(name, config)
            if decoupled_steps(config, self.get):
                # As Triton: an ensemble with a decoupled step is decoupled (it streams).
                config.model_transaction_policy.decoupled = True
        config_json = config_to_json(config)
        log.info("model '%s': backend %s, version(s) %s, %s%s", name,
                 config.backend or config.platform, ", ".join(map(str, versions)) or "none",
                 describe_instances(config),
                 f"; auto-completed fields: {', '.join(filled)}" if filled else "")
        if log.isEnabledFor(logging.DEBUG):  # --log-verbose 1 and over: 40-60 lines each
            log.debug("model '%s' configuration:\n%s", name,
                      json_format.MessageToJson(config, preserving_proto_field_name=True))

        async def one(version: int) -> InferenceServerError | None:
            kept = unchanged_version(old, version, config, config_json, fingerprint) \
                if reuse else None
            if kept is not None:
                record.versions[version] = kept
                record.states[version] = (READY, "")
                log.info("model '%s' version %d is unchanged and keeps serving", name,
                         version)
                return None
            record.states[version] = (LOADING, "")
            started = time.monotonic()
            log.info("loading model '%s' version %d", name, version)
            try:
                loaded = await self._load_version_retrying(name, version, path, config,
                                                           config_json)
            except InferenceServerError as exc:
                record.states[version] = (UNAVAILABLE, exc.message)
                log.error("failed to load model '%s' version %d: %s", name, version,
                          exc.message)
                return exc
            loaded.fingerprint = fingerprint
            record.versions[version] = loaded
            record.states[version] = (READY, "")
            log.info("loaded model '%s' version %d: ready in %.1f s", name, version,
                     time.monotonic() - started)
            return None

        # Every version loads at once; the load slots bound how many create instances.
        errors = [e for e in await asyncio.gather(*(one(v) for v in versions)) if e]
        if record.versions:
            record.latest = record.versions[max(record.versions)]
        self._install(name, record, old)
        if old is not None:
            # Not waited for: the load is done once the new versions serve (as in Triton);
            # the ones they replace unload when their requests are done.
            self._retire(old, keep=record)
        if errors:
            raise errors[0]

    async def _load_steps(self, name: str, config: ModelConfig) -> None:
        """Load the models an ensemble's steps call that are not loaded yet, as Triton does
        (in explicit mode loading an ensemble loads its composing models). A composing
        model another task is loading right now is waited for."""
        for step_model in dict.fromkeys(step.model_name
                                        for step in config.ensemble_scheduling.step):
            record = self.models.get(step_model)
            if (record is not None and record.versions) or self._closes_circle(name,
                                                                               step_model):
                continue
            self._waiting[name] = step_model
            try:
                await self._load(step_model, None, reuse=False, once=True)
            except InferenceServerError:
                pass  # the ensemble's own check names the step that cannot be served
            finally:
                del self._waiting[name]

    def _closes_circle(self, waiter: str, target: str) -> bool:
        """Whether ``waiter`` waiting for ``target``'s load would wait for itself: ensembles
        that call each other (directly or through others), or an ensemble calling itself."""
        seen: set[str] = set()
        current: str | None = target
        while current is not None and current not in seen:
            if current == waiter:
                return True
            seen.add(current)
            current = self._waiting.get(current)
        return False

    def _install(self, name: str, record: ModelRecord, old: ModelRecord | None) -> None:
        if old is not None:
            # Keep serving old versions that failed to reload (Triton keeps the previous
            # version of a model whose reload fails).
            if not record.versions and old.versions:
                record.versions = dict(old.versions)
                record.latest = old.latest
                for version in old.versions:
                    record.states.setdefault(version, (READY, ""))
            # A version that served before and is not loaded now (its folder was removed,
            # or the version policy moved on) is listed as unloading while its requests
            # finish, then as unloaded, as in Triton.
            for version, (state, reason) in old.states.items():
                if version is None or version in record.states:
                    continue
                if state in (READY, UNLOADING):
                    record.states[version] = (UNLOADING, "")
                elif reason == "unloaded":
                    record.states[version] = (UNAVAILABLE, "unloaded")
        self.models[name] = record

    async def unload(self, name: str, unload_dependents: bool = False, *,
                     after_load: bool = True) -> None:
        """Unload ``name`` and, as Triton does, every loaded ensemble that calls it (directly
        or through other ensembles). Those ensembles load again when ``name`` does.

        ``unload_dependents`` (the repository API's parameter): ``name`` is an ensemble whose
        composing models, and theirs, go too (Triton's "dependents" are the models an
        ensemble depends on).

        An unload that arrives while ``name`` loads waits for that load and then unloads
        what it loaded, as Triton does (issue 32: it was answered at once and lost);
        ``after_load=False`` (shutdown) unloads what serves now without waiting for a load,
        which may never end."""
        if after_load:
            async with self._locks.hold(name):
                pass  # the load in progress, if any, is done
        composing = composing_models(self.models, name) if unload_dependents else []
        for dependents in self._unloaded_with.values():
            dependents.discard(name)  # unloaded on purpose: no composing model brings it back
        await self._unload_with_dependents(name, set())
        for model in composing:
            log.info("unloading model '%s': ensemble '%s' was unloaded with its dependents",
                     model, name)
            for dependents in self._unloaded_with.values():
                dependents.discard(model)
            await self._unload_with_dependents(model, set())

    async def _unload_with_dependents(self, name: str, seen: set[str]) -> None:
        # The ensembles go first, so that none is left calling a model that is gone.
        seen.add(name)
        record = self.models.get(name)
        if record is None or not record.versions:
            return  # nothing loaded: unloading succeeds, as in Triton
        for ensemble in ensembles_calling(self.models, name):
            self._unloaded_with.setdefault(name, set()).add(ensemble)
            if ensemble not in seen:  # ensembles may call each other
                log.info("unloading ensemble '%s': it calls model '%s'", ensemble, name)
                await self._unload_with_dependents(ensemble, seen)
        await self._unload(name)

    async def _unload(self, name: str) -> None:
        async with self._locks.hold(name):
            record = self.models.get(name)
            if record is None or not record.versions:
                return
            unloaded = ModelRecord(name, record.path, states={
                v: (UNLOADING, "") for v in record.versions})
            self.models[name] = unloaded
            retiring = self._retire(record, keep=None)
            if retiring is not None:  # an unload returns once the model is unloaded
                await asyncio.shield(retiring)
            log.info("unloaded model '%s'", name)

    async def _reload_dependents(self, name: str) -> None:
        """Load again the ensembles that unloading ``name`` took down (Triton does)."""
        for ensemble in sorted(self._unloaded_with.pop(name, ())):
            record = self.models.get(ensemble)
            if record is not None and record.versions:
                continue  # loaded again meanwhile
            log.info("loading ensemble '%s' again: model '%s' is back", ensemble, name)
            try:
                await self._load(ensemble, None, reuse=False, once=False)
            except InferenceServerError:
                continue  # its record says why; the load logged it
            await self._reload_dependents(ensemble)

    async def unload_all(self) -> None:
        """Unload every model, and wait for the versions retired before to unload too."""
        for name in list(self.models):
            record = self.models[name]
            if record.versions:
                await self.unload(name, after_load=False)
        await self.retirements.wait()

    def _retire(self, record: ModelRecord, keep: ModelRecord | None
                ) -> asyncio.Task[None] | None:
        """Retire the versions of ``record`` that ``keep`` (installed already) does not
        serve: closed to new requests now, unloaded once idle (:mod:`naiad.models.retire`)."""
        leaving = [loaded for number, loaded in record.versions.items()
                   if keep is None or keep.versions.get(number) is not loaded]
        return self.retirements.retire(leaving, latest=record.latest)

    def _unloaded(self, version: ModelVersion) -> None:
        """A retired version is unloaded: listed so, unless that version number serves
        again meanwhile."""
        record = self.models.get(version.name)
        if record is not None and record.states.get(version.version, ("",))[0] == UNLOADING:
            record.states[version.version] = (UNAVAILABLE, "unloaded")

    # --- loading ------------------------------------------------------------------------

    async def _load_version_retrying(self, name: str, version: int, path: Path,
                                     config: ModelConfig, config_json: dict) -> ModelVersion:
        """:meth:`_load_version` in a load slot, tried ``load_retry_count`` more times when
        it fails (Triton retries creating the version, not reading its configuration)."""
        attempts = 1 + max(0, self.options.load_retry_count)
        for attempt in range(1, attempts + 1):
            try:
                if config.platform == ENSEMBLE:  # no instances to create: no slot needed
                    return await self._load_version(name, version, path, config, config_json)
                async with self._load_slots:
                    return await self._load_version(name, version, path, config, config_json)
            except InferenceServerError as exc:
                if attempt == attempts:
                    raise
                log.warning("model '%s' version %d failed to load (attempt %d of %d), "
                            "trying again: %s", name, version, attempt, attempts, exc.message)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _load_version(self, name: str, version: int, path: Path, config: ModelConfig,
                            config_json: dict) -> ModelVersion:
        stats = ModelStats(name, version, distributions=distributions_for(
            self.options.metrics, response_cache=config.response_cache.enable))
        # what the version loads from, for its cache keys (taken before its files are read)
        generation = await asyncio.to_thread(version_generation, path, version, config_json
                                             ) if config.response_cache.enable else b""
        metrics = self.custom_metrics.for_model(name, version)
        if config.platform == ENSEMBLE:
            workers = []  # an ensemble's steps run on their own models' instances
        else:
            backend_config = self.options.settings_for(config.backend)
            backend = self.plugins.backend(config.backend, backend_config)
            instances = expand_instance_groups(name, config,
                                               self.options.limits.max_instances)
            limiter = self.rate_limiter
            # the rate limiter's load errors come before any instance starts, as in Triton
            limited = [] if limiter is None else limiter.register(name, version, config,
                                                                    instances)
            try:
                workers = await load_version(backend, name, version, path, config, instances,
                                             backend_config, self.client, metrics,
                                             progress_s=self.options.progress_s,
                                             loop_execution_max_us=(
                                                 self.options.loop_execution_max_us))
            except BaseException:
                metrics.close()  # what a failed initialize made goes with it
                if limiter is not None:
                    limiter.unregister(limited)
                raise
            if limiter is not None:
                workers = [RateLimitedWorker(w, limiter, key)
                           for w, key in zip(workers, limited, strict=True)]
        context = SchedulingContext(name, version, config, workers, stats, models=self.get,
                                    model_dir=path)
        try:
            factory = self.plugins.scheduler(config)
            scheduler = factory(context)
        except Exception as exc:
            await stop_workers(workers)
            metrics.close()
            if isinstance(exc, InferenceServerError):
                raise
            raise InferenceServerError(f"model '{name}': scheduler failed: {exc}",
                                       Status.INTERNAL) from exc
        if config.response_cache.enable:
            scheduler = self._behind_cache(name, version, scheduler, stats,
                                           frozenset(output.name for output in config.output),
                                           generation)
        decoupled = config.model_transaction_policy.decoupled
        return ModelVersion(name, version, config, ModelSignature(name, config), scheduler,
                            context, stats, config_json, decoupled=decoupled,
                            first_response=Histogram(FIRST_RESPONSE_BUCKETS_MS)
                            if decoupled and self.options.metrics.histogram_latencies else None,
                            metrics=metrics)

    def _behind_cache(self, name: str, version: int, scheduler: Scheduler,
                      stats: ModelStats, outputs: frozenset[str],
                      generation: bytes) -> Scheduler:
        """A version with ``response_cache { enable: true }``: its scheduler behind the
        server's cache. Without one Triton serves the model uncached and says nothing;
        naiad says so once per load."""
        if self.response_cache is None:
            log.warning("model '%s' version %d enables response_cache but the server has "
                        "no response cache (--cache-config): every request runs the model",
                        name, version)
            return scheduler
        return self.response_cache.wrap(scheduler, version, stats, outputs, generation)

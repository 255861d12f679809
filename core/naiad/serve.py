"""Running the server process: the core, the HTTP, gRPC and metrics listeners, and shutdown.

Everything shares one event loop (uvloop where available). SIGTERM or SIGINT stops new
inferences, waits for those in flight up to ``--exit-timeout-secs``, closes the listeners,
then unloads every model.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from naiad.errors import InferenceServerError
from naiad.frontends.grpc.options import GRPCOptions
from naiad.frontends.http.app import HTTPFrontend
from naiad.frontends.http.limits import HTTPLimits
from naiad.frontends.http.listener import http_listener
from naiad.frontends.restrictions import Restriction
from naiad.lifetime import EXIT_USAGE, ShutdownWatchdog, exit_status, start_models
from naiad.metrics.endpoint import metrics_app
from naiad.server import InferenceServer, ServerOptions

log = logging.getLogger("naiad")

@dataclass
class Listeners:
    """Which frontends listen where (tritonserver's flags)."""

    http_address: str = "0.0.0.0"
    http_port: int = 8000
    allow_http: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    allow_grpc: bool = True
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 8002
    allow_metrics: bool = True
    allow_cpu_metrics: bool = True
    allow_gpu_metrics: bool = True
    http_server: str = "uvicorn"
    reuse_http_port: bool = False
    # HTTP served by this many frontend processes for this one (0: by this process).
    frontend_processes: int = 0
    # Request headers whose names match this regular expression become request parameters.
    http_header_forward_pattern: str = ""
    # API group -> the header a request to it must carry.
    http_restricted: dict[str, Restriction] = field(default_factory=dict)
    # Header size and count, idle, header and body timeouts of the HTTP and metrics listeners.
    http_limits: HTTPLimits = field(default_factory=HTTPLimits)
    grpc: GRPCOptions = field(default_factory=GRPCOptions)
    # The parsed flags, for frontend plugins (naiad.frontends) to read theirs; None: none.
    frontend_options: Any = None


async def serve(options: ServerOptions, listeners: Listeners) -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    try:
        server = InferenceServer(options)
    except InferenceServerError as exc:  # a repository source or cache that cannot be had
        log.error("cannot start: %s", exc.message)
        return EXIT_USAGE
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # Live before the listeners start, ready once the start-up models are loaded (below).
    server.open()
    started: list[Any] = []
    grpc_server = None
    exit_code = 0
    try:
        if listeners.frontend_processes and (listeners.allow_http or listeners.allow_grpc):
            started.append(await _start_frontend_processes(server, listeners))
        else:
            if listeners.allow_grpc:
                from naiad.frontends.grpc import start_grpc_server

                grpc_server = await start_grpc_server(server, listeners.grpc_address,
                                                      listeners.grpc_port, listeners.grpc)
                log.info("gRPC inference service at %s:%d", listeners.grpc_address,
                         listeners.grpc_port)
            if listeners.allow_http:
                frontend = _http_frontend(server, listeners)
                http = http_listener(listeners.http_server, frontend, listeners.http_address,
                                     listeners.http_port, listeners.reuse_http_port,
                                     listeners.http_limits, frontend.fast_infer)
                await http.start()
                started.append(http)
                log.info("HTTP service at %s:%d (%s)", listeners.http_address,
                         listeners.http_port, listeners.http_server)
        if listeners.allow_metrics:
            metrics = http_listener("uvicorn", metrics_app(server, listeners.allow_cpu_metrics,
                                                 listeners.allow_gpu_metrics),
                                     listeners.metrics_address,
                                     listeners.metrics_port, limits=listeners.http_limits)
            await metrics.start()
            started.append(metrics)
            log.info("metrics at http://%s:%d/metrics", listeners.metrics_address,
                     listeners.metrics_port)
        # --- plugin frontends (entry points "naiad.frontends": the OpenAI API) ---
        if listeners.frontend_options is not None:
            started.extend(await _start_plugin_frontends(server, listeners))
    except (OSError, SystemExit) as exc:
        log.error("failed to start a listener: %s", exc)
        exit_code = 1
        stop.set()
    if not exit_code:
        exit_code = await start_models(server, stop)
    await stop.wait()
    log.info("shutting down")
    watchdog = ShutdownWatchdog(server, options.exit_timeout_secs
                                + options.exit_grace_secs).start()
    await server.shutdown(options.exit_timeout_secs, options.exit_grace_secs)
    if grpc_server is not None:
        await grpc_server.stop(1.0)
    for listener in reversed(started):
        await listener.stop()
    watchdog.cancel()
    return exit_status(server, exit_code)


def _http_frontend(server: InferenceServer, listeners: Listeners) -> HTTPFrontend:
    return HTTPFrontend(server, restricted=listeners.http_restricted,
                        header_forward_pattern=listeners.http_header_forward_pattern)


async def _start_frontend_processes(server: InferenceServer, listeners: Listeners) -> Any:
    """HTTP and gRPC served by ``--frontend-processes`` processes that forward every request
    to this one (docs/design.md, "Processes"); started on return."""
    from concurrent.futures import ThreadPoolExecutor

    from naiad.frontends.bridge.grpc_engine import MAX_THREADS
    from naiad.frontends.bridge.processes import (
        FrontendProcesses,
        GRPCForwarding,
        HTTPForwarding,
    )
    from naiad.frontends.grpc.listener import make_servicer, servicer_handlers
    from naiad.frontends.grpc.loop_infer import BridgedInfer, loop_infer
    from naiad.frontends.grpc.loop_stream import LoopStreams

    http = grpc = None
    if listeners.allow_http:
        http = HTTPForwarding(_http_frontend(server, listeners), listeners.http_address,
                              listeners.http_port, listeners.reuse_http_port,
                              listeners.http_limits)
    if listeners.allow_grpc:
        servicer = make_servicer(server, listeners.grpc)
        handlers = servicer_handlers(server, listeners.grpc, servicer=servicer)
        # The gRPC server in the frontends (either) sends ModelInfer and ModelStreamInfer
        # on the HTTP link, where the engine answers them on its loop (frames.GRPC_INFER,
        # GRPC_STREAM); every other call goes as a CALL through the gRPC bridge.
        infer = None
        if listeners.allow_http:
            infer = BridgedInfer(loop_infer(servicer, listeners.grpc), handlers,
                                 ThreadPoolExecutor(max_workers=MAX_THREADS,
                                                    thread_name_prefix="naiad-grpc"),
                                 asyncio.get_running_loop(),
                                 LoopStreams(servicer, listeners.grpc, handlers))
        grpc = GRPCForwarding(handlers, listeners.grpc_address, listeners.grpc_port,
                              listeners.grpc, server.options.max_input_size,
                              server.options.max_response_size, infer)
    processes = FrontendProcesses(listeners.frontend_processes, http, grpc)
    await processes.start()
    if http is not None:
        log.info("HTTP service at %s:%d (uvicorn in %d frontend processes)",
                 listeners.http_address, listeners.http_port, listeners.frontend_processes)
    if grpc is not None:
        log.info("gRPC inference service at %s:%d (in %d frontend processes)",
                 listeners.grpc_address, listeners.grpc_port, listeners.frontend_processes)
    return processes


async def _start_plugin_frontends(server: InferenceServer, listeners: Listeners) -> list[Any]:
    """Start the frontends the installed frontend plugins build for the parsed flags."""
    from naiad.types import FrontendContext

    server.plugins.load_frontends()
    factories = server.plugins.frontends(listeners.frontend_options)
    if not factories:
        return []
    metrics = (metrics_app(server, listeners.allow_cpu_metrics, listeners.allow_gpu_metrics)
               if listeners.allow_metrics else None)
    started = []
    for factory in factories:
        frontend = factory(FrontendContext(server, listeners.frontend_options, metrics))
        await frontend.start()
        started.append(frontend)
    return started


def use_batch_scheduling() -> bool:
    """Put every thread of this process (and those it starts later) in Linux's SCHED_BATCH
    class; False where that is not possible.

    A woken SCHED_BATCH thread does not preempt the running one. In a GIL-bound server
    that preemption is almost always wasted: the thread the event loop or a gRPC thread
    just woke (an instance worker, or the other way round) needs the GIL the waker still
    holds, so it runs only to sleep again, two context switches per hand-off. Measured on
    the 2-core test machine (benchmarks/README.md, "Scheduling class"): 2-5 % more req/s
    at concurrency 1; at 8 and 64, 11-19 % over gRPC, 13 % and 3 % over HTTP. The cost:
    when other processes keep the CPUs busy, a woken naiad thread waits for the running
    task's time slice (a few ms at most) instead of taking the CPU at once.
    """
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None:
        return False
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    try:
        for tid in threads:
            os.sched_setscheduler(tid, policy, os.sched_param(0))
    except OSError as exc:
        log.warning("could not use the SCHED_BATCH scheduling class: %s", exc)
        return False
    return True


def run(options: ServerOptions, listeners: Listeners, batch_scheduling: bool = True) -> int:
    """Run :func:`serve` on uvloop when it is installed; with ``batch_scheduling``, in the
    SCHED_BATCH class (:func:`use_batch_scheduling`)."""
    if batch_scheduling:
        use_batch_scheduling()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(options, listeners))
    return uvloop.run(serve(options, listeners))

#!/usr/bin/env python3
"""CPU cost of each stage of naiad's hot path, in process, no sockets: what one request
spends in decoding, checking, the backend, encoding and the event loop <-> instance thread
hop. Complements protocol_overhead.py (end to end, over the network) and
profile_hot_path.py (sampling): these numbers are per call, best of ``--repeat`` runs, so
they are far less sensitive to a busy machine than req/s.

Stages, on the ``identity`` (batch 1, FP32 [1,16]) and ``add_sub`` requests of payloads.py:

- ``http.decode``: ``frontends.http.codec.decode_request`` on the V2 JSON body
- ``http.encode``: ``frontends.http.codec.encode_response`` (JSON outputs)
- ``grpc.parse``: ``ModelInferRequest.FromString`` (what grpc does before the servicer)
- ``grpc.decode`` / ``grpc.encode``: ``frontends.grpc.codec`` both ways
- ``check``: ``ModelSignature.check`` (the server's request validation)
- ``backend.execute``: the model instance's ``execute`` called directly (Python backend:
  pb_utils wrapping + the model's ``execute`` + conversion back)
- ``server.infer``: ``InferenceServer.infer`` awaited on the loop, as the HTTP frontend does
  (through a ``LoopWaiter``): scheduler, the hop to the instance's thread and back,
  statistics (includes ``check`` and ``backend.execute``)
- ``http.asgi``: the whole ASGI app (``HTTPFrontend``) with an in-memory receive/send
- ``server.infer thread``: the same from a frontend thread waiting on the future, as the
  gRPC frontend does (the request goes straight to the instance's thread, no event loop)
- ``grpc.servicer``: the whole ``ModelInfer`` of the gRPC servicer on a frontend thread,
  bytes in, bytes out (parse included), without grpc itself

  .venv/bin/python benchmarks/stage_costs.py [--cpu 0] [--number 2000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import payloads  # noqa: E402
import protocol_overhead as po  # noqa: E402


def time_sync(fn: Callable[[], Any], number: int, repeat: int) -> float:
    """Best-of-``repeat`` mean microseconds per call."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best * 1e6


async def time_async(fn: Callable[[], Awaitable[Any]], number: int, repeat: int,
                     concurrency: int = 1) -> float:
    best = float("inf")
    per_task = max(1, number // concurrency)

    async def one() -> None:
        for _ in range(per_task):
            await fn()

    for _ in range(repeat):
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(concurrency)))
        best = min(best, (time.perf_counter() - t0) / (per_task * concurrency))
    return best * 1e6


async def measure_model(model_name: str, server: Any, app: Any, servicer: Any,
                        encoder: Any, args: argparse.Namespace,
                        rows: list[tuple[str, str, float]]) -> None:
    from tritonclient.grpc import service_pb2

    from naiad.frontends.grpc.codec import decode_request as grpc_decode
    from naiad.frontends.http.codec import decode_request as http_decode
    from naiad.frontends.http.codec import encode_response
    from naiad.futures import LoopWaiter
    from naiad.server import answer

    n, r = args.number, args.repeat
    shm = server.shared_memory
    model = server.model(model_name)
    body = payloads.json_request(model_name)
    msg_bytes = payloads.grpc_request(model_name).SerializeToString()
    msg = service_pb2.ModelInferRequest.FromString(msg_bytes)
    req = http_decode(model_name, model.version, body, None, shm)
    resp = server.infer(model, http_decode(model_name, model.version, body, None,
                                           shm)).result()
    greq, to_shm = grpc_decode(model.name, model.version, msg, shm)
    worker = model.scheduler.workers[0] if hasattr(model.scheduler, "workers") \
        else None
    instance = getattr(worker, "instance", None)

    def add(stage: str, us: float) -> None:
        rows.append((model_name, stage, us))
        print(f"  {model_name:<9} {stage:<16} {us:8.1f} us", flush=True)

    add("http.decode", time_sync(
        lambda: http_decode(model_name, model.version, body, None, shm), n, r))
    add("http.encode", time_sync(
        lambda: encode_response(req, resp, model.version, shm), n, r))
    add("grpc.parse", time_sync(
        lambda: service_pb2.ModelInferRequest.FromString(msg_bytes), n, r))
    add("grpc.decode", time_sync(
        lambda: grpc_decode(model.name, model.version, msg, shm), n, r))
    add("grpc.encode", time_sync(lambda: encoder.encode(greq, resp, to_shm), n, r))
    add("check", time_sync(lambda: model.signature.check(req), n, r))
    if instance is not None:
        add("backend.execute", time_sync(lambda: instance.execute((req,)), n, r))

    waiter = LoopWaiter(asyncio.get_running_loop())

    async def infer() -> Any:
        request = http_decode(model_name, model.version, body, None, shm)
        return answer(request, await waiter.wait(server.infer(model, request)))
    base = time_sync(lambda: http_decode(model_name, model.version, body, None, shm),
                     n, r)
    for c in args.concurrency:
        add(f"server.infer c={c}", await time_async(infer, n, r, c) - base)

    scope = {"type": "http", "method": "POST", "path": f"/v2/models/{model_name}/infer",
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())]}
    message = {"type": "http.request", "body": body, "more_body": False}

    async def receive() -> dict:
        return message

    async def send(_: dict) -> None:
        return None

    async def asgi() -> None:
        await app(scope, receive, send)

    class Context:
        def abort(self, code: Any, details: str) -> None:
            raise RuntimeError(details)

        def add_callback(self, fn: Callable[[], Any]) -> bool:
            return True

    ctx = Context()

    def servicer_call() -> Any:
        return servicer.ModelInfer(service_pb2.ModelInferRequest.FromString(msg_bytes), ctx)

    def infer_on_thread() -> Any:
        request = grpc_decode(model.name, model.version, msg, shm)[0]
        return answer(request, server.infer(model, request).result())

    for c in args.concurrency:
        add(f"http.asgi c={c}", await time_async(asgi, n, r, c))
    # The gRPC handler runs on a frontend thread, one request at a time per thread.
    base = time_sync(lambda: grpc_decode(model.name, model.version, msg, shm), n, r)
    add("server.infer thread", await asyncio.to_thread(time_sync, infer_on_thread, n, r)
        - base)
    add("grpc.servicer", await asyncio.to_thread(time_sync, servicer_call, n, r))


async def measure(args: argparse.Namespace) -> list[tuple[str, str, float]]:
    from naiad.frontends.grpc.codec import ResponseEncoder
    from naiad.frontends.grpc.service import InferenceServicer
    from naiad.frontends.http.app import HTTPFrontend
    from naiad.server import InferenceServer, ServerOptions

    work = Path(tempfile.mkdtemp(prefix="naiad-stages-"))
    repo = po.write_repository(work)
    server = InferenceServer(ServerOptions(model_repositories=[str(repo)]))
    await server.start()
    rows: list[tuple[str, str, float]] = []
    try:
        app = HTTPFrontend(server)
        servicer = InferenceServicer(server, asyncio.get_running_loop())
        encoder = ResponseEncoder(server.shared_memory)
        for model_name in args.models:
            await measure_model(model_name, server, app, servicer, encoder, args, rows)
    finally:
        await server.shutdown(5)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=po.csv(), default=list(payloads.MODELS))
    ap.add_argument("--number", type=int, default=2000, help="calls per timing run")
    ap.add_argument("--repeat", type=int, default=7, help="timing runs; the best is kept")
    ap.add_argument("--concurrency", type=po.csv(int), default=[1, 8],
                    help="requests in flight for the async stages (1,8)")
    ap.add_argument("--cpu", default="", help="pin this process to these CPUs (e.g. 0)")
    ap.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    args = ap.parse_args(argv)
    if args.cpu:
        os.sched_setaffinity(0, {int(c) for c in args.cpu.split(",")})
    for k, v in po.ONE_THREAD_ENV.items():
        os.environ.setdefault(k, v)
    if args.loop == "uvloop":
        import uvloop
        rows = uvloop.run(measure(args))
    else:
        rows = asyncio.run(measure(args))
    print(f"\n| model | stage | us per request (best of {args.repeat} x {args.number}) |")
    print("|---|---|---|")
    for model, stage, us in rows:
        print(f"| {model} | {stage} | {us:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""gRPC protocol floor: a bare grpc.aio server implementing
inference.GRPCInferenceService/ModelInfer (tritonclient's service_pb2_grpc) that returns a
fixed, correct ModelInferResponse for the benchmark's fixed request; also ServerLive,
ServerReady and ModelReady. naiad's gRPC ratios divide by it.

  python benchmarks/floors/grpc_floor.py --port PORT [--loop asyncio|uvloop]
"""

import argparse
import asyncio
import os
import sys

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import payloads

RESPONSES = {m: payloads.grpc_response(m) for m in payloads.MODELS}


class Floor(service_pb2_grpc.GRPCInferenceServiceServicer):
    async def ServerLive(self, request, context):
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return service_pb2.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context):
        return service_pb2.ModelReadyResponse(ready=request.name in RESPONSES)

    async def ModelInfer(self, request, context):
        return RESPONSES[request.model_name]


async def serve(address: str) -> None:
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Floor(), server)
    server.add_insecure_port(address)
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    a = ap.parse_args()
    if a.loop == "uvloop":
        import uvloop
        uvloop.install()
    asyncio.run(serve(f"{a.host}:{a.port}"))

"""HTTP protocol floor: a bare Starlette app that reads the request body and returns a
fixed, correct V2 JSON infer response for the benchmark's fixed request (no parsing, no
model). What no Python ASGI server can beat on this machine; naiad's HTTP ratios divide
by it. Run it the way protocol_overhead.py does:

  uvicorn --app-dir benchmarks/floors --loop uvloop --http httptools --no-access-log \
      --log-level warning --host 127.0.0.1 --port PORT http_floor:app
  hypercorn -k uvloop --workers 1 --bind 127.0.0.1:PORT --chdir benchmarks/floors http_floor:app
"""

import os
import sys

from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import payloads

RESPONSES = {m: payloads.json_response(m) for m in payloads.MODELS}


def _infer(body: bytes):
    async def infer(request):
        await request.body()  # a real server must at least read the request
        return Response(body, media_type="application/json")
    return infer


async def ok(request):
    return Response(b"", status_code=200)


app = Starlette(routes=[
    *(Route(f"/v2/models/{m}/infer", _infer(RESPONSES[m]), methods=["POST"])
      for m in payloads.MODELS),
    *(Route(f"/v2/models/{m}/ready", ok) for m in payloads.MODELS),
    Route("/v2/health/ready", ok),
    Route("/v2/health/live", ok),
])

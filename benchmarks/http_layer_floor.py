"""The floor of an HTTP layer: CPU per request of a server that answers every
``POST /v2/models/identity/infer`` with a fixed JSON body and does nothing else, for the two
layers naiad could serve the infer route on:

- ``asgi``: a bare ASGI application on uvicorn (httptools, uvloop), as naiad's ASGI path;
- ``protocol``: a bare httptools protocol on uvloop, as naiad's own protocol
  (``naiad.frontends.http.protocol``).

The server is pinned to ``--server-cpus``, wrk to ``--client-cpus``; the CPU time of the
server process is read from ``/proc/PID/stat`` around each point. Needs wrk and taskset.

    .venv/bin/python benchmarks/http_layer_floor.py --concurrency 1,8 --duration 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
BODY = b'{"model_name":"identity","model_version":"1","outputs":[]}'
REQUEST = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                                  "data": [1.0] * 16}]})


def serve(layer: str, port: int) -> None:
    """Run one bare server (in the child process) until it is killed."""
    import asyncio

    import uvloop

    if layer == "asgi":
        import uvicorn

        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(BODY)).encode())]

        async def app(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
            if scope["type"] != "http":
                return
            while (await receive()).get("more_body"):
                pass
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": BODY})

        uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                    lifespan="off", access_log=False, log_level="warning",
                    server_header=False, proxy_headers=False)
        return

    import httptools

    answer = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
              b"\r\n%s" % (len(BODY), BODY))

    class Protocol(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.parser = httptools.HttpRequestParser(self)
            self.body: list[bytes] = []

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_body(self, body: bytes) -> None:
            self.body.append(body)

        def on_message_complete(self) -> None:
            self.transport.write(answer)  # type: ignore[attr-defined]
            self.body = []

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Protocol, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wrk(port: int, conc: int, duration: float, cpus: str, body_file: Path) -> int:
    argv = ["taskset", "-c", cpus, "wrk", "-t1", f"-c{conc}", f"-d{int(duration)}s",
            "--timeout", "10s", "-s", str(HERE / "wrk_v2infer.lua"),
            f"http://127.0.0.1:{port}/v2/models/identity/infer"]
    env = dict(os.environ, NAIAD_BENCH_BODY=str(body_file))
    env.pop("NAIAD_BENCH_HEADER_LEN", None)
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=duration + 60)
    for line in out.stdout.splitlines():
        if line.startswith("BENCHJSON "):
            return int(json.loads(line[len("BENCHJSON "):])["requests"])
    raise RuntimeError(f"wrk: {out.stdout[-300:]} {out.stderr[-300:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", default="asgi,protocol")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per point")
    parser.add_argument("--server-cpus", default="0")
    parser.add_argument("--client-cpus", default="1")
    parser.add_argument("--port", type=int, default=18100)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    body_file = Path(tempfile.mkdtemp(prefix="naiad-floor-")) / "request.json"
    body_file.write_text(REQUEST)
    print("| layer | concurrency | req/s | µs CPU per request |\n| --- | --- | --- | --- |")
    for layer in args.layers.split(","):
        server = subprocess.Popen(["taskset", "-c", args.server_cpus, sys.executable,
                                   __file__, "--serve", layer, "--port", str(args.port)])
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(urllib.request.Request(
                        f"http://127.0.0.1:{args.port}/v2/models/identity/infer",
                        data=REQUEST.encode()), timeout=1).read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            for conc in (int(c) for c in args.concurrency.split(",")):
                wrk(args.port, conc, 1, args.client_cpus, body_file)  # warm-up
                before = cpu_ticks(server.pid)
                requests = wrk(args.port, conc, args.duration, args.client_cpus, body_file)
                used = (cpu_ticks(server.pid) - before) / CLK_TCK
                print(f"| {layer} | {conc} | {requests / args.duration:,.0f} | "
                      f"{used / requests * 1e6:.0f} |", flush=True)
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()

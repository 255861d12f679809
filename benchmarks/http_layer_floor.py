"""The floor of an HTTP layer: CPU per request of a server that answers every
``POST /v2/models/identity/infer`` with a fixed JSON body and does nothing else, for the
layers naiad could serve the infer route on:

- ``asgi``: a bare ASGI application on uvicorn (httptools, uvloop), as naiad's ASGI path;
- ``protocol``: a bare httptools protocol on uvloop, as naiad's own protocol
  (``naiad.frontends.http.protocol``);
- ``protocol+worker``: the same protocol, which hands each request's body to a worker
  process over a Unix socket pair (a 4-byte length, then the bytes) and answers when the
  worker sends them back. The worker is a blocking Python loop that does nothing else.
  This is the least any Python server pays whose Python models run in their own processes
  (naiad's default, and Triton's): one HTTP exchange, one round trip to the worker, and
  no work in either;
- ``protocol+worker+v2``: the same, doing the work no V2 server can skip. The server
  decodes the JSON body (orjson), makes the FP32 input a numpy array and sends its bytes;
  the worker makes an array over them and sends its bytes back; the server encodes the
  V2 JSON response from them. No validation, statistics, scheduling or model API.

The server is pinned to ``--server-cpus``, wrk to ``--client-cpus``; the CPU time of the
server process and its children is read from ``/proc/PID/stat`` around each point. Needs
wrk and taskset.

    .venv/bin/python benchmarks/http_layer_floor.py --concurrency 1,8 --duration 5
    .venv/bin/python benchmarks/http_layer_floor.py --layers protocol+worker,protocol+worker+v2
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
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
    import numpy as np
    import orjson

    answer = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
              b"\r\n%s" % (len(BODY), BODY))
    v2 = layer == "protocol+worker+v2"
    worker = _start_worker(v2) if layer.startswith("protocol+worker") else None

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
            if to_worker is None:
                self.transport.write(answer)  # type: ignore[attr-defined]
            else:
                payload = b"".join(self.body)
                shape = None
                if v2:
                    item = orjson.loads(payload)["inputs"][0]
                    shape = item["shape"]
                    payload = np.asarray(item["data"], dtype=np.float32).tobytes()
                waiting.append((self.transport, shape))
                to_worker.write(len(payload).to_bytes(4, "little") + payload)
            self.body = []

    # The HTTP transports whose request is with the worker, in the order they were sent,
    # each with its input's shape (v2) or None.
    waiting: collections.deque[tuple[asyncio.Transport, list[int] | None]] = \
        collections.deque()
    to_worker: asyncio.Transport | None = None

    class FromWorker(asyncio.Protocol):
        def __init__(self) -> None:
            self.buffer = bytearray()

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while len(self.buffer) >= 4:
                end = 4 + int.from_bytes(self.buffer[:4], "little")
                if len(self.buffer) < end:
                    break
                frame = bytes(self.buffer[4:end])
                del self.buffer[:end]
                transport, shape = waiting.popleft()
                if shape is None:
                    transport.write(answer)
                    continue
                body = orjson.dumps({"model_name": "identity", "model_version": "1",
                                     "outputs": [{"name": "OUTPUT0", "datatype": "FP32",
                                                  "shape": shape, "data": np.frombuffer(
                                                      frame, dtype=np.float32).tolist()}]})
                transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                b"content-length: %d\r\n\r\n%s" % (len(body), body))

    async def main() -> None:
        nonlocal to_worker
        loop = asyncio.get_running_loop()
        if worker is not None:
            to_worker, _ = await loop.create_unix_connection(FromWorker, sock=worker)
        server = await loop.create_server(Protocol, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


def _start_worker(arrays: bool) -> socket.socket:
    """Fork the echo worker; the server's end of the socket pair. Forked before the event
    loop starts, so the child has no loop or threads to inherit. ``arrays``: it answers
    the bytes of a numpy FP32 array made over each frame (the v2 layer's model)."""
    import numpy as np

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.fork() == 0:
        ours.close()
        buffer = bytearray()
        while True:
            data = theirs.recv(65536)
            if not data:
                os._exit(0)
            buffer += data
            while len(buffer) >= 4:
                end = 4 + int.from_bytes(buffer[:4], "little")
                if len(buffer) < end:
                    break
                if arrays:
                    output = np.frombuffer(bytes(buffer[4:end]), dtype=np.float32).tobytes()
                    theirs.sendall(len(output).to_bytes(4, "little") + output)
                else:
                    theirs.sendall(bytes(buffer[:end]))
                del buffer[:end]
    theirs.close()
    return ours


def cpu_ticks(pid: int) -> int:
    """User and system ticks of ``pid`` and its children (the worker, for that layer)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(fields[11]) + int(fields[12]) + sum(cpu_ticks(int(c)) for c in children)


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
    from protocol_overhead import idle_states  # here: the --serve child needs none of it

    print(f"CPU idle: {idle_states()}.\n")
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

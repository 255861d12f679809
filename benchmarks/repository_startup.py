#!/usr/bin/env python3
"""Cold start and warm restart of naiad serving a 20-model repository from an S3 bucket
(moto's S3 server on loopback), downloads counted, in one run.

The bucket holds ``--models`` ONNX identity models (FP32 [-1, 16], about 200 bytes each,
plus config.pbtxt): what is measured is the listing, the downloads and the mirror, not the
transfer of big files. Three starts of ``naiad serve --model-repository s3://...`` with the
same ``--repository-cache-dir``:

- **cold**: the cache directory is empty: every file is downloaded;
- **warm**: a restart over the same cache: nothing should be downloaded;
- **local**: the same models from a local folder, the floor (no listing, no mirror).

Printed: seconds from the process start to ``/v2/health/ready`` = 200, and the object GETs
moto served during each start (its request log). Bounded: each start waits at most
``--timeout`` seconds; moto and every server are stopped by PID.

  .venv/bin/python benchmarks/repository_startup.py
  .venv/bin/python benchmarks/repository_startup.py --models 50
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import boto3
import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "core"))

from naiad.testing import ServerProcess  # noqa: E402
from naiad.testing.server import free_port  # noqa: E402

BUCKET = "models"
CONFIG = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""


def identity_onnx() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [None, 16])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [None, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def start_moto(log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                    "-p", str(port)], stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).read()
            return process, endpoint
        except OSError:
            time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    raise RuntimeError("moto did not start")


def object_gets(log_path: Path) -> int:
    """GETs of objects (not listings) in moto's request log so far."""
    return sum(1 for line in log_path.read_text(errors="replace").splitlines()
               if '"GET /' in line and "list-type" not in line and "?" not in
               line.split('"GET ', 1)[1].split(" ", 1)[0])


def timed_start(cmd: list[str], env: dict[str, str], timeout: float) -> float:
    start = time.monotonic()
    with ServerProcess(cmd, env=env, ready_timeout=timeout):
        return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    env = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1"}
    with tempfile.TemporaryDirectory(prefix="naiad-bench-repo-") as tmp:
        root = Path(tmp)
        moto, endpoint = start_moto(root / "moto.log")
        try:
            s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench",
                              aws_secret_access_key="bench", region_name="us-east-1")
            s3.create_bucket(Bucket=BUCKET)
            weights = identity_onnx()
            local = root / "local"
            for i in range(args.models):
                name = f"identity_{i:02d}"
                (local / name / "1").mkdir(parents=True)
                (local / name / "config.pbtxt").write_text(CONFIG.format(name=name))
                (local / name / "1" / "model.onnx").write_bytes(weights)
                s3.put_object(Bucket=BUCKET, Key=f"repo/{name}/config.pbtxt",
                              Body=CONFIG.format(name=name).encode())
                s3.put_object(Bucket=BUCKET, Key=f"repo/{name}/1/model.onnx", Body=weights)
            common = [sys.executable, "-m", "naiad", "serve", "--http-address", "127.0.0.1",
                      "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
                      "--http-port", "{http_port}", "--grpc-port", "{grpc_port}",
                      "--metrics-port", "{metrics_port}"]
            remote = [*common, "--model-repository", f"s3://{endpoint}/{BUCKET}/repo",
                      "--repository-cache-dir", str(root / "cache")]
            rows = []
            for label, cmd in (("cold", remote), ("warm", remote),
                               ("local", [*common, "--model-repository", str(local)])):
                before = object_gets(root / "moto.log")
                seconds = timed_start(cmd, env, args.timeout)
                rows.append((label, seconds, object_gets(root / "moto.log") - before))
        finally:
            os.killpg(moto.pid, signal.SIGTERM)
            moto.wait(20)
    print(f"{args.models} ONNX models, 2 files each, from s3:// (moto on loopback)")
    print(f"{'start':<8} {'seconds to ready':>17} {'objects downloaded':>19}")
    for label, seconds, gets in rows:
        print(f"{label:<8} {seconds:>17.2f} {gets:>19}")
    local_s = rows[2][1]
    print(f"\ncold / local = {rows[0][1] / local_s:.2f}, warm / local = "
          f"{rows[1][1] / local_s:.2f} (the settle listing adds --repository-settle-secs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

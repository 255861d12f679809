#!/usr/bin/env python3
"""Backend overhead: each backend's throughput inside ``naiad serve`` next to the framework's
own in-process throughput, at batch 1 and 16, in the same run (the ratio is the server's cost).

A temporary repository holds ``identity`` (FP32 [-1,16] -> [-1,16]: the call cost alone) and
``mlp`` (FP32 [-1,256] -> 1024 ReLU -> 1024 ReLU -> 10, seeded weights) as ONNX (``onnx_*``,
built with ``onnx.helper``), as TorchScript (``torch_*``), as OpenVINO IR (``openvino_*``,
the ONNX file through ``openvino.convert_model``) and as TensorFlow SavedModels
(``tensorflow_*``, a ``tf.Module``), and ``forest`` (an XGBoost regressor, 100 trees of depth
6 on 32 features, seeded) for the FIL backend (``fil_forest``); ``max_batch_size: 16``, one
CPU instance, one framework thread each. The in-process floor is a child process pinned to
``--server-cpus`` calling an ``InferenceSession`` (1 intra-op, 1 inter-op thread), the loaded
TorchScript module (``torch.set_num_threads(1)``, ``inference_mode``), an OpenVINO infer
request (1 thread, 1 stream), a TensorFlow session (1 intra-op, 1 inter-op thread) or
Treelite's GTIL (1 thread) in a loop, numpy in and out. Then ``naiad serve``, pinned to the
same CPUs, is checked (the exact HTTP and gRPC bytes the load generators send must be
answered as the framework answered in process) and
loaded point by point: ``wrk`` (V2 JSON body of the batch) or ``h2load`` (ModelInferRequest
with raw_input_contents), closed loop, pinned to ``--client-cpus``. ratio = server
inferences/s / in-process inferences/s at the same batch (1.0: the server costs nothing).
Bounded in time; the server is stopped by its process group. Not part of the test suite.

  .venv/bin/python benchmarks/backend_overhead.py --duration 5 --concurrency 1,8
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import payloads  # noqa: E402
import protocol_overhead as po  # noqa: E402

BATCHES = (1, 16)
MAX_BATCH = 16
MLP_IN, HIDDEN, MLP_OUT = 256, 1024, 10
FOREST_FEATURES, FOREST_TREES, FOREST_DEPTH = 32, 100, 6
WIDTH = {"identity": (16, 16), "mlp": (MLP_IN, MLP_OUT),  # (input, output) features
         "forest": (FOREST_FEATURES, 1)}
# backend -> (config backend name, model file, input name, output name, thread parameters)
BACKENDS: dict[str, tuple[str, str, str, str, dict[str, str]]] = {
    "onnx": ("onnxruntime", "model.onnx", "INPUT0", "OUTPUT0",
             {"intra_op_thread_count": "1", "inter_op_thread_count": "1"}),
    "torch": ("pytorch", "model.pt", "INPUT__0", "OUTPUT__0",
              {"INTRA_OP_THREAD_COUNT": "1", "INTER_OP_THREAD_COUNT": "1"}),
    "openvino": ("openvino", "model.xml", "INPUT0", "OUTPUT0",
                 {"INFERENCE_NUM_THREADS": "1", "NUM_STREAMS": "1"}),
    "tensorflow": ("tensorflow", "model.savedmodel", "INPUT0", "OUTPUT0",
                   {"TF_NUM_INTRA_THREADS": "1", "TF_NUM_INTER_THREADS": "1"}),
    "fil": ("fil", "xgboost.json", "input__0", "output__0",
            {"cpu_nthread": "1", "model_type": "xgboost_json", "output_class": "false"}),
}
# The models each backend serves (a forest is FIL's; FIL serves nothing else).
MODELS_OF = {"onnx": ("identity", "mlp"), "torch": ("identity", "mlp"),
             "openvino": ("identity", "mlp"), "tensorflow": ("identity", "mlp"),
             "fil": ("forest",)}


def pairs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(backend, model) for every backend and model asked for that the backend serves."""
    return [(b, m) for b in args.backends for m in args.models if m in MODELS_OF[b]]


# ------------------------------------------------------------------ models
def mlp_weights() -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight [in, out], bias [out]) per layer, seeded, scaled by 1/sqrt(fan_in)."""
    rng = np.random.default_rng(7)
    shapes = [(MLP_IN, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, MLP_OUT)]
    return [((rng.standard_normal(s, dtype=np.float32) / np.sqrt(s[0])).astype(np.float32),
             np.zeros(s[1], np.float32)) for s in shapes]


def numpy_forward(model: str, x: np.ndarray) -> np.ndarray | None:
    """The numpy reference, to check that the frameworks built the same model (None for the
    forest: XGBoost's own prediction is its reference, checked when it is written)."""
    if model == "forest":
        return None
    if model == "identity":
        return x
    layers = mlp_weights()
    for i, (w, b) in enumerate(layers):
        x = x @ w + b
        x = np.maximum(x, 0) if i < len(layers) - 1 else x
    return x


def the_input(model: str) -> np.ndarray:
    """MAX_BATCH rows; a batch-B request sends the first B. Identity's values are multiples
    of 1/64 (exact in any JSON float format); every float32 survives JSON as a double."""
    rng = np.random.default_rng(1)
    shape = (MAX_BATCH, WIDTH[model][0])
    if model == "identity":
        return (rng.integers(-128, 128, size=shape) / 64.0).astype(np.float32)
    return rng.standard_normal(shape, dtype=np.float32)


def write_onnx(model: str, path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n_in, n_out = WIDTH[model]
    x = helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", n_in])
    y = helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", n_out])
    nodes, inits = [], []
    if model == "identity":
        nodes.append(helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"]))
    else:
        layers, prev = mlp_weights(), "INPUT0"
        for i, (w, b) in enumerate(layers):
            inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
            gemm = "OUTPUT0" if i == len(layers) - 1 else f"g{i}"
            nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [gemm]))
            if gemm != "OUTPUT0":
                prev = f"h{i}"
                nodes.append(helper.make_node("Relu", [gemm], [prev]))
    graph = helper.make_graph(nodes, model, [x], [y], initializer=inits)
    # opset 17 / IR 8: old enough for any recent onnxruntime
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))


def write_torch(model: str, path: Path) -> None:
    import torch

    if model == "identity":
        module: torch.nn.Module = torch.nn.Identity()
    else:
        linears = []
        for w, b in mlp_weights():
            lin = torch.nn.Linear(w.shape[0], w.shape[1])
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
                lin.bias.copy_(torch.from_numpy(b))
            linears.append(lin)
        module = torch.nn.Sequential(linears[0], torch.nn.ReLU(), linears[1], torch.nn.ReLU(),
                                     linears[2])
    torch.jit.script(module.eval()).save(str(path))


def write_openvino(model: str, path: Path) -> None:
    """The ONNX model converted to IR, as a Triton user converts one."""
    import openvino as ov

    onnx_path = path.with_suffix(".onnx")
    write_onnx(model, onnx_path)
    ov.save_model(ov.convert_model(str(onnx_path)), str(path))
    onnx_path.unlink()


def write_tensorflow(model: str, path: Path) -> None:
    import tensorflow as tf

    n_in = WIDTH[model][0]
    spec = tf.TensorSpec([None, n_in], tf.float32, name="INPUT0")
    module = tf.Module()
    if model == "identity":
        module.serve = tf.function(lambda x: {"OUTPUT0": tf.identity(x)}, input_signature=[spec])
    else:
        module.layers = [(tf.Variable(w), tf.Variable(b)) for w, b in mlp_weights()]

        def forward(x: Any) -> dict[str, Any]:
            for i, (w, b) in enumerate(module.layers):
                x = tf.matmul(x, w) + b
                x = tf.nn.relu(x) if i < len(module.layers) - 1 else x
            return {"OUTPUT0": x}

        module.serve = tf.function(forward, input_signature=[spec])
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def write_fil(model: str, path: Path) -> None:
    """An XGBoost regressor on seeded data, saved as XGBoost JSON; XGBoost's own prediction
    must equal Treelite's (what FIL and the in-process floor use)."""
    import treelite
    import xgboost as xgb

    rng = np.random.default_rng(11)
    x = rng.standard_normal((4096, FOREST_FEATURES), dtype=np.float32)
    y = x[:, 0] * 2 - x[:, 1] + np.sin(x[:, 2]) + 0.1 * rng.standard_normal(4096)
    regressor = xgb.XGBRegressor(n_estimators=FOREST_TREES, max_depth=FOREST_DEPTH,
                                 n_jobs=1, random_state=0).fit(x, y)
    regressor.save_model(str(path))
    probe = the_input(model)
    gtil = treelite.gtil.predict(treelite.frontend.load_xgboost_model(str(path)), probe)
    if not np.allclose(np.asarray(gtil).reshape(-1), regressor.predict(probe), rtol=1e-4,
                       atol=1e-4):
        raise RuntimeError("Treelite's prediction of the forest differs from XGBoost's")


WRITERS = {"onnx": write_onnx, "torch": write_torch, "openvino": write_openvino,
           "tensorflow": write_tensorflow, "fil": write_fil}


def write_repository(root: Path, backends: list[str], models: list[str]) -> Path:
    repo = root / "model_repository"
    for backend in backends:
        name_in_config, filename, inp, out, threads = BACKENDS[backend]
        for model in (m for m in models if m in MODELS_OF[backend]):
            name = f"{backend}_{model}"
            (repo / name / "1").mkdir(parents=True)
            WRITERS[backend](model, repo / name / "1" / filename)
            params = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
                             for k, v in threads.items())
            (repo / name / "config.pbtxt").write_text(f"""name: "{name}"
backend: "{name_in_config}"
max_batch_size: {MAX_BATCH}
input [ {{ name: "{inp}", data_type: TYPE_FP32, dims: [ {WIDTH[model][0]} ] }} ]
output [ {{ name: "{out}", data_type: TYPE_FP32, dims: [ {WIDTH[model][1]} ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
{params}""")
    return repo


def write_payloads(root: Path, backends: list[str], models: list[str]) -> dict[int, Path]:
    """One folder per batch, holding ``<model name>.json`` / ``.grpc`` (the names run_wrk and
    run_h2load look for)."""
    from tritonclient.grpc import service_pb2

    dirs = {}
    for batch in BATCHES:
        out = dirs[batch] = root / f"payloads-b{batch}"
        out.mkdir(parents=True)
        for backend in backends:
            _, _, inp, outp, _ = BACKENDS[backend]
            for model in (m for m in models if m in MODELS_OF[backend]):
                name, x = f"{backend}_{model}", the_input(model)[:batch]
                (out / f"{name}.json").write_bytes(json.dumps({
                    "inputs": [{"name": inp, "shape": list(x.shape), "datatype": "FP32",
                                "data": x.ravel().tolist()}],
                    "outputs": [{"name": outp, "parameters": {"binary_data": False}}],
                }, separators=(",", ":")).encode())
                req = service_pb2.ModelInferRequest(model_name=name)
                t = req.inputs.add()
                t.name, t.datatype = inp, "FP32"
                t.shape.extend(x.shape)
                req.raw_input_contents.append(x.tobytes())
                req.outputs.add().name = outp
                (out / f"{name}.grpc").write_bytes(payloads.grpc_frame(req.SerializeToString()))
    return dirs


# ------------------------------------------------------------------ in-process floor
def inproc_child(spec: dict[str, Any]) -> None:
    """Runs pinned, in its own process: each model of one backend at each batch, in a loop
    for spec["seconds"]; saves the outputs for the check and prints inferences/s as JSON."""
    backend, repo, seconds = spec["backend"], Path(spec["repo"]), spec["seconds"]
    result: dict[str, dict[str, float]] = {}
    for model in (m for m in spec["models"] if m in MODELS_OF[backend]):
        path = repo / f"{backend}_{model}" / "1" / BACKENDS[backend][1]
        if backend == "openvino":
            import openvino as ov

            compiled = ov.Core().compile_model(
                str(path), "CPU", {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1})
            request = compiled.create_infer_request()

            def call(x: np.ndarray, request: Any = request) -> np.ndarray:
                request.infer({"INPUT0": x})
                return np.array(request.get_output_tensor(0).data, copy=True)
        elif backend == "tensorflow":
            import tensorflow as tf

            graph = tf.Graph()
            session = tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(
                intra_op_parallelism_threads=1, inter_op_parallelism_threads=1))
            with graph.as_default():
                meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(path))
            signature = meta.signature_def["serving_default"]
            feed, fetch = signature.inputs["INPUT0"].name, signature.outputs["OUTPUT0"].name

            def call(x: np.ndarray, session: Any = session, feed: str = feed,
                     fetch: str = fetch) -> np.ndarray:
                return session.run(fetch, {feed: x})
        elif backend == "fil":
            import treelite

            forest = treelite.frontend.load_xgboost_model(str(path))

            def call(x: np.ndarray, forest: Any = forest) -> np.ndarray:
                # FIL's answer: FP32, the [batch, 1] column squeezed to [batch]
                return np.asarray(treelite.gtil.predict(forest, x, nthread=1),
                                  dtype=np.float32).reshape(-1)
        elif backend == "onnx":
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            session = ort.InferenceSession(str(path), options,
                                           providers=["CPUExecutionProvider"])

            def call(x: np.ndarray, session: Any = session) -> np.ndarray:
                return session.run(None, {"INPUT0": x})[0]
        else:
            import torch

            torch.set_num_threads(1)
            module = torch.jit.load(str(path), map_location="cpu").eval()

            def call(x: np.ndarray, module: Any = module) -> np.ndarray:
                with torch.inference_mode():
                    return module(torch.from_numpy(x)).numpy()
        result[model] = {}
        for batch in BATCHES:
            x = np.ascontiguousarray(the_input(model)[:batch])
            for _ in range(20):  # warm-up (TorchScript's profiling executor runs first)
                y = call(x)
            np.save(Path(spec["out"]) / f"{backend}_{model}-b{batch}.npy", y)
            calls, start = 0, time.perf_counter()
            deadline = start + seconds
            while time.perf_counter() < deadline:
                for _ in range(10):
                    call(x)
                calls += 10
            result[model][str(batch)] = calls * batch / (time.perf_counter() - start)
    print("INPROC " + json.dumps(result), flush=True)


def measure_inproc(args: argparse.Namespace, repo: Path, out: Path, rnd: int
                   ) -> list[dict[str, Any]]:
    """In-process inferences/s of every backend, model and batch (one child per backend)."""
    rows = []
    for backend in args.backends:
        spec = {"backend": backend, "repo": str(repo), "models": args.models,
                "seconds": args.inproc_seconds, "out": str(out)}
        argv = [sys.executable, str(Path(__file__).resolve()), "--inproc-child",
                json.dumps(spec)]
        if args.server_cpus:
            argv = ["taskset", "-c", args.server_cpus, *argv]
        limit = 120 + 4 * args.inproc_seconds * len(args.models) * len(BATCHES)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=limit,
                           env=dict(os.environ, **po.ONE_THREAD_ENV))
        line = next((s for s in p.stdout.splitlines() if s.startswith("INPROC ")), "")
        if not line:
            raise RuntimeError(f"in-process {backend} failed (rc={p.returncode}): "
                               f"{p.stderr[-500:]}")
        for model, by_batch in json.loads(line[len("INPROC "):]).items():
            for batch, inf_s in by_batch.items():
                rows.append({"backend": backend, "model": model, "batch": int(batch),
                             "round": rnd, "inf_s": inf_s})
                print(f"round {rnd} in-process {backend}_{model} b{batch}: {inf_s:8.0f} inf/s",
                      flush=True)
    return rows


# ------------------------------------------------------------------ correctness
def check(ports: dict[str, int], name: str, batch: int, payload_dir: Path, ref: np.ndarray
          ) -> tuple[str | None, int]:
    """(None or what is wrong, size of the gRPC reply frame h2load receives): the exact bytes
    wrk and h2load send, answered as the framework answered in process."""
    import grpc

    def differs(got: np.ndarray) -> bool:
        return got.shape != ref.shape or not np.allclose(got, ref, rtol=1e-5, atol=1e-5)

    request = urllib.request.Request(
        f"http://127.0.0.1:{ports['http']}/v2/models/{name}/infer",
        data=(payload_dir / f"{name}.json").read_bytes(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            out = json.loads(response.read())["outputs"][0]
        if differs(np.asarray(out["data"], np.float32).reshape(out["shape"])):
            return f"{name} b{batch} http: answer differs from the in-process result", 0
    except Exception as exc:
        return f"{name} b{batch} http: {exc!r}"[:300], 0
    frame = (payload_dir / f"{name}.grpc").read_bytes()
    with grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}") as channel:
        call = channel.unary_unary(payloads.GRPC_INFER_PATH, request_serializer=None,
                                   response_deserializer=None)
        try:
            data = call(frame[5:], timeout=30)
            got = next(iter(payloads.decode_grpc_response(data).values()))
        except Exception as exc:
            return f"{name} b{batch} grpc: {exc!r}"[:300], 0
    if differs(got):
        return f"{name} b{batch} grpc: answer differs from the in-process result", 0
    return None, len(data) + 5


def check_all(args: argparse.Namespace, ports: dict[str, int], dirs: dict[int, Path],
              out: Path) -> tuple[list[str], dict[tuple[str, int], int]]:
    problems, reply_sizes = [], {}
    for backend, model in pairs(args):
        name = f"{backend}_{model}"
        for batch in BATCHES:
            ref = np.load(out / f"{name}-b{batch}.npy")
            want = numpy_forward(model, the_input(model)[:batch])
            if want is not None and not np.allclose(ref, want, rtol=1e-3, atol=1e-3):
                problems.append(f"{name} b{batch}: in-process result differs from numpy")
            problem, reply_sizes[name, batch] = check(ports, name, batch, dirs[batch], ref)
            if problem:
                problems.append(problem)
    return problems, reply_sizes


# ------------------------------------------------------------------ report
def summarize(rows: list[dict[str, Any]], inproc: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over rounds, per load point, next to the in-process median of its batch."""
    floor: dict[tuple, list[float]] = {}
    for r in inproc:
        floor.setdefault((r["backend"], r["model"], r["batch"]), []).append(r["inf_s"])
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        key = (r["backend"], r["model"], r["batch"], r["protocol"], r["concurrency"])
        groups.setdefault(key, []).append(r)
    out = []
    for (backend, model, batch, proto, conc), rs in groups.items():
        s: dict[str, Any] = {"backend": backend, "model": model, "batch": batch,
                             "protocol": proto, "concurrency": conc}
        fl = floor.get((backend, model, batch))
        s["inproc_inf_s"] = statistics.median(fl) if fl else None
        good = [r for r in rs if "error" not in r]
        if not good:
            s["error"] = rs[0].get("error", "?")
        else:
            for k in ("rps", "p50_ms", "p99_ms"):
                s[k] = statistics.median(r[k] for r in good)
            s["inf_s"] = s["rps"] * batch
            s["errors"] = sum(r["errors"] for r in good)
            s["ratio"] = s["inf_s"] / s["inproc_inf_s"] if s["inproc_inf_s"] else None
        out.append(s)
    return out


def markdown_table(summary: list[dict[str, Any]]) -> str:
    head = ["backend", "model", "batch", "protocol", "concurrency", "req/s", "server inf/s",
            "in-process inf/s", "ratio", "p50 ms", "p99 ms", "errors"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summary:
        cells = [s["backend"], s["model"], str(s["batch"]), s["protocol"], str(s["concurrency"])]
        inproc = f"{s['inproc_inf_s']:.0f}" if s["inproc_inf_s"] else "-"
        if "error" in s:
            cells += ["**" + s["error"][:60] + "**", "", inproc, "", "", "", ""]
        else:
            cells += [f"{s['rps']:.0f}", f"{s['inf_s']:.0f}", inproc,
                      f"{s['ratio']:.2f}" if s["ratio"] else "-", f"{s['p50_ms']:.2f}",
                      f"{s['p99_ms']:.2f}", str(s["errors"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------ main
def load_points(args: argparse.Namespace, ports: dict[str, int], dirs: dict[int, Path],
                reply_sizes: dict[tuple[str, int], int], work: Path, rnd: int
                ) -> list[dict[str, Any]]:
    """One round of closed-loop load points on the running server (after a discarded
    warm-up at batch 16, c=8, per model and protocol)."""
    rows = []
    for name, backend, model in ((f"{b}_{m}", b, m) for b, m in pairs(args)):
        for proto in args.protocols:
            def load(conc: int, dur: int, batch: int, proto: str = proto, name: str = name
                     ) -> dict[str, Any]:
                if proto == "http":
                    return po.run_wrk(ports["http"], name, conc, dur, dirs[batch], args)
                return po.run_h2load(ports["grpc"], name, conc, dur, dirs[batch], args,
                                     reply_sizes[name, batch], work)

            if args.warmup > 0:
                load(8, args.warmup, MAX_BATCH)
            for batch in BATCHES:
                for conc in args.concurrency:
                    r = load(conc, args.duration, batch)
                    rows.append(dict(r, backend=backend, model=model, batch=batch,
                                     protocol=proto, concurrency=conc, round=rnd))
                    print(f"round {rnd} {name:<15} b{batch:<2} {proto:<4} c={conc:<3} " + (
                        r["error"] if "error" in r else
                        f"{r['rps']:8.0f} req/s {r['rps'] * batch:8.0f} inf/s  p50 "
                        f"{r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  errors {r['errors']}"),
                        flush=True)
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=5, help="seconds per load point (5)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="seconds of discarded load (batch 16, c=8) per model and protocol")
    ap.add_argument("--inproc-seconds", type=float, default=3,
                    help="seconds of in-process loop per model and batch (3)")
    ap.add_argument("--concurrency", type=po.csv(int), default=[1, 8])
    ap.add_argument("--backends", type=po.csv(), default=list(BACKENDS))
    ap.add_argument("--models", type=po.csv(), default=list(WIDTH))
    ap.add_argument("--protocols", type=po.csv(), default=["http", "grpc"])
    ap.add_argument("--rounds", type=int, default=1, help="repeat everything; median reported")
    ap.add_argument("--naiad", default=po.default_naiad(), help="the naiad executable")
    ap.add_argument("--naiad-arg", action="append", default=[],
                    help="extra argument for naiad serve (repeatable)")
    ap.add_argument("--server-cpus", default="0",
                    help="taskset CPU list of the server and the in-process floor ('' = none)")
    ap.add_argument("--client-cpus", default="1", help="taskset CPU list of wrk/h2load")
    ap.add_argument("--ready-timeout", type=float, default=180)
    ap.add_argument("--json-out", default="", help="write raw rows + summary here")
    ap.add_argument("--inproc-child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inproc_child:
        return args
    for values, known, what in ((args.backends, BACKENDS, "backend"),
                                (args.models, WIDTH, "model"),
                                (args.protocols, ("http", "grpc"), "protocol")):
        for v in values:
            if v not in known:
                ap.error(f"unknown {what} {v} (known: {', '.join(known)})")
    if args.duration < 1:
        ap.error("--duration must be at least 1 (wrk and h2load count whole seconds)")
    for tool in ("wrk", "h2load", "taskset"):
        if not shutil.which(tool):
            ap.error(f"{tool} not found (apt-get install -y wrk nghttp2-client util-linux)")
    args.http_encoding = "json"  # the body run_wrk sends
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.inproc_child:
        inproc_child(json.loads(args.inproc_child))
        return 0
    # SIGTERM unwinds like Ctrl-C, so that the server is stopped (finally block)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="naiad-backend-overhead-"))
    repo = write_repository(work, args.backends, args.models)
    dirs = write_payloads(work, args.backends, args.models)
    ref_dir = work / "inproc"
    ref_dir.mkdir()
    print(f"work folder {work}", flush=True)
    target = po.Target("naiad-uvicorn", "naiad", args.protocols, "uvicorn")
    target.ports = {"http": po.free_port(), "grpc": po.free_port(), "metrics": po.free_port()}
    server = po.Running(target, target.command(args, repo), args, work / "server.log")
    rows: list[dict[str, Any]] = []
    inproc: list[dict[str, Any]] = []
    try:
        names = [f"{b}_{m}" for b, m in pairs(args)]
        problem = po.wait_ready(server, names, args.ready_timeout)
        if problem:
            print(f"server not ready: {problem}", file=sys.stderr)
            return 1
        for rnd in range(1, args.rounds + 1):
            inproc += measure_inproc(args, repo, ref_dir, rnd)  # the server is idle meanwhile
            if rnd == 1:
                problems, reply_sizes = check_all(args, target.ports, dirs, ref_dir)
                if problems:
                    print("check FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
                    return 1
                print("check ok: HTTP and gRPC answers = in-process results", flush=True)
            rows += load_points(args, target.ports, dirs, reply_sizes, work, rnd)
        problems, _ = check_all(args, target.ports, dirs, ref_dir)
        print("post-load check " + ("FAILED:\n  " + "\n  ".join(problems) if problems
                                    else "ok"), flush=True)
    finally:
        server.stop()

    summary = summarize(rows, inproc)
    frameworks = []
    for package in ("onnxruntime", "torch", "onnx", "openvino", "tensorflow", "treelite",
                    "xgboost"):
        with contextlib.suppress(Exception):  # a backend left out need not be installed
            frameworks.append(f"{package} {version(package)}")
    print(f"\n{time.strftime('%Y-%m-%d %H:%M')}, {(time.time() - started) / 60:.1f} min; "
          f"{os.cpu_count()} CPUs, {platform.platform()}; server and in-process floor on "
          f"CPU(s) '{args.server_cpus}', load on '{args.client_cpus}'; {args.rounds} round(s) "
          f"of {args.duration} s points, in-process {args.inproc_seconds:g} s per point.\n"
          f"Versions: {po.versions(args)}; {', '.join(frameworks)}\n")
    print(markdown_table(summary))
    print(f"\nwork folder {work} (server.log)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(
            {"args": vars(args), "rows": rows, "inproc": inproc, "summary": summary},
            indent=1, default=str))
    return 1 if problems or any("error" in s or s.get("errors") for s in summary) else 0


if __name__ == "__main__":
    sys.exit(main())

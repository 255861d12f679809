"""One set of bound models served with PyTriton's API from either package: ``pytriton``
(the real PyTriton 0.7, its own tritonserver) or ``naiad.pytriton``. Used by
test_pytriton_differential.py, which starts it with each and compares what the servers
answer, and benchmarks/pytriton_vs_naiad.py, which loads its ``AddSub``.

    python differential_server.py PACKAGE HTTP_PORT GRPC_PORT METRICS_PORT [MODEL,...]

Binds every model, or those named. Prints ``READY`` once they are loaded; serves until
SIGINT or SIGTERM.

The real PyTriton runs its proxy model in tritonserver's Python stub, which is linked to
``libpython3.11.so.1.0`` by name and takes its standard library from the interpreter that
runs this script. Where that interpreter is not the system's (pyenv, conda), the stub loads
the system's libpython against another patch release's standard library, and PyTriton's
shared-memory tensor store fails to start in it (``'_thread.RLock' object has no attribute
'_recursion_count'``). The interpreter's own library folder goes first on
``LD_LIBRARY_PATH`` (PyTriton passes it on to tritonserver), so the stub loads the matching
libpython, and PyTriton runs with its default transport.
"""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
from pathlib import Path

import numpy as np

package, http_port, grpc_port, metrics_port = sys.argv[1], *map(int, sys.argv[2:5])
wanted = set(sys.argv[5].split(",")) if len(sys.argv) > 5 else None
if package == "pytriton":
    library_folder = sysconfig.get_config_var("LIBDIR")
    if library_folder and (Path(library_folder) / sysconfig.get_config_var("LDLIBRARY")).exists():
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(
            [library_folder, *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
decorators = importlib.import_module(f"{package}.decorators")
model_config = importlib.import_module(f"{package}.model_config")
triton_module = importlib.import_module(f"{package}.triton")
Tensor, ModelConfig = model_config.Tensor, model_config.ModelConfig


@decorators.batch
def add_sub(a, b):
    return {"add": a + b, "sub": a - b}


@decorators.batch
def identity(**inputs):
    return {"OUTPUT_1": inputs["INPUT_1"], "OUTPUT_2": inputs["INPUT_2"]}


@decorators.sample
def scale(x):
    return {"y": (x * 3).astype(np.int64)}


@decorators.batch
def count_up(n):
    for i in range(int(n[0][0])):
        yield {"i": np.full_like(n, i)}


config = triton_module.TritonConfig(http_port=http_port, grpc_port=grpc_port,
                                    metrics_port=metrics_port, http_address="127.0.0.1",
                                    grpc_address="127.0.0.1", metrics_address="127.0.0.1")
BINDINGS = {
    "AddSub": dict(infer_func=add_sub,
                   inputs=[Tensor(name="a", dtype=np.float32, shape=(-1,)),
                           Tensor(name="b", dtype=np.float32, shape=(-1,))],
                   outputs=[Tensor(name="add", dtype=np.float32, shape=(-1,)),
                            Tensor(name="sub", dtype=np.float32, shape=(-1,))],
                   config=ModelConfig(max_batch_size=64, batcher=model_config.DynamicBatcher(
                       max_queue_delay_microseconds=200, preferred_batch_size=[8, 16])),
                   strict=True),
    "Identity": dict(infer_func=identity,
                     inputs=[Tensor(dtype=np.float64, shape=(-1,)),
                             Tensor(dtype=object, shape=(1,))],
                     outputs=[Tensor(dtype=np.float64, shape=(-1,)),
                              Tensor(dtype=object, shape=(1,))],
                     config=ModelConfig(max_batch_size=8)),
    "Scale": dict(infer_func=[scale, scale], inputs=[Tensor(name="x", dtype=np.int32, shape=(2,))],
                  outputs=[Tensor(name="y", dtype=np.int64, shape=(2,))],
                  config=ModelConfig(batching=False, response_cache=False)),
    "CountUp": dict(infer_func=count_up, inputs=[Tensor(name="n", dtype=np.int32, shape=(1,))],
                    outputs=[Tensor(name="i", dtype=np.int32, shape=(1,))],
                    config=ModelConfig(decoupled=True)),
}
if wanted is not None and not wanted <= set(BINDINGS):
    sys.exit(f"unknown model(s) {sorted(wanted - set(BINDINGS))}: expected some of "
             f"{sorted(BINDINGS)}")

with triton_module.Triton(config=config) as triton:
    for name, binding in BINDINGS.items():
        if wanted is None or name in wanted:
            triton.bind(name, **binding)
    print("READY", flush=True)
    triton.serve()

"""One set of bound models served with PyTriton's API from either package: ``pytriton``
(the real PyTriton 0.7, its own tritonserver) or ``naiad.pytriton``. Used by
test_differential.py, which starts it with each and compares what the servers answer.

    python differential_server.py PACKAGE HTTP_PORT GRPC_PORT METRICS_PORT

Prints ``READY`` once every model is loaded; serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np

package, http_port, grpc_port, metrics_port = sys.argv[1], *map(int, sys.argv[2:5])
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
with triton_module.Triton(config=config) as triton:
    triton.bind("AddSub", add_sub,
                inputs=[Tensor(name="a", dtype=np.float32, shape=(-1,)),
                        Tensor(name="b", dtype=np.float32, shape=(-1,))],
                outputs=[Tensor(name="add", dtype=np.float32, shape=(-1,)),
                         Tensor(name="sub", dtype=np.float32, shape=(-1,))],
                config=ModelConfig(max_batch_size=64, batcher=model_config.DynamicBatcher(
                    max_queue_delay_microseconds=200, preferred_batch_size=[8, 16])),
                strict=True)
    triton.bind("Identity", identity,
                inputs=[Tensor(dtype=np.float64, shape=(-1,)), Tensor(dtype=object, shape=(1,))],
                outputs=[Tensor(dtype=np.float64, shape=(-1,)),
                         Tensor(dtype=object, shape=(1,))],
                config=ModelConfig(max_batch_size=8))
    triton.bind("Scale", [scale, scale], inputs=[Tensor(name="x", dtype=np.int32, shape=(2,))],
                outputs=[Tensor(name="y", dtype=np.int64, shape=(2,))],
                config=ModelConfig(batching=False, response_cache=False))
    triton.bind("CountUp", count_up, inputs=[Tensor(name="n", dtype=np.int32, shape=(1,))],
                outputs=[Tensor(name="i", dtype=np.int32, shape=(1,))],
                config=ModelConfig(decoupled=True))
    print("READY", flush=True)
    triton.serve()

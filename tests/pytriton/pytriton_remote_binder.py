"""The real PyTriton 0.7's RemoteTriton, unmodified, binding a model into the server at
``URL`` (run with .venv/pytriton's interpreter by test_pytriton_remote.py).

    python pytriton_remote_binder.py URL

Prints ``BOUND`` once the model is loaded; serves until SIGINT, then unloads it.
"""

import sys

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import RemoteTriton


@batch
def _mul(**inputs):
    a_batch, b_batch = inputs.values()
    return {"mul": np.multiply(a_batch, b_batch)}


with RemoteTriton(url=sys.argv[1]) as remote_triton:
    remote_triton.bind(
        model_name="Mul",
        infer_func=_mul,
        inputs=[Tensor(dtype=np.float32, shape=(-1,)), Tensor(dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(name="mul", dtype=np.float32, shape=(-1,))],
        config=ModelConfig(max_batch_size=128),
    )
    print("BOUND", flush=True)
    remote_triton.serve()

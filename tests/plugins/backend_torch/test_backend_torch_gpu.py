"""PyTorch models on a GPU (KIND_GPU -> cuda:N). Skipped on machines without CUDA."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from backend_torch_helpers import SCRIPT_IS_DEPRECATED, AddSub, export_mlp, write

from naiad.testing import ServerProcess, naiad_server

pytestmark = [
    pytest.mark.filterwarnings(SCRIPT_IS_DEPRECATED),
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA device and a CUDA build of torch "
                              "(torch.cuda.is_available() is False)"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("torch-gpu-repo")
    write(repo, "add_sub_gpu", """
        platform: "pytorch_libtorch"
        max_batch_size: 8
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] },
                { name: "INPUT__1" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] },
                 { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ -1 ] } ]
        instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ] } ]
        parameters { key: "ENABLE_CACHE_CLEANING" value { string_value: "true" } }
    """, torch.jit.script(AddSub()))
    write(repo, "export_gpu", """
        backend: "pytorch"
        max_batch_size: 4
        input [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]
    """, export_mlp(), filename="model.pt2")
    with naiad_server("--model-repository", str(repo)) as process:
        yield process


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_add_sub_on_the_gpu(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http"
                                          else server.grpc_url)
    a = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    tensors = []
    for name, array in (("INPUT__0", a), ("INPUT__1", b)):
        tensor = module.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = client.infer("add_sub_gpu", tensors)
    want = AddSub().cuda()(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda())
    torch.testing.assert_close(torch.tensor(result.as_numpy("OUTPUT__0")), want[0].cpu())
    torch.testing.assert_close(torch.tensor(result.as_numpy("OUTPUT__1")), want[1].cpu())


def test_exported_program_on_the_gpu(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    tensor = grpcclient.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("export_gpu", [tensor])
    want = export_mlp().module()(torch.from_numpy(x))
    torch.testing.assert_close(torch.tensor(result.as_numpy("OUTPUT__0")), want,
                               rtol=1e-4, atol=1e-5)

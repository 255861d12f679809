"""Deploying a model over the load API (``config`` plus ``file:<path>`` parameters), both
servers: a Python model that is not in the repository, over HTTP (base64) and gRPC (bytes),
then the requests that must fail. Tests depend on their order (file order).

Deliberate differences (off in the self-test): Triton answers 500 / INTERNAL ("failed to
poll from model repository") to files without ``config``, to a name with ``..`` or no name,
and to a reload of a model that only exists deployed; naiad answers a 4xx / client error
naming the model and the parameter. Triton writes an absolute ``file:/x`` inside its folder
and decodes invalid base64 leniently; naiad refuses both (docs/compatibility.md).
"""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from compat_helpers import (
    MODEL_REPOSITORY,
    Case,
    both,
    check_error,
    check_infer,
    compare_index,
    grpc_call,
    http_request,
    on_both,
)
from test_compat_model_control import INFER, settled_index

pytestmark = pytest.mark.compat

COMPAT_SERVER_ARGS = ["--model-control-mode", "explicit", "--load-model", "add_sub"]
COMPAT_EXPECT_READY = ("add_sub",)

MODEL_PY = (MODEL_REPOSITORY / "add_sub" / "1" / "model.py").read_bytes()
# add_sub's configuration as the JSON a client sends (Triton's ModelConfig fields).
CONFIG = json.dumps({
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
              {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
               {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
})
# A file that must never appear: where a "file:../..." name would put it on either server
# (Triton stages in <tmp>/folderXXXXXX, naiad in <tmp>/naiad-staging-*/load-*/<model>).
ESCAPE = "escape_compat_deploy.txt"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def load_case(case_id: str, model: str, parameters: dict[str, Any], **options: Any) -> Case:
    return Case(case_id, "POST", f"/v2/repository/models/{model}/load",
                {"parameters": parameters}, model=model, **options)


def compare_settled_index(servers: Any, strict: bool) -> None:
    compare_index(*on_both(settled_index, servers.triton, servers.naiad), strict)


def ready_statuses(servers: Any, path: str) -> tuple[int, int]:
    t, n = both(servers, Case("ready", "GET", path))
    return t.status, n.status


def escaped_files() -> list[Path]:
    tmp = Path(tempfile.gettempdir())
    found: list[Path] = []
    for pattern in (ESCAPE, f"*/{ESCAPE}", f"*/*/{ESCAPE}"):
        for _ in range(10):
            try:
                found += list(tmp.glob(pattern))
                break
            except FileNotFoundError:  # another test's temporary folder went meanwhile
                continue
    return found


def test_deploy_a_python_model_over_http(servers: Any, strict: bool) -> None:
    t, n = both(servers, load_case("deploy", "deployed",
                                   {"config": CONFIG, "file:1/model.py": b64(MODEL_PY)}))
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    check_infer(*both(servers, Case("infer", "POST", "/v2/models/deployed/infer", INFER)))
    t, n = both(servers, Case("config", "GET", "/v2/models/deployed/config"))
    assert (t.status, n.status) == (200, 200)
    assert t.json()["name"] == n.json()["name"] == "deployed"
    # Neither lists a model that only exists deployed in the repository index.
    compare_settled_index(servers, strict)


def test_empty_and_dot_path_components_are_dropped(servers: Any, strict: bool) -> None:
    t, n = both(servers, load_case("normalized", "normalized",
                                   {"config": CONFIG, "file:./1//model.py": b64(MODEL_PY)}))
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    check_infer(*both(servers, Case("infer", "POST", "/v2/models/normalized/infer", INFER)))


def test_deploy_a_python_model_over_grpc(servers: Any, strict: bool) -> None:
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as pbg

    request = pb.RepositoryModelLoadRequest(model_name="deployed_grpc")
    request.parameters["config"].string_param = CONFIG
    request.parameters["file:1/model.py"].bytes_param = MODEL_PY
    bad_type = pb.RepositoryModelLoadRequest(model_name="deployed_grpc_str")
    bad_type.parameters["config"].string_param = CONFIG
    bad_type.parameters["file:1/model.py"].string_param = MODEL_PY.decode()

    def calls(server: Any) -> list[Any]:
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = pbg.GRPCInferenceServiceStub(channel)
            return [grpc_call(stub, "RepositoryModelLoad", request),
                    grpc_call(stub, "RepositoryModelLoad", bad_type)]

    (t_good, t_bad), (n_good, n_bad) = on_both(calls, servers.triton, servers.naiad)
    assert t_good.code == n_good.code == "OK", f"triton {t_good!r}, naiad {n_good!r}"
    assert t_bad.code == n_bad.code == "INVALID_ARGUMENT", f"triton {t_bad!r}, naiad {n_bad!r}"
    assert "expected bytes_param" in n_bad.details
    check_infer(*both(servers, Case("infer", "POST", "/v2/models/deployed_grpc/infer", INFER)))


@pytest.mark.parametrize("case", [
    load_case("files-without-config", "add_sub", {"file:1/model.py": b64(MODEL_PY)},
              triton_500=True, must_contain="'config' parameter is required").param(),
    load_case("dotdot", "escaper", {"config": CONFIG, "file:1/model.py": b64(MODEL_PY),
                                    f"file:../../{ESCAPE}": b64(b"x")},
              triton_500=True, must_contain="leaves the model folder").param(),
    load_case("empty-name", "escaper", {"config": CONFIG, "file:1/model.py": b64(MODEL_PY),
                                        "file:": b64(b"x")},
              triton_500=True, must_contain="names no file").param(),
    load_case("folder-name", "escaper", {"config": CONFIG, "file:1/": b64(MODEL_PY)},
              triton_500=True, must_contain="names a folder").param(),
    load_case("bad-config", "escaper", {"config": "{not json", "file:1/model.py": b64(MODEL_PY)},
              triton_500=True).param(),
    # Triton decodes it into garbage, the model fails to load: 400 from both.
    load_case("not-base64", "escaper", {"config": CONFIG, "file:1/model.py": "!!!notbase64"},
              must_contain="'file:1/model.py'").param(),
    load_case("number-content", "escaper", {"config": CONFIG, "file:1/model.py": 5},
              triton_500=True, must_contain="'file:1/model.py'").param(),
    # A model that only exists deployed is not in the repository.
    load_case("reload-deployed-bare", "deployed", {}, triton_500=True).param(),
])
def test_bad_deploy_requests_fail_and_change_nothing(servers: Any, strict: bool,
                                                     case: Case) -> None:
    check_error(case, *both(servers, case), strict)
    assert escaped_files() == []
    # What served before serves still.
    assert ready_statuses(servers, "/v2/models/add_sub/ready") == (200, 200)
    assert ready_statuses(servers, "/v2/models/deployed/ready") == (200, 200)
    assert ready_statuses(servers, "/v2/models/escaper/ready") == (400, 400)
    compare_settled_index(servers, strict)


def test_an_absolute_name_is_refused_by_naiad(servers: Any, strict: bool) -> None:
    """Triton writes ``file:/x`` inside its folder (as ``x``) and loads; naiad refuses it."""
    target = Path(tempfile.gettempdir()) / ESCAPE
    case = load_case("absolute", "absolute_name",
                     {"config": CONFIG, "file:1/model.py": b64(MODEL_PY),
                      f"file:{target}": b64(b"x")})
    t, n = both(servers, case)
    assert not target.exists()
    if strict:
        assert t.status == 200, f"Triton no longer accepts an absolute name ({t!r})"
        assert n.status == 400 and "is an absolute path" in n.json()["error"], n


def test_deploying_over_a_repository_model_then_a_plain_load(servers: Any,
                                                            strict: bool) -> None:
    # The files make up the whole model folder: version 2 only.
    t, n = both(servers, load_case("override", "add_sub",
                                   {"config": CONFIG, "file:2/model.py": b64(MODEL_PY)}))
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    compare_settled_index(servers, strict)
    assert ready_statuses(servers, "/v2/models/add_sub/versions/1/ready") == (400, 400)
    assert ready_statuses(servers, "/v2/models/add_sub/versions/2/ready") == (200, 200)
    check_infer(*both(servers, Case("infer", "POST", "/v2/models/add_sub/infer", INFER)))
    # A load without files reads the repository again.
    t, n = both(servers, Case("load", "POST", "/v2/repository/models/add_sub/load", {}))
    assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    compare_settled_index(servers, strict)
    assert ready_statuses(servers, "/v2/models/add_sub/versions/1/ready") == (200, 200)
    assert ready_statuses(servers, "/v2/models/add_sub/versions/2/ready") == (400, 400)


def test_unloading_a_deployed_model(servers: Any, strict: bool) -> None:
    for model in ("deployed", "deployed_grpc", "absolute_name", "normalized"):
        t, n = both(servers, Case("unload", "POST", f"/v2/repository/models/{model}/unload",
                                  {}))
        assert (t.status, n.status) == (200, 200), f"triton {t!r}, naiad {n!r}"
    assert ready_statuses(servers, "/v2/models/deployed/ready") == (400, 400)
    compare_settled_index(servers, strict)
    res = http_request(servers.naiad.http_port, "POST", "/v2/repository/index", {})
    names = {m["name"] for m in res.json()}
    assert not names & {"deployed", "deployed_grpc", "absolute_name", "normalized"}, res

"""naiad.pytriton against PyTriton 0.7's public API: every public name of PyTriton's
user-facing modules exists in naiad.pytriton with PyTriton's parameter names, or is listed
here as PyTriton's internals; what naiad.pytriton does not support raises an error naming
it where it is used; and the small parts added for the API (the clients' get_lib and
create_client_from_url, constants, warnings, Workspace, the telemetry hooks) behave as
PyTriton's do.

The name check reads the real PyTriton from .venv/pytriton (scripts/test installs it) and
skips without it."""

from __future__ import annotations

import asyncio
import importlib
import json
import pathlib
import subprocess
import warnings
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTRITON_PYTHON = ROOT / ".venv" / "pytriton" / "bin" / "python"
LISTING_TIMEOUT_S = 120.0
# PyTriton's modules a program imports from (its docs' API reference and its examples).
MODULES = ["triton", "model_config", "decorators", "client", "client.exceptions",
           "client.warnings", "exceptions", "proxy.types", "proxy.telemetry", "constants",
           "utils.workspace"]
# Public names of those modules that are PyTriton's machinery for its own tritonserver,
# proxy and model store (imported into its triton module), not API a program calls.
INTERNALS = {
    "triton": {"ModelManager", "ModelEvent", "PythonBackendConfig", "TritonServer",
               "TritonServerConfig", "get_libs_path", "get_root_module_path", "get_stub_path",
               "kwonly_dataclass", "create_client_from_url", "WAIT_FORM_MODEL_TIMEOUT_S",
               "GROWTH_BACKEND_SHM_SIZE", "INITIAL_BACKEND_SHM_SIZE", "MODEL_URL",
               "MODEL_READY_URL", "MODEL_CONFIG_URL", "MODEL_INFER_URL",
               "Model"},   # what bind() builds for its proxy; naiad's is its own
    "decorators": {"start_span_from_span"},
    "proxy.telemetry": {"TracableModel", "end_span", "get_span_dict", "parse_trace_config",
                        "raise_if_no_telemetry", "start_span_from_remote",
                        "start_span_from_span"},
    "utils.workspace": {"CleanupWarning"},
}
# PyTriton's decorators are wrapt decorators: their signature is wrapt's factory
# (wrapper, enabled, adapter, proxy); a program applies them bare, as naiad's are.
WRAPT_DECORATORS = {"batch", "group_by_keys", "pad_batch", "sample", "triton_context"}
_LISTING = '''
import importlib, inspect, json, sys
prefix, modules = sys.argv[1], sys.argv[2:]
DUNDERS = ("__init__", "__call__", "__enter__", "__exit__", "__aenter__", "__aexit__")
def params(obj):
    try:
        found = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return None
    return [p.name for p in found if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and p.name != "self"]
listing = {}
for name in modules:
    module = importlib.import_module(prefix + "." + name)
    entries = {}
    for attr in getattr(module, "__all__", None) or dir(module):
        obj = getattr(module, attr, None)
        if attr.startswith("_") or inspect.ismodule(obj):
            continue
        origin = getattr(obj, "__module__", None) or ""
        if not origin.startswith(prefix) and not isinstance(obj, (str, int, float)):
            continue
        entries[attr] = params(obj) if callable(obj) else "value"
        if inspect.isclass(obj):
            for member, value in inspect.getmembers(obj):
                if member.startswith("_") and member not in DUNDERS:
                    continue
                entries[attr + "." + member] = (
                    "property" if isinstance(value, property) else
                    params(value) if callable(value) else "value")
    listing[name] = entries
print(json.dumps(listing))
'''


def _listing(python: str, prefix: str) -> dict[str, dict[str, Any]]:
    done = subprocess.run([python, "-c", _LISTING, prefix, *MODULES], capture_output=True,
                          text=True, timeout=LISTING_TIMEOUT_S, check=True)
    return json.loads(done.stdout)


def test_every_public_name_of_pytriton_is_in_naiad_pytriton_with_its_parameters() -> None:
    if not PYTRITON_PYTHON.exists():
        pytest.skip(f"the real PyTriton 0.7 is not installed at {PYTRITON_PYTHON} "
                    "(scripts/test installs it)")
    import sys

    theirs = _listing(str(PYTRITON_PYTHON), "pytriton")
    ours = _listing(sys.executable, "naiad.pytriton")
    gaps = []
    for module, entries in theirs.items():
        for name, their_params in entries.items():
            if name in INTERNALS.get(module, set()) \
                    or name.split(".")[0] in INTERNALS.get(module, set()):
                continue
            if name not in ours[module]:
                gaps.append(f"{module}.{name}: missing")
                continue
            our_params = ours[module][name]
            if isinstance(their_params, list) and isinstance(our_params, list) \
                    and not name.endswith("__") and name not in WRAPT_DECORATORS \
                    and not set(their_params) <= set(our_params):
                gaps.append(f"{module}.{name}: parameters {their_params}, ours {our_params}")
    assert not gaps, "\n".join(gaps)


def test_telemetry_hooks_raise_or_run_untraced() -> None:
    from naiad.pytriton.exceptions import PyTritonNotSupportedError
    from naiad.pytriton.proxy.telemetry import traced_span
    from naiad.pytriton.proxy.types import Request
    from naiad.pytriton.triton import (
        build_proxy_tracer_from_triton_config,
        get_telemetry_tracer,
        set_telemetry_tracer,
    )

    with pytest.raises(PyTritonNotSupportedError, match="set_telemetry_tracer is not supported"):
        set_telemetry_tracer(object())
    with pytest.raises(PyTritonNotSupportedError, match="build_proxy_tracer_from_triton_config"):
        build_proxy_tracer_from_triton_config(["mode=opentelemetry"])
    assert get_telemetry_tracer() is None
    request = Request(data={})
    ran = []
    with request.traced_span("step"):
        ran.append(1)
    with traced_span(request, "step"):
        ran.append(2)
    assert ran == [1, 2]
    with pytest.raises(PyTritonNotSupportedError, match="traced_span"), \
            traced_span(Request(data={}, span=object()), "step"):
        pass


def test_clients_give_tritonclient_libs_and_clients_as_pytriton_does() -> None:
    import tritonclient.grpc
    import tritonclient.grpc.aio
    import tritonclient.http
    import tritonclient.http.aio

    from naiad.pytriton.client import AsyncioModelClient, ModelClient
    from naiad.pytriton.client.warnings import NotSupportedTimeoutWarning, PyTritonWarning

    assert issubclass(NotSupportedTimeoutWarning, PyTritonWarning)
    assert issubclass(PyTritonWarning, UserWarning)
    # Nothing connects before a call: no server is needed.
    http = ModelClient("http://127.0.0.1:1", "M", inference_timeout_s=7.0)
    grpc = ModelClient("grpc://127.0.0.1:2", "M")
    assert (http.get_lib(), grpc.get_lib()) == (tritonclient.http, tritonclient.grpc)
    made = http.create_client_from_url("127.0.0.1:3", network_timeout_s=2.5)
    assert isinstance(made, tritonclient.http.InferenceServerClient)
    pool = made._client_stub._connection_pool   # tritonclient.http over geventhttpclient
    assert (pool._connection_port, pool.network_timeout, pool.connection_timeout) == (3, 2.5, 2.5)
    made.close()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        made = http.create_client_from_url("grpc://127.0.0.1:4")
    assert isinstance(made, tritonclient.grpc.InferenceServerClient)
    assert [w.category for w in seen] == [NotSupportedTimeoutWarning]
    made.close()
    assert http._triton_url.port == 1   # the client keeps its own URL
    http.close()
    grpc.close()

    async def asyncio_client() -> None:
        client = AsyncioModelClient("grpc://127.0.0.1:5", "M", inference_timeout_s=3.0)
        assert client.get_lib() is tritonclient.grpc.aio
        copy = AsyncioModelClient.from_existing_client(client)
        assert isinstance(copy, AsyncioModelClient) and copy._client._triton_url.port == 5
        assert copy._client._inference_timeout_s == 3.0
        made = copy.create_client_from_url("http://127.0.0.1:6")
        assert isinstance(made, tritonclient.http.aio.InferenceServerClient)
        assert made._stub._timeout.total == 3.0   # aiohttp session: the inference timeout
        await made.close()
        await copy.close()
        await client.close()

    asyncio.run(asyncio_client())


def test_constants_and_workspace_are_pytritons(tmp_path: pathlib.Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTRITON_HOME", str(tmp_path / "home"))
    import naiad.pytriton.constants as constants

    constants = importlib.reload(constants)
    assert (constants.DEFAULT_HTTP_PORT, constants.DEFAULT_GRPC_PORT,
            constants.DEFAULT_METRICS_PORT) == (8000, 8001, 8002)
    assert (tmp_path / "home").resolve() == constants.PYTRITON_HOME
    from naiad.pytriton.utils.workspace import Workspace

    made = Workspace()
    assert made.path.parent == constants.PYTRITON_HOME
    assert made.path.name.startswith("workspace_")
    assert made.exists() and made.is_empty() is False   # its model-store folder
    made.clean()
    assert not made.exists()
    (tmp_path / "given").mkdir()   # a folder of the caller's: emptied, kept
    given = Workspace(tmp_path / "given")
    (given.path / ".hidden").touch()
    given.clean()
    assert given.path.exists() and given.is_empty()
    monkeypatch.undo()
    importlib.reload(constants)   # back to the environment's home for later tests


def test_pytritons_check_tool_says_it_is_not_supported() -> None:
    import sys

    with pytest.raises(ImportError, match=r"pytriton\.check is not supported"):
        importlib.import_module("naiad.pytriton.check.utils")
    done = subprocess.run([sys.executable, "-m", "naiad.pytriton", "check"],
                          capture_output=True, text=True, timeout=LISTING_TIMEOUT_S)
    assert done.returncode == 2
    assert "`pytriton check`) is not supported by naiad.pytriton" in done.stderr

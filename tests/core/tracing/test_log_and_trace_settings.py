"""The logging extension (read and change the log switches while serving) and the trace
extension (read and change the trace settings, globally and per model, as Triton 2.51
does: tests/compat/TRITON_OBSERVED.md, "Tracing"), over HTTP and gRPC, with tritonclient
against a real server."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.testing import naiad_server

DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
            "log_verbose_level": 0, "log_format": "default"}


def http_settings(server) -> dict:
    with httpclient.InferenceServerClient(server.http_url) as client:
        return client.get_log_settings()


def grpc_settings(server) -> dict:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        settings = client.get_log_settings(as_json=True)["settings"]
    return {key: next(iter(value.values())) for key, value in settings.items()}


@pytest.fixture(scope="module")
def log_server(tmp_path_factory):
    """One server for the log tests (a start per test cost about 5 s each): what it reports
    before any test changes a setting is kept as ``started_with`` (HTTP, gRPC)."""
    repo = tmp_path_factory.mktemp("log-settings")
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      "--load-model=add_sub") as process:
        process.started_with = (http_settings(process), grpc_settings(process))
        yield process


@pytest.fixture
def server(log_server):
    """The shared log server, put back as it started after each test: the switches at
    their flags' values and add_sub loaded (a test that fails half-way included)."""
    yield log_server
    with httpclient.InferenceServerClient(log_server.http_url) as client:
        client.update_log_settings({key: value for key, value in DEFAULTS.items()
                                    if key not in ("log_file", "log_format")})
        if not client.is_model_ready("add_sub"):
            client.load_model("add_sub")
    assert http_settings(log_server) == DEFAULTS


def test_both_protocols_report_the_flags(server):
    http, grpc = server.started_with
    assert http == DEFAULTS
    assert grpc == {**DEFAULTS, "log_file": grpc.get("log_file", "")}  # "" is left out
    assert http_settings(server) == DEFAULTS


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_change_applies_to_the_log_at_once(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    before = len(server.log())  # the shared server's log so far: earlier tests' lines

    def log() -> str:
        return server.log()[before:]

    with module.InferenceServerClient(url) as client:
        client.update_log_settings({"log_info": False})
        assert http_settings(server)["log_info"] is False
        client.unload_model("add_sub")  # logged at INFO: must not appear
        client.update_log_settings({"log_info": True, "log_verbose_level": 1})
        assert grpc_settings(server)["log_verbose_level"] == 1
        client.load_model("add_sub")  # logged at INFO: must appear
    deadline = time.monotonic() + 10
    while "loaded model 'add_sub' version 1" not in log():
        assert time.monotonic() < deadline, server.log()[-2000:]
        time.sleep(0.05)
    assert "unloaded model 'add_sub'" not in log()


# tritonclient.grpc types each value itself (a string can only be a string): the wrong types
# go over HTTP only.
@pytest.mark.parametrize(("settings", "fragment", "over_grpc"), [
    ({"log_info": "yes"}, "'log_info' must be a boolean", False),
    ({"log_verbose_level": -1}, "non-negative integer", False),
    ({"log_format": "ISO8601"}, "fixed at start-up (--log-format)", True),
    ({"log_file": "/tmp/x.log"}, "fixed at start-up (--log-file)", True),
])
def test_bad_changes_are_refused_and_change_nothing(server, settings, fragment, over_grpc):
    with httpclient.InferenceServerClient(server.http_url) as client, \
            pytest.raises(InferenceServerException) as info:
        client.update_log_settings(settings)
    assert info.value.status() == "400" and fragment in info.value.message()
    if over_grpc:
        with grpcclient.InferenceServerClient(server.grpc_url) as client, \
                pytest.raises(InferenceServerException) as info:
            client.update_log_settings(settings)
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert fragment in info.value.message()
    assert http_settings(server) == DEFAULTS


def test_unknown_settings_are_ignored_as_in_triton(server):
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert client.update_log_settings({"nope": 1}) == DEFAULTS


TRACE_DEFAULTS = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                  "log_frequency": "0", "trace_file": "", "trace_mode": "triton"}


def grpc_trace(client, model: str = "", **changes) -> dict:
    """The settings as tritonclient.grpc returns them, values as lists."""
    if changes:
        answer = client.update_trace_settings(model_name=model, settings=changes, as_json=True)
    else:
        answer = client.get_trace_settings(model_name=model, as_json=True)
    return {key: value.get("value", []) for key, value in answer["settings"].items()}


@pytest.mark.parametrize("model", ["", "add_sub"])
def test_trace_settings_read_as_tritons_defaults(server, model):
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert client.get_trace_settings(model_name=model) == TRACE_DEFAULTS
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert grpc_trace(client, model) == {
            "trace_level": ["OFF"], "trace_rate": ["1000"], "trace_count": ["-1"],
            "log_frequency": ["0"], "trace_file": [""], "trace_mode": ["triton"]}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_without_a_trace_file_tracing_cannot_be_turned_on(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    with module.InferenceServerClient(url) as client, \
            pytest.raises(InferenceServerException) as info:
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
    assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert info.value.message() == ("Attempting to set invalid trace setting :trace file name "
                                    "is not given")


def test_trace_settings_of_an_unknown_model_name_it(server):
    with httpclient.InferenceServerClient(server.http_url) as client, \
            pytest.raises(InferenceServerException) as info:
        client.get_trace_settings(model_name="nope")
    assert info.value.status() == "400"
    assert info.value.message() == "Request for unknown model : nope"
    with grpcclient.InferenceServerClient(server.grpc_url) as client, \
            pytest.raises(InferenceServerException) as info:
        client.update_trace_settings(model_name="nope", settings={"trace_rate": "3"})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


@contextmanager
def traced_server(folder):
    """A server with a trace file and tracing off: the trace extension turns it on."""
    write_model(folder / "models", "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    trace_file = folder / "trace.json"
    with naiad_server("--model-repository", str(folder / "models"),
                      "--trace-config", f"triton,file={trace_file}") as process:
        process.trace_file = trace_file
        yield process


@pytest.fixture(scope="module")
def traced_shared(tmp_path_factory):
    """One traced server for the tests that only change settings (not for one that stops
    it or reads its trace file)."""
    with traced_server(tmp_path_factory.mktemp("traced")) as process:
        yield process


@pytest.fixture
def traced(traced_shared):
    """The shared traced server, its global and add_sub's settings put back to Triton's
    defaults after each test (a cleared value is the default, or the global one)."""
    yield traced_shared
    cleared = dict.fromkeys(("trace_level", "trace_rate", "trace_count", "log_frequency"))
    expected = {**TRACE_DEFAULTS, "trace_file": str(traced_shared.trace_file)}
    with httpclient.InferenceServerClient(traced_shared.http_url) as client:
        client.update_trace_settings(model_name="add_sub", settings=cleared)
        client.update_trace_settings(settings=cleared)
        assert client.get_trace_settings() == expected
        assert client.get_trace_settings(model_name="add_sub") == expected


@pytest.fixture
def traced_alone(tmp_path):
    """A traced server of the test's own: it stops it to read the trace file."""
    with traced_server(tmp_path) as process:
        yield process


def test_global_and_model_settings_change_over_both_protocols(traced):
    with httpclient.InferenceServerClient(traced.http_url) as http, \
            grpcclient.InferenceServerClient(traced.grpc_url) as grpc:
        assert http.update_trace_settings(settings={"trace_rate": "7", "trace_count": "9"}) == {
            **TRACE_DEFAULTS, "trace_rate": "7", "trace_count": "9",
            "trace_file": str(traced.trace_file)}
        # A model's setting: its own values, the others copied from the global ones...
        model = grpc_trace(grpc, "add_sub", trace_level=["TIMESTAMPS"], trace_rate="5")
        assert (model["trace_level"], model["trace_rate"], model["trace_count"]) == \
            (["TIMESTAMPS"], ["5"], ["9"])
        assert http.get_trace_settings()["trace_level"] == ["OFF"]
        # ...which follow the global changes,
        http.update_trace_settings(settings={"trace_count": "11"})
        assert http.get_trace_settings(model_name="add_sub")["trace_count"] == "11"
        # and a cleared value falls back to the global one (null over HTTP, none over gRPC).
        assert grpc_trace(grpc, "add_sub", trace_rate=None)["trace_rate"] == ["7"]
        cleared = http.update_trace_settings(model_name="add_sub",
                                             settings={"trace_level": None})
        assert cleared == http.get_trace_settings()
        assert http.update_trace_settings(settings={"trace_rate": None})["trace_rate"] == "1000"


# tritonclient.grpc sends every value as a list of strings: the wrong types go over HTTP only.
@pytest.mark.parametrize(("settings", "message", "over_grpc"), [
    ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc", True),
    ({"trace_count": "-2"}, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2",
     True),
    ({"log_frequency": "4294967296"}, "Unable to parse 'log_frequency', value is out of range",
     True),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF' is specified",
     True),
    ({"trace_level": ["LOUD"]}, "unknown trace level 'LOUD' in 'trace_level'", True),
    ({"trace_rate": ["3", "4"]}, "expect only 1 value for 'trace_rate'", True),
    ({"trace_rate": 5}, "'trace_rate' must be a string", False),
    ({"trace_level": "TIMESTAMPS"}, "'trace_level' must be a list of strings", False),
    ({"trace_mode": "opentelemetry"}, "'trace_mode' is fixed at start-up", True),
    ({"trace_rate": "0", "trace_level": ["TIMESTAMPS"]},
     "Attempting to set invalid trace setting :sample rate must be non-zero", True),
])
def test_bad_trace_settings_are_refused_and_change_nothing(traced, settings, message,
                                                           over_grpc):
    with httpclient.InferenceServerClient(traced.http_url) as client:
        before = client.get_trace_settings()
        with pytest.raises(InferenceServerException) as info:
            client.update_trace_settings(settings=settings)
        assert info.value.status() == "400" and message in info.value.message()
        if over_grpc:
            with grpcclient.InferenceServerClient(traced.grpc_url) as grpc, \
                    pytest.raises(InferenceServerException) as info:
                grpc.update_trace_settings(model_name="add_sub", settings=settings)
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
            assert message in info.value.message()
        assert client.get_trace_settings() == before
        assert client.get_trace_settings(model_name="add_sub") == before


def test_the_trace_file_cannot_change_at_run_time(traced):
    message = "trace file location can not be updated through network protocol"
    with httpclient.InferenceServerClient(traced.http_url) as client, \
            pytest.raises(InferenceServerException) as info:
        client.update_trace_settings(settings={"trace_file": "/tmp/elsewhere.json"})
    assert info.value.message() == message
    with grpcclient.InferenceServerClient(traced.grpc_url) as client, \
            pytest.raises(InferenceServerException) as info:
        client.update_trace_settings(settings={"trace_file": "/tmp/elsewhere.json"})
    assert info.value.status() == "StatusCode.UNIMPLEMENTED" and info.value.message() == message


def test_turning_tracing_on_for_one_model_traces_its_requests(traced_alone):
    traced = traced_alone
    inputs = [httpclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
    with httpclient.InferenceServerClient(traced.http_url) as client:
        client.infer("add_sub", inputs, request_id="before")
        client.update_trace_settings(model_name="add_sub",
                                     settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
        client.infer("add_sub", inputs, request_id="traced")
        client.update_trace_settings(model_name="add_sub", settings={"trace_level": ["OFF"]})
        client.infer("add_sub", inputs, request_id="after")
    assert traced.stop() == 0
    records = json.loads(traced.trace_file.read_text())
    assert [r["request_id"] for r in records if "model_name" in r] == ["traced"]

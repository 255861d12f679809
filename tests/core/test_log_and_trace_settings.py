"""The logging extension (read and change the log switches while serving) and the trace
extension (tracing reads as off and cannot be turned on), over HTTP and gRPC, with
tritonclient against a real server."""

from __future__ import annotations

import time

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.testing import naiad_server

DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
            "log_verbose_level": 0, "log_format": "default"}


@pytest.fixture
def server(tmp_path):
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    with naiad_server("--model-repository", str(tmp_path), "--model-control-mode=explicit",
                      "--load-model=add_sub") as process:
        yield process


def http_settings(server) -> dict:
    with httpclient.InferenceServerClient(server.http_url) as client:
        return client.get_log_settings()


def grpc_settings(server) -> dict:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        settings = client.get_log_settings(as_json=True)["settings"]
    return {key: next(iter(value.values())) for key, value in settings.items()}


def test_both_protocols_report_the_flags(server):
    assert http_settings(server) == DEFAULTS
    grpc = grpc_settings(server)
    assert grpc == {**DEFAULTS, "log_file": grpc.get("log_file", "")}  # "" is left out


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_change_applies_to_the_log_at_once(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    with module.InferenceServerClient(url) as client:
        client.update_log_settings({"log_info": False})
        assert http_settings(server)["log_info"] is False
        client.unload_model("add_sub")  # logged at INFO: must not appear
        client.update_log_settings({"log_info": True, "log_verbose_level": 1})
        assert grpc_settings(server)["log_verbose_level"] == 1
        client.load_model("add_sub")  # logged at INFO: must appear
    deadline = time.monotonic() + 10
    while "loaded model 'add_sub' version 1" not in server.log():
        assert time.monotonic() < deadline, server.log()[-2000:]
        time.sleep(0.05)
    assert "unloaded model 'add_sub'" not in server.log()


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


@pytest.mark.parametrize("model", ["", "add_sub"])
def test_trace_settings_read_as_off_and_cannot_be_turned_on(server, model):
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert client.get_trace_settings(model_name=model) == {
            "trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
            "log_frequency": "0", "trace_file": "", "trace_mode": "triton"}
        with pytest.raises(InferenceServerException) as info:
            client.update_trace_settings(model_name=model,
                                         settings={"trace_level": ["TIMESTAMPS"]})
    assert info.value.status() == "400" and "naiad does not trace" in info.value.message()


def test_trace_settings_of_an_unknown_model_name_it(server):
    with httpclient.InferenceServerClient(server.http_url) as client, \
            pytest.raises(InferenceServerException) as info:
        client.get_trace_settings(model_name="nope")
    assert "nope" in info.value.message()

"""Trace settings: ``--trace-config`` and the older flags as Triton 2.51 reads them (naiad
refusing what Triton accepts and then ignores), the trace extension's updates with Triton's
messages, and the per-model settings' fallback to the global ones
(tests/compat/TRITON_OBSERVED.md, "Tracing")."""

from __future__ import annotations

import pytest

from naiad.errors import InferenceServerError, Status
from naiad.tracing.manager import TraceManager
from naiad.tracing.sampler import SettingState
from naiad.tracing.settings import (
    OFF,
    OPENTELEMETRY,
    TENSORS,
    TIMESTAMPS,
    DeprecatedFlags,
    TraceConfig,
    TraceValues,
    parse_trace_config,
    parse_update,
)


def config(*entries: str, **old: object) -> TraceConfig:
    return parse_trace_config(entries, DeprecatedFlags(**old))[0]  # type: ignore[arg-type]


def test_defaults_are_tritons_tracing_off():
    assert config() == TraceConfig(values=TraceValues(OFF, 1000, -1, 0), file="",
                                   mode="triton")


def test_the_documented_example(tmp_path):
    file = str(tmp_path / "trace.json")
    parsed = config(f"triton,file={file}", "triton,log-frequency=50", "rate=100",
                    "level=TIMESTAMPS", "count=100")
    assert parsed.values == TraceValues(TIMESTAMPS, 100, 100, 50) and parsed.file == file


def test_levels_repeat_and_ignore_case(tmp_path):
    file = f"triton,file={tmp_path / 't.json'}"
    assert config(file, "level=timestamps", "level=TENSORS").values.level == TIMESTAMPS | TENSORS
    assert config(file, "level=OFF", "level=TENSORS").values.level == TENSORS


def test_opentelemetry_settings_keep_their_order_for_the_settings_view():
    parsed = config("mode=opentelemetry", "opentelemetry,url=http://127.0.0.1:4318/v1/traces",
                    "opentelemetry,resource=service.name=foo",
                    "opentelemetry,resource=deployment=x",
                    "opentelemetry,bsp_schedule_delay=100", "level=TIMESTAMPS", "rate=0")
    otel = parsed.opentelemetry
    assert parsed.mode == OPENTELEMETRY and parsed.values.rate == 0
    assert otel.resource == (("service.name", "foo"), ("deployment", "x"))
    assert otel.bsp_schedule_delay_ms == 100 and otel.bsp_max_queue_size == 2048
    assert otel.settings_view() == [
        ("url", ["http://127.0.0.1:4318/v1/traces"]),
        ("resource", ["service.name=foo", "deployment=x"]),
        ("bsp_schedule_delay", ["100"]), ("bsp_max_export_batch_size", ["512"]),
        ("bsp_max_queue_size", ["2048"])]


def test_deprecated_flags_lose_to_trace_config_with_a_warning(tmp_path):
    parsed, warnings = parse_trace_config(
        ["rate=7"], DeprecatedFlags(trace_rate="5", trace_count="3",
                                    trace_file=str(tmp_path / "a.json"),
                                    trace_level=["TIMESTAMPS"]))
    assert parsed.values == TraceValues(TIMESTAMPS, 7, 3, 0)
    assert parsed.file == str(tmp_path / "a.json")
    assert any("Overriding deprecated '--trace-rate'" in w for w in warnings)
    assert any("'--trace-count' has been deprecated" in w for w in warnings)


@pytest.mark.parametrize(("entries", "fragment"), [
    (["level=FOO"], "invalid value for trace level option: FOO"),
    (["mode=foo"], "invalid value for trace mode option: foo. Available options are"),
    (["foo,level=TIMESTAMPS"], "invalid value for trace mode option: foo"),
    (["bar"], "--trace-config option format is '<trace mode>,<setting>=<value>'. Got bar"),
    (["rate=abc"], "rate=abc: expected an integer, got 'abc'"),
    (["rate=-1"], "expected an integer from 0 to 4294967295, got -1"),
    (["count=-2"], "expected an integer from -1 to 2147483647, got -2"),
    (["count=5000000000"], "got 5000000000"),
    (["triton,log-frequency=abc"], "expected an integer"),
    # Triton accepts these and then ignores them; naiad says why they would do nothing.
    (["foo=1"], "unknown setting 'foo'"),
    (["triton,foo=1"], "unknown setting 'foo' of the triton mode"),
    (["file=/tmp/x.json"], "write --trace-config triton,file=/tmp/x.json"),
    (["log-frequency=4"], "'log-frequency' is a setting of the triton mode"),
    (["url=http://x"], "write --trace-config opentelemetry,url=http://x"),
    (["triton,level=TIMESTAMPS"], "'level' is a global setting"),
    (["triton,url=http://x"], "unknown setting 'url' of the triton mode"),
    (["opentelemetry,url=http://x"], "the trace mode is triton: add --trace-config "
                                     "mode=opentelemetry"),
    (["mode=opentelemetry", "triton,file=/tmp/x.json"], "settings of the triton mode"),
    (["level=TIMESTAMPS"], "needs a trace file: add --trace-config triton,file=PATH"),
    (["level=TIMESTAMPS", "rate=0", "triton,file=/tmp/t.json"], "rate=0 traces nothing"),
    (["triton,file=/nonexistent/dir/t.json"], "the folder '/nonexistent/dir' does not exist"),
    (["mode=opentelemetry", "level=TENSORS"], "TENSORS is not supported in opentelemetry"),
    (["mode=opentelemetry", "opentelemetry,url=localhost:4318"], "must be an http://"),
    (["mode=opentelemetry", "opentelemetry,resource=noequals"], "expected resource=KEY=VALUE"),
    (["mode=opentelemetry", "opentelemetry,bsp_max_queue_size=abc"], "expected an integer"),
    (["mode=opentelemetry", "opentelemetry,bsp_max_queue_size=-5"], "from 1 to"),
    (["mode=opentelemetry", "opentelemetry,bsp_max_export_batch_size=4096"],
     "must not exceed bsp_max_queue_size (2048)"),
])
def test_bad_command_lines_say_what_is_wrong(entries, fragment):
    with pytest.raises(ValueError) as info:
        parse_trace_config(entries)
    assert fragment in str(info.value)


def test_a_deprecated_flag_with_a_bad_value_is_named():
    with pytest.raises(ValueError, match="--trace-rate: expected an integer"):
        parse_trace_config([], DeprecatedFlags(trace_rate="x"))


# --- run-time updates ---------------------------------------------------------------------

TRITON_FILE = TraceConfig(file="/tmp/t.json")


@pytest.mark.parametrize(("changes", "expected"), [
    ({"trace_level": ["TIMESTAMPS", "TENSORS"]}, {"level": TIMESTAMPS | TENSORS}),
    ({"trace_level": ["OFF"]}, {"level": OFF}),
    ({"trace_level": None}, {"level": None}),
    ({"trace_level": []}, {"level": None}),  # gRPC's way to clear
    ({"trace_rate": "5", "trace_count": "-1", "log_frequency": "0"},
     {"rate": 5, "count": -1, "log_frequency": 0}),
    ({"trace_rate": ["5"]}, {"rate": 5}),  # gRPC's form
    ({"trace_rate": []}, {"rate": None}),
    ({"trace_mode": "triton", "nope": "1"}, {}),  # unknown keys are ignored, as in Triton
])
def test_updates_parse(changes, expected):
    assert parse_update(changes, TRITON_FILE) == expected


@pytest.mark.parametrize(("changes", "message"), [
    ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc"),
    ({"trace_rate": ""}, "Unable to parse 'trace_rate', got: "),
    ({"trace_rate": "5x"}, "Unable to parse 'trace_rate', got: 5x"),
    ({"trace_rate": "-1"}, "Unable to parse 'trace_rate', value is out of range "
                           "[ 0, 4294967295 ], got: -1"),
    ({"trace_rate": "4294967296"}, "value is out of range [ 0, 4294967295 ], got: 4294967296"),
    ({"trace_count": "-2"}, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
    ({"trace_count": "2147483648"}, "out of range [ -1, 2147483647 ]"),
    ({"log_frequency": "x"}, "Unable to parse 'log_frequency', got: x"),
    ({"trace_rate": ["3", "4"]}, "expect only 1 value for 'trace_rate'"),
    ({"trace_rate": 5}, "'trace_rate' must be a string"),
    ({"trace_level": "TIMESTAMPS"}, "'trace_level' must be a list of strings"),
    ({"trace_level": [1]}, "'trace_level' must be a list of strings"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF' is specified"),
    ({"trace_level": ["FOO"]}, "unknown trace level 'FOO' in 'trace_level'"),
    ({"trace_mode": "opentelemetry"}, "'trace_mode' is fixed at start-up"),
    ({"url": "http://x"}, "'url' is fixed at start-up"),
])
def test_bad_updates_are_400_naming_the_setting(changes, message):
    with pytest.raises(InferenceServerError) as info:
        parse_update(changes, TRITON_FILE)
    assert info.value.status is Status.INVALID_ARG and message in info.value.message


def test_the_file_cannot_change_at_run_time():
    for value in ("/tmp/x.json", None):
        with pytest.raises(InferenceServerError) as info:
            parse_update({"trace_file": value}, TRITON_FILE)
        assert info.value.status is Status.UNSUPPORTED
        assert info.value.message == ("trace file location can not be updated through network "
                                      "protocol")


# --- the settings store ---------------------------------------------------------------------


class NoSink:
    def write(self, family): ...

    def retire(self, state): ...

    def idle(self): ...

    def close(self, states): ...


def manager(cfg: TraceConfig = TRITON_FILE) -> TraceManager:
    return TraceManager(cfg, sink=NoSink())


def view(tracer: TraceManager, model: str = "") -> dict[str, list[str]]:
    return dict(tracer.view(model))


def test_the_view_lists_tritons_settings_in_order():
    assert manager().view() == [
        ("trace_level", ["OFF"]), ("trace_rate", ["1000"]), ("trace_count", ["-1"]),
        ("log_frequency", ["0"]), ("trace_file", ["/tmp/t.json"]), ("trace_mode", ["triton"])]
    otel = manager(config("mode=opentelemetry"))
    assert [key for key, _ in otel.view()] == [
        "trace_level", "trace_rate", "trace_count", "trace_mode", "bsp_max_export_batch_size",
        "bsp_schedule_delay", "bsp_max_queue_size"]


def test_a_model_setting_overrides_and_follows_the_global_one():
    tracer = manager()
    tracer.update("", {"trace_rate": "7", "trace_count": "9"})
    assert view(tracer, "add_sub")["trace_rate"] == ["7"]  # no setting of its own yet
    tracer.update("add_sub", {"trace_rate": "5"})
    assert view(tracer, "add_sub")["trace_rate"] == ["5"]
    assert view(tracer)["trace_rate"] == ["7"]
    tracer.update("", {"trace_count": "11", "trace_rate": "3"})
    model = view(tracer, "add_sub")
    assert (model["trace_rate"], model["trace_count"]) == (["5"], ["11"])
    tracer.update("add_sub", {})  # nothing named: the model keeps its own values
    assert view(tracer, "add_sub")["trace_rate"] == ["5"]
    tracer.update("add_sub", {"trace_rate": None})  # cleared: back to the global one
    assert view(tracer, "add_sub") == view(tracer)
    tracer.update("", {"trace_rate": None})  # the global one back to the start-up value
    assert view(tracer)["trace_rate"] == ["1000"]


def test_an_update_that_would_trace_nothing_changes_nothing():
    tracer = manager(TraceConfig())  # no file
    with pytest.raises(InferenceServerError) as info:
        tracer.update("", {"trace_level": ["TIMESTAMPS"]})
    assert info.value.message == ("Attempting to set invalid trace setting :trace file name "
                                  "is not given")
    filed = manager()
    with pytest.raises(InferenceServerError, match="sample rate must be non-zero"):
        filed.update("add_sub", {"trace_rate": "0", "trace_level": ["TIMESTAMPS"]})
    assert view(filed)["trace_level"] == ["OFF"] and view(filed, "add_sub") == view(filed)


def test_tracing_is_active_while_some_setting_traces():
    tracer = manager()
    assert not tracer.active
    tracer.update("add_sub", {"trace_level": ["TIMESTAMPS"]})
    assert tracer.active
    tracer.update("add_sub", {"trace_level": None})
    assert not tracer.active
    assert not manager(TraceConfig()).active  # no file: nothing can ever be traced


# --- sampling -----------------------------------------------------------------------------


def test_one_request_in_rate_is_sampled_and_count_counts_down():
    state = SettingState(TraceValues(TIMESTAMPS, rate=2, count=2))
    assert [state.sample() for _ in range(6)] == [False, True, False, True, False, False]
    assert state.remaining == 0 and state.created == 2


def test_nothing_is_sampled_while_off_and_forcing_ignores_rate_and_count():
    assert not SettingState(TraceValues(OFF, rate=1)).sample()
    state = SettingState(TraceValues(TIMESTAMPS, rate=0, count=0))
    assert not state.sample() and state.force() and state.remaining == 0
    assert not SettingState(TraceValues(OFF)).force()


# --- the command line ---------------------------------------------------------------------


def serve_args(*argv: str):
    from naiad.cli import build_parser

    return build_parser().parse_args(["serve", "--model-repository", "r", *argv])


def test_naiad_serve_refuses_a_trace_command_line_that_would_trace_nothing():
    from naiad.cli import _check

    assert _check(serve_args("--trace-config", "level=TIMESTAMPS")) == [
        "--trace-config level=TIMESTAMPS in triton mode needs a trace file: add "
        "--trace-config triton,file=PATH"]
    assert _check(serve_args("--trace-level", "TIMESTAMPS", "--trace-file", "/tmp/t.json")) == []


def test_the_trace_flags_reach_the_server_options(tmp_path):
    from naiad.cli import _options

    options, _ = _options(serve_args(
        "--trace-config", f"triton,file={tmp_path / 't.json'}", "--trace-config",
        "level=TIMESTAMPS", "--trace-rate", "10", "--trace-log-frequency", "3"))
    assert options.trace.values == TraceValues(TIMESTAMPS, 10, -1, 3)
    assert options.trace.file == str(tmp_path / "t.json")

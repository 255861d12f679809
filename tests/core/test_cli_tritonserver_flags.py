"""Every ``tritonserver`` 2.51 flag starts ``naiad serve``: implemented, inert (accepted, no
effect, said so in the log) or refused with its reason when set to anything but Triton's
default. The reference list is ``tritonserver --help`` of the 2.51 binary."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.cli import _check, _options, build_parser
from naiad.testing import naiad_server
from naiad.tritonserver_flags import INERT, REFUSED

# Every flag of `tritonserver --help` (2.51) with a value a Triton command line might use.
TRITONSERVER_2_51 = {
    "--id": "triton", "--exit-timeout-secs": "30", "--log-verbose": "1",
    "--log-info": "true", "--log-warning": "true", "--log-error": "true",
    "--log-format": "ISO8601", "--log-file": "{log}", "--model-store": "{repo}",
    "--model-repository": "{repo}", "--exit-on-error": "true",
    "--disable-auto-complete-config": None, "--strict-readiness": "true",
    "--model-control-mode": "explicit", "--repository-poll-secs": "15",
    "--load-model": "*", "--model-config-name": "h100",
    "--model-load-thread-count": "4", "--model-load-retry-count": "0",
    "--model-namespacing": "false", "--enable-peer-access": "true",
    "--allow-http": "true", "--http-address": "127.0.0.1", "--http-port": "8000",
    "--reuse-http-port": "false", "--http-header-forward-pattern": "x-.*",
    "--http-thread-count": "8", "--http-restricted-api": "model-repository:admin=s3cret",
    "--allow-grpc": "true", "--grpc-address": "127.0.0.1", "--grpc-port": "8001",
    "--reuse-grpc-port": "false", "--grpc-header-forward-pattern": "x-.*",
    "--grpc-infer-allocation-pool-size": "8", "--grpc-use-ssl": "false",
    "--grpc-use-ssl-mutual": "false", "--grpc-server-cert": "server.crt",
    "--grpc-server-key": "server.key", "--grpc-root-cert": "ca.crt",
    "--grpc-infer-response-compression-level": "none", "--grpc-keepalive-time": "7200000",
    "--grpc-keepalive-timeout": "20000", "--grpc-keepalive-permit-without-calls": "false",
    "--grpc-http2-max-pings-without-data": "2",
    "--grpc-http2-min-recv-ping-interval-without-data": "300000",
    "--grpc-http2-max-ping-strikes": "2", "--grpc-max-connection-age": "60000",
    "--grpc-max-connection-age-grace": "5000",
    "--grpc-restricted-protocol": "model-repository:admin=s3cret",
    "--allow-sagemaker": "false", "--sagemaker-port": "8080",
    "--sagemaker-safe-port-range": "8081-8090", "--sagemaker-thread-count": "8",
    "--allow-vertex-ai": "false", "--vertex-ai-port": "8080",
    "--vertex-ai-thread-count": "8", "--vertex-ai-default-model": "m",
    "--allow-metrics": "true", "--allow-gpu-metrics": "false", "--allow-cpu-metrics": "true",
    "--metrics-address": "127.0.0.1", "--metrics-port": "8002",
    "--metrics-interval-ms": "2000", "--backend-directory": "/opt/tritonserver/backends",
    "--backend-config": "python,shm-default-byte-size=1048576",
    "--repoagent-directory": "/opt/tritonserver/repoagents",
    "--cache-directory": "/opt/tritonserver/caches", "--rate-limit": "off",
    "--pinned-memory-pool-byte-size": "0", "--cuda-memory-pool-byte-size": "0:0",
    "--cuda-virtual-address-size": "0:1073741824", "--min-supported-compute-capability": "6.0",
    "--buffer-manager-thread-count": "0", "--host-policy": "gpu0,numa-node=0",
    "--model-load-gpu-limit": "0:0.8", "--strict-model-config": "false",
    "--response-cache-byte-size": "0", "--trace-level": "OFF", "--trace-rate": "1000",
    "--trace-count": "-1", "--trace-log-frequency": "0",
}


def parse(*argv: str):
    return build_parser().parse_args(["serve", "--model-repository", "r", *argv])


def test_every_tritonserver_flag_is_known():
    known = {option for action in build_parser()._subparsers._group_actions[0]  # type: ignore
             .choices["serve"]._actions for option in action.option_strings}
    missing = set(TRITONSERVER_2_51) - known
    missing |= {rule.flag for rule in REFUSED} - known
    assert not missing, f"tritonserver flags naiad does not know: {sorted(missing)}"


def test_a_tritonserver_command_line_parses_and_passes_the_checks(tmp_path):
    argv = []
    for flag, value in TRITONSERVER_2_51.items():
        if value is None:
            argv.append(flag)
        else:
            argv.append(f"{flag}={value.format(repo=tmp_path, log=tmp_path / 'log')}")
    args = build_parser().parse_args(["serve", *argv])
    assert _check(args) == []
    options, listeners = _options(args)
    assert options.server_id == "triton" and options.load.config_name == "h100"
    assert listeners.http_restricted["model-repository"] == ("admin", "s3cret")
    assert listeners.grpc.max_connection_age_ms == 60000


@pytest.mark.parametrize("rule", REFUSED, ids=lambda rule: rule.flag)
def test_refused_flags_name_their_reason(rule):
    value = {"BOOL": "true", "BYTES": "1048576", "LEVEL": "TIMESTAMPS", "MODE": "execution_count",
             "PATH": "/tmp/trace.json"}.get(rule.metavar, "a,b=c")
    problems = _check(parse(f"{rule.flag}={value}"))
    assert len(problems) == 1 and problems[0].startswith(f"{rule.flag}=")
    assert rule.reason in problems[0]


def test_refused_flags_are_accepted_at_tritons_default():
    assert _check(parse("--allow-sagemaker=false", "--trace-level=off", "--rate-limit=OFF",
                        "--response-cache-byte-size=0", "--model-namespacing=0")) == []


@pytest.mark.parametrize(("argv", "expected"), [
    (["--http-restricted-api=model-repository"], "expected <api>,<api>...:<key>=<value>"),
    (["--grpc-restricted-protocol=inference,bogus:k=v"], "unknown API 'bogus'"),
    (["--http-restricted-api=inference:a=b", "--http-restricted-api=health,inference:c=d"],
     "API 'inference' is in more than one group"),
    (["--http-header-forward-pattern=x-(["], "not a regular expression"),
    (["--model-control-mode=explicit", "--load-model=*", "--load-model=a"],
     "Wildcard model name '*' must be the ONLY startup model if specified at all."),
    (["--load-model=a"],
     "Use of '--load-model' requires setting '--model-control-mode=explicit' as well."),
    (["--model-control-mode=poll", "--load-model=a"], "requires setting "
     "'--model-control-mode=explicit'"),
    (["--model-config-name=a b"], "must not contain spaces"),
    (["--model-load-thread-count=0"], "at least 1"),
    (["--allow-vertex-ai=true", "--allow-sagemaker=true"], "Vertex AI"),
    (["--rate-limit-resource=r1:4"], "--rate-limit-resource needs --rate-limit=execution_count"),
    (["--rate-limit=execution_count", "--rate-limit-resource=r1"], "NAME:COUNT[:DEVICE]"),
])
def test_bad_values_stop_start_up_with_a_message(argv, expected):
    result = subprocess.run([sys.executable, "-m", "naiad", "serve", "--model-repository",
                             "/nonexistent", *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_two_refusals_are_reported_together():
    problems = _check(parse("--allow-sagemaker=true", "--model-namespacing=true"))
    assert [p.split("=")[0] for p in problems] == ["--allow-sagemaker", "--model-namespacing"]


@pytest.fixture(scope="module")
def flagged_server(tmp_path_factory):
    """One server for the flags that do not touch each other: four inert ones and --id."""
    repo = tmp_path_factory.mktemp("flagged")
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    with naiad_server("--model-repository", str(repo), "--http-thread-count=16",
                      "--pinned-memory-pool-byte-size=0", "--cuda-memory-pool-byte-size=0:0",
                      "--cache-directory=/opt/tritonserver/caches", "--id=edge-7") as server:
        yield server


def test_inert_flags_say_in_the_log_that_they_change_nothing(flagged_server):
    log = flagged_server.log()
    for flag in ("--http-thread-count", "--pinned-memory-pool-byte-size",
                 "--cuda-memory-pool-byte-size", "--cache-directory"):
        reason = next(rule.reason for rule in INERT if rule.flag == flag)
        assert f"{flag} has no effect: {reason}" in log
    assert "--grpc-infer-allocation-pool-size" not in log  # only the flags given


def test_id_names_the_server_in_its_metadata(flagged_server):
    with httpclient.InferenceServerClient(flagged_server.http_url) as client:
        assert client.get_server_metadata()["name"] == "edge-7"
    with grpcclient.InferenceServerClient(flagged_server.grpc_url) as client:
        assert client.get_server_metadata().name == "edge-7"


def test_default_server_name_is_naiad(server):
    with httpclient.InferenceServerClient(server.http_url) as client:
        assert client.get_server_metadata()["name"] == "naiad"


DEFAULT_PREFIX = re.compile(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ naiad[\w.]*\] ", re.M)
ISO8601_PREFIX = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I naiad[\w.]*\] ", re.M)


@pytest.mark.parametrize(("log_format", "prefix", "other"), [
    ("default", DEFAULT_PREFIX, ISO8601_PREFIX), ("ISO8601", ISO8601_PREFIX, DEFAULT_PREFIX)])
def test_log_format_and_log_file(tmp_path, log_format, prefix, other):
    log_file = tmp_path / "naiad.log"
    repo = tmp_path / "repo"
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    with naiad_server("--model-repository", str(repo), f"--log-format={log_format}",
                      f"--log-file={log_file}") as server:
        console = server.log()
    written = log_file.read_text()
    assert "add_sub" in written and prefix.search(written), written[:2000]
    assert not other.search(written)
    assert not prefix.search(console)  # the log went to the file, not the console


def _metric_names(server) -> set[str]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics",
                                timeout=10) as reply:
        text = reply.read().decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}


@pytest.mark.parametrize("allowed", [True, False])
def test_allow_cpu_metrics(tmp_path, allowed):
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    with naiad_server("--model-repository", str(tmp_path),
                      f"--allow-cpu-metrics={str(allowed).lower()}") as server:
        deadline = time.monotonic() + 10
        while True:
            try:
                names = _metric_names(server)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    assert "nv_inference_count" in names
    cpu = {"nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"}
    assert (cpu <= names) is allowed and (not cpu & names) is (not allowed)


def test_the_compatibility_table_lists_every_inert_and_refused_flag():
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "compatibility.md").read_text()
    for flag in INERT:
        assert f"| `{flag.flag}` | {flag.reason} |" in doc, flag.flag
    for rule in REFUSED:
        assert f"| `{rule.flag}` |" in doc and rule.reason in doc, rule.flag

"""The ``naiad`` command line: flags, errors and the plugin listing."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, write_model

from naiad.cli import _options, build_parser
from naiad.testing import naiad_server


def naiad(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "naiad", *args], capture_output=True,
                          text=True, timeout=60)


def test_unknown_flag_is_a_clear_error():
    result = naiad("serve", "--model-repository", "/tmp", "--no-such-flag")
    assert result.returncode == 2
    assert "--no-such-flag" in result.stderr
    assert "tritonserver's flag names" in result.stderr


def test_model_repository_is_required():
    result = naiad("serve")
    assert result.returncode == 2
    assert "--model-repository" in result.stderr


def test_tritonserver_defaults_and_boolean_forms():
    args = build_parser().parse_args(["serve", "--model-repository", "a", "--model-store", "b",
                                      "--allow-grpc=false", "--strict-model-config",
                                      "--backend-config", "python,shm-region-prefix=x",
                                      "--backend-config", "default-max-batch-size=4"])
    assert args.model_repository == ["a", "b"]
    assert (args.http_port, args.grpc_port, args.metrics_port) == (8000, 8001, 8002)
    assert args.allow_grpc is False and args.allow_http is True
    assert args.strict_model_config is True
    assert args.exit_on_error is True and args.exit_timeout_secs == 30
    assert args.http_max_input_size == 64 * 1024 * 1024
    assert args.backend_config == [("python", "shm-region-prefix", "x"),
                                   ("", "default-max-batch-size", "4")]


def test_serve_freezes_the_heap_after_loading():
    options, _ = _options(build_parser().parse_args(["serve", "--model-repository", "a"]))
    assert options.freeze_heap is True


def test_unnamed_backend_config_reaches_every_backend():
    args = build_parser().parse_args(["serve", "--model-repository", "a",
                                      "--backend-config", "python,shm-region-prefix=x",
                                      "--backend-config", "default-max-batch-size=4",
                                      "--backend-config", "onnxruntime,default-max-batch-size=8"])
    options = _options(args)[0].load
    assert options.settings_for("python") == {"shm-region-prefix": "x",
                                              "default-max-batch-size": "4"}
    assert options.settings_for("onnxruntime") == {"default-max-batch-size": "8"}
    assert options.settings_for("pytorch") == {"default-max-batch-size": "4"}


def test_bad_boolean_value():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--model-repository", "a", "--allow-http=maybe"])


def test_plugins_lists_installed_backends():
    result = naiad("plugins")
    assert result.returncode == 0, result.stderr
    assert "naiad.backends:" in result.stdout
    line = next(x for x in result.stdout.splitlines() if x.strip().startswith("python "))
    assert "naiad-backend-python" in line


def _thread_policies(pid: int) -> set[int]:
    return {os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux only")
@pytest.mark.parametrize(("flag", "policy"), [((), "SCHED_BATCH"),
                                               (("--sched-batch=false",), "SCHED_OTHER")])
def test_sched_batch_sets_the_class_of_every_server_thread(tmp_path, flag, policy):
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    with naiad_server("--model-repository", str(tmp_path), *flag) as server:
        assert server.process is not None
        # The instance worker, the gRPC pool and grpc's own threads exist by now.
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            assert client.is_server_ready()
        assert len(os.listdir(f"/proc/{server.process.pid}/task")) > 3
        assert _thread_policies(server.process.pid) == {getattr(os, policy)}


def _syscalls_by_thread_name(pid: int) -> dict[str, int]:
    """Read plus write system calls so far, summed per thread name."""
    totals: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm, \
                 open(f"/proc/{pid}/task/{tid}/io") as io:
                name = comm.read().strip()
                counts = dict(line.split(": ") for line in io.read().splitlines())
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        totals[name] = totals.get(name, 0) + int(counts["syscr"]) + int(counts["syscw"])
    return totals


# long: it counts system calls of grpc's own threads, which also wake for grpc's timers; on a
# loaded machine those wake-ups reach the count the listener's socket work gives (9-38 against
# 35-49 in 50 inferences, measured while the suite ran beside it), so it runs on a quiet one.
@pytest.mark.long
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
@pytest.mark.parametrize(("user_setting", "grpc_threads_do_io"), [(None, False), ("", True)])
def test_grpc_socket_io_runs_on_the_polling_thread_unless_the_user_says_otherwise(
        tmp_path, monkeypatch, user_setting, grpc_threads_do_io):
    # naiad turns grpc's EventEngine listener off (naiad/__main__.py): the thread that polls
    # the completion queue then reads and writes the sockets itself, and grpc's own
    # "event_engine" threads stay out of every call. A GRPC_EXPERIMENTS set by the user wins.
    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    env = None if user_setting is None else {"GRPC_EXPERIMENTS": user_setting}
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
        inputs.append(tensor)
    with naiad_server("--model-repository", str(tmp_path), env=env) as server:
        assert server.process is not None
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.infer("add_sub", inputs)
            before = _syscalls_by_thread_name(server.process.pid)
            for _ in range(50):
                client.infer("add_sub", inputs)
            after = _syscalls_by_thread_name(server.process.pid)
    assert "event_engine" in after, f"grpc's thread names changed: {sorted(after)}"
    grpc_thread_calls = after["event_engine"] - before.get("event_engine", 0)
    assert (grpc_thread_calls > 0) is grpc_threads_do_io, (
        f"grpc's event_engine threads made {grpc_thread_calls} read/write calls in 50 "
        f"inferences (GRPC_EXPERIMENTS={user_setting!r})")

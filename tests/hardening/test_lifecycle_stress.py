"""Triton's qa/L0_lifecycle model-control stress, ported: 32 threads load, infer on and
unload a few models in explicit mode at the same time, half over HTTP, half over gRPC. No
call is answered with a 5xx, INTERNAL or UNKNOWN; loads and unloads succeed; an inference
racing an unload may only be told the model is not there. Afterwards the repository index,
readiness and inference agree, and the server holds as many worker processes as before the
stress and as many threads, give or take a pool's few (a warm-up round first fills the
thread pools that stay)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from hardening_support import ANSWER_TIMEOUT_S, descendants, status_field
from tritonclient.utils import InferenceServerException
from zoo import IDENTITY_PY, identity_config, write_model

from naiad.testing import naiad_server

THREADS = 32
IN_PROCESS = 'parameters { key: "EXECUTION_MODE" value: { string_value: "in_process" } }\n'
# Seven in-process models (cheap to load) and one isolated one, whose worker processes are
# what a leak of processes would leave behind; four threads share each.
MODELS = {**{f"stress_{letter}": IN_PROCESS for letter in "abcdefg"}, "stress_worker": ""}
# What an inference racing an unload of its model may be told.
GONE = {"400", "404", "StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE",
        "StatusCode.INVALID_ARGUMENT"}
SETTLE_S = 30.0  # how long the server may take to end workers and threads after unloads
# Threads a pool may still add after the warm-up (a leak of one per load would be 32+)
POOL_SLACK = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("lifecycle-stress")
    for name, extra in MODELS.items():
        write_model(repo, name, identity_config(name, "TYPE_FP32") + extra, IDENTITY_PY)
    with naiad_server("--model-repository", str(repo), "--model-control-mode=explicit",
                      stop_timeout=60) as process:
        yield process


def client_for(server, index: int):
    if index % 2:
        return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)
    return httpclient, httpclient.InferenceServerClient(server.http_url,
                                                        network_timeout=ANSWER_TIMEOUT_S)


def inference(module, client, model: str, value: float) -> None:
    tensor = module.InferInput("INPUT0", [2], "FP32")
    data = np.array([value, -value], np.float32)
    tensor.set_data_from_numpy(data)
    np.testing.assert_array_equal(client.infer(model, [tensor]).as_numpy("OUTPUT0"), data)


def stress(server, rounds: int) -> tuple[list[str], Counter]:
    """THREADS threads, each ``rounds`` times: load its model, infer, unload. Returns the
    failures that break the rules and the statuses of inferences that raced an unload."""
    failures: list[str] = []
    raced: Counter = Counter()
    start = threading.Barrier(THREADS)

    def work(index: int) -> None:
        model = list(MODELS)[index % len(MODELS)]
        module, client = client_for(server, index)
        try:
            start.wait()
            for turn in range(rounds):
                for step, action in (("load", client.load_model),
                                     ("infer", lambda m, t=turn: inference(module, client, m, t)),
                                     ("unload", client.unload_model)):
                    try:
                        action(model)
                    except InferenceServerException as exc:
                        if step == "infer" and exc.status() in GONE:
                            raced[exc.status()] += 1
                        else:
                            failures.append(f"thread {index} {step} {model}: "
                                            f"{exc.status()} {exc.message()}")
        except Exception as exc:  # anything else (a client error, a wrong answer) counts
            failures.append(f"thread {index}: {type(exc).__name__}: {exc}")
        finally:
            client.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(ANSWER_TIMEOUT_S * rounds * 6)
    assert not any(thread.is_alive() for thread in threads), "a stress thread hangs"
    return failures, raced


def unload_all(server) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for model in MODELS:
            client.unload_model(model)


def settled(pid: int, threads: int | None) -> tuple[int, int]:
    """(threads, worker processes) of the server once it has no worker process and at most
    ``threads`` threads (None: any number), or as they are after SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        now = status_field(pid, "Threads"), len(descendants(pid))
        done = now[1] == 0 and (threads is None or now[0] <= threads)
        if done or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def run_and_check(server, rounds: int) -> None:
    pid = server.process.pid
    # warm-up: the same concurrency fills the thread pools that stay (grpc's, asyncio's)
    failures, _ = stress(server, 1)
    assert not failures, failures
    unload_all(server)
    baseline = settled(pid, None)
    assert baseline[1] == 0, f"worker processes left after unloading everything: {baseline}"

    failures, _ = stress(server, rounds)
    assert not failures, "\n".join(failures)
    unload_all(server)
    after = settled(pid, baseline[0] + POOL_SLACK)
    assert after[1] == 0, f"worker processes left after unloading everything: {after}"
    assert after[0] <= baseline[0] + POOL_SLACK, \
        f"threads: {baseline[0]} before, {after[0]} after"

    # consistent: the index, readiness and inference agree, loaded and unloaded
    with httpclient.InferenceServerClient(server.http_url) as client:
        index = {m["name"]: m for m in client.get_model_repository_index()}
        for model in MODELS:
            assert index[model]["state"] == "UNAVAILABLE", index[model]
            assert not client.is_model_ready(model)
            client.load_model(model)
        index = {m["name"]: m for m in client.get_model_repository_index()}
        for model in MODELS:
            assert index[model]["state"] == "READY", index[model]
            assert client.is_model_ready(model)
            inference(httpclient, client, model, 3)
    assert len(descendants(pid)) == 1  # stress_worker's one instance
    unload_all(server)
    assert server.process.poll() is None


def test_32_threads_load_infer_unload(server):
    run_and_check(server, rounds=1)


@pytest.mark.long
def test_32_threads_load_infer_unload_many_rounds(server):
    run_and_check(server, rounds=10)

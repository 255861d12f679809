"""Helpers of the hardening tests (Triton's qa/ robustness suites ported and the
malformed-request corpus): a repository of small models, raw HTTP exchanges whose wait is
bounded, and process accounting read from /proc (threads, children, resident memory)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from zoo import ADD_SUB_CONFIG, ADD_SUB_PY, IDENTITY_PY, identity_config, write_model

#: The models of tests/hardening/models (sleepy: an identity that sleeps; leaky: keeps inputs).
MODELS = Path(__file__).parent / "models"
#: How long any one answer may take before the test calls it a hang.
ANSWER_TIMEOUT_S = 20.0
KIB = 1024

# (model name, config type, max_batch_size) of the identity models every repository holds
IDENTITIES = [
    ("identity_fp32", "TYPE_FP32", 0), ("identity_fp16", "TYPE_FP16", 0),
    ("identity_int8", "TYPE_INT8", 0), ("identity_uint64", "TYPE_UINT64", 0),
    ("identity_bool", "TYPE_BOOL", 0), ("identity_bytes", "TYPE_STRING", 0),
    ("identity_batch", "TYPE_FP32", 8),
]


def copy_model(repo: Path, name: str) -> Path:
    """Copy tests/hardening/models/<name> into ``repo``."""
    return Path(shutil.copytree(MODELS / name, repo / name))


# An identity of FP32 [8] rows whose dynamic batcher waits for a second request: two
# requests sent together run as one batch (Triton's input_shape_validation_test).
BATCH_DELAY_CONFIG = identity_config("batch_delay", "TYPE_FP32", 8, dims="8") + \
    "dynamic_batching { max_queue_delay_microseconds: 500000 }\n"
#: The models of tests/hardening/models every hardening repository holds.
STANDARD_COPIES = ("sleepy", "input_optional", "input_all_optional")


def hardening_repository(repo: Path, *extra: str) -> Path:
    """add_sub, the identity models, batch_delay and STANDARD_COPIES, plus ``extra`` models
    of tests/hardening/models."""
    write_model(repo, "add_sub", ADD_SUB_CONFIG, ADD_SUB_PY)
    for name, type_name, max_batch in IDENTITIES:
        write_model(repo, name, identity_config(name, type_name, max_batch), IDENTITY_PY)
    write_model(repo, "batch_delay", BATCH_DELAY_CONFIG, IDENTITY_PY)
    for name in (*STANDARD_COPIES, *extra):
        copy_model(repo, name)
    return repo


# --- raw HTTP ------------------------------------------------------------------------------


@dataclass
class Answer:
    """An HTTP response as received."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def error(self) -> str:
        """The ``error`` of a JSON error body; else the body as text."""
        try:
            doc = json.loads(self.body)
        except ValueError:
            return self.body.decode(errors="replace")
        return str(doc.get("error", doc)) if isinstance(doc, dict) else str(doc)


def request_bytes(method: str, path: str, body: bytes = b"",
                  headers: dict[str, str] | None = None, *, length: bool = True) -> bytes:
    """An HTTP/1.1 request as bytes, exactly as given (nothing is escaped or checked):
    ``Content-Length`` is added when ``length`` and the headers have none."""
    headers = {"Host": "127.0.0.1", **(headers or {})}
    names = {name.lower() for name in headers}
    if length and "content-length" not in names and "transfer-encoding" not in names:
        headers["Content-Length"] = str(len(body))
    head = f"{method} {path} HTTP/1.1\r\n".encode("latin-1", "surrogateescape")
    for name, value in headers.items():
        head += f"{name}: {value}\r\n".encode("latin-1", "surrogateescape")
    return head + b"\r\n" + body


def exchange(port: int, request: bytes, timeout: float = ANSWER_TIMEOUT_S) -> Answer:
    """Send ``request`` on a new connection and read one response; raises (socket.timeout,
    ConnectionError, http.client errors) when none comes within ``timeout``."""
    method = request.split(b" ", 1)[0].decode("latin-1")
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        body = response.read()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, body)


def call(port: int, method: str, path: str, body: bytes | str = b"",
         headers: dict[str, str] | None = None, timeout: float = ANSWER_TIMEOUT_S) -> Answer:
    """One request built by :func:`request_bytes`, answered by :func:`exchange`."""
    data = body.encode() if isinstance(body, str) else body
    return exchange(port, request_bytes(method, path, data, headers), timeout)


# --- process accounting (Linux /proc) ------------------------------------------------------


def status_field(pid: int, name: str) -> int:
    """A numeric field of /proc/<pid>/status (``VmRSS`` in KiB, ``Threads``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return int(value.split()[0])
    raise KeyError(f"/proc/{pid}/status has no {name}")


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, their children...)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def rss_bytes(pid: int, *, with_children: bool = True) -> int:
    """Resident memory of ``pid`` (and of its worker processes), in bytes."""
    pids = [pid, *(descendants(pid) if with_children else [])]
    total = 0
    for each in pids:
        try:
            total += status_field(each, "VmRSS") * KIB
        except (OSError, KeyError):  # ended meanwhile, or a zombie
            continue
    return total


# --- server state read while requests are in flight -----------------------------------------

#: How often a condition is polled, and how many times at most, before a test calls it a hang.
POLL_S = 0.025
POLLS = int(ANSWER_TIMEOUT_S / POLL_S)


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` (bounded: POLLS times, POLL_S apart); fail naming ``what``."""
    for _ in range(POLLS):
        if condition():
            return
        time.sleep(POLL_S)
    raise AssertionError(f"{what}: not within {ANSWER_TIMEOUT_S} s")


def metric(metrics_port: int, family: str, **labels: str) -> float:
    """The value of one sample of ``family`` on the metrics endpoint (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                timeout=ANSWER_TIMEOUT_S) as answer:
        text = answer.read().decode()
    for found in text_string_to_metric_families(text):
        for sample in found.samples:
            # the parser names a counter's sample <family>_total, whatever the text says
            if sample.name in (family, family + "_total") and \
                    labels.items() <= sample.labels.items():
                return float(sample.value)
    return 0.0


def pending(metrics_port: int, model: str) -> int:
    """Requests queued for ``model`` now (``nv_inference_pending_request_count``): only a
    scheduler that holds requests (dynamic, sequence batchers) counts them."""
    return int(metric(metrics_port, "nv_inference_pending_request_count", model=model))


def request_counts(http_port: int, model: str) -> dict[str, int]:
    """success, fail, executions of ``model`` (version 1) from the statistics extension."""
    answer = call(http_port, "GET", f"/v2/models/{model}/versions/1/stats")
    assert answer.status == 200, answer.error
    stats = json.loads(answer.body)["model_stats"][0]
    inference = stats["inference_stats"]
    return {"success": inference["success"]["count"], "fail": inference["fail"]["count"],
            "executions": stats["execution_count"]}

"""Who holds a perf_analyzer run that did not end: perf_analyzer itself, or the server.

perf_analyzer 2.51 can wait forever on itself when ``--request-count`` is given. That
option makes each worker thread send its share of N requests and stop, and makes the main
thread poll, once a second and with no time limit, until N request records have been
collected (``InferenceProfiler::Measure``). Two races in perf_analyzer leave it short:

- Discarded records (the one seen in CI). The main thread starts the workers
  (``ChangeConcurrencyLevel``, or ``InitCustomIntervals`` for ``--request-intervals``) and
  only then, in ``ProfileHelper``, empties their records with ``SwapRequestRecords`` into a
  vector it throws away. Requests completed in between are never counted, the workers do
  not replace them, and the main thread sleeps forever. A busy machine that holds the main
  thread back a few milliseconds while the workers run is enough; ``--request-intervals``
  (4 worker threads, the first request 1 ms after the start) hits it most. Seen once in CI
  and once in about 1,600 ``--request-intervals`` runs here beside other tests and CPU hogs
  (none in 240 runs of the other modes): the server had answered all 20 requests (5 on each
  of the 4 connections, by their byte counts), held none, every connection was idle, and
  perf_analyzer's only thread left was its main thread in ``clock_nanosleep`` under
  ``InferenceProfiler::Measure`` (gdb). Holding the main thread a second at
  ``SwapRequestRecords`` under gdb reproduces it every time, with ``--request-intervals`` and
  with the concurrency modes alike (over gRPC too). Upstream's code is unchanged
  (perf_analyzer ``main``, 2025-12).
- A lost wake-up. Request-rate and custom-interval workers sleep on a condition variable
  until the main thread sets ``execute_`` and calls ``notify_all()``;
  ``RequestRateManager::ResumeWorkers`` does both without the workers' mutex (the 2.51
  binary's disassembly: a byte store, then a tail call to ``notify_all``). A worker that has
  just seen ``execute_`` false and is not yet waiting sleeps until the program exits, and
  its share is never sent. Holding one worker there under gdb reproduces it: the server
  answers 15 of 20 and holds none; left are the main thread in ``clock_nanosleep`` and the
  worker in ``futex``.

Both print "Sending N benchmark requests / Using synchronous calls for inference" and then
nothing. Time-window runs are not affected (their measurement ends on time).

``snapshot`` reads, from ``/proc`` and without stopping the process, what each of
perf_analyzer's threads is blocked in and what is queued on its connections to the server;
``Hang`` puts two snapshots a moment apart together with the server's own account
(requests answered, requests pending). The hang is perf_analyzer's own only when, in both
looks, the server holds no request and answered none in between, every connection is idle,
and either every thread waits on a lock, a condition variable or a timer, or the server has
answered every request the run was to send. Anything else (a thread blocked on a socket
with requests unanswered, bytes not read, a pending request, a server still answering) is
the server's or unknown, and fails the test.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

# Linux system call numbers of the waits that matter here, per machine.
SYSCALL_NAMES = {
    "x86_64": {0: "read", 1: "write", 7: "poll", 23: "select", 35: "nanosleep",
               42: "connect", 44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg",
               202: "futex", 230: "clock_nanosleep", 232: "epoll_wait", 270: "pselect6",
               271: "ppoll", 281: "epoll_pwait", 441: "epoll_pwait2"},
    "aarch64": {22: "epoll_pwait", 63: "read", 64: "write", 72: "pselect6", 73: "ppoll",
                98: "futex", 101: "nanosleep", 115: "clock_nanosleep", 203: "connect",
                206: "sendto", 207: "recvfrom", 211: "sendmsg", 212: "recvmsg",
                441: "epoll_pwait2"},
}
# Waits that only another thread of the same process, or a timer, can end: a lock or a
# condition variable (futex) and sleeps. A thread in anything else (poll, read, recvfrom,
# epoll_wait, ... or running) may be waiting for the server.
WAITS_ON_ITSELF = frozenset({"futex", "nanosleep", "clock_nanosleep"})
TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
              "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT",
              "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


@dataclass(frozen=True)
class ThreadWait:
    """One thread of the client and what it is blocked in (a system call's name,
    ``running``, or ``unreadable: ...`` when /proc would not say)."""

    tid: int
    wait: str


@dataclass(frozen=True)
class Connection:
    """A TCP connection from the client to the server's port and the bytes queued on it
    (``send``: written, not yet acknowledged; ``receive``: arrived, not yet read), at the
    client's end and at the server's (None when that end was not found)."""

    client_port: int
    state: str
    client_send: int
    client_receive: int
    server_send: int | None
    server_receive: int | None

    @property
    def idle(self) -> bool:
        return (self.state == "ESTABLISHED" and self.client_send == self.client_receive == 0
                and self.server_send == 0 and self.server_receive == 0)


@dataclass(frozen=True)
class ClientSnapshot:
    threads: tuple[ThreadWait, ...]
    connections: tuple[Connection, ...]

    @property
    def waits_on_itself(self) -> bool:
        """Every thread waits on a lock, a condition variable or a timer, and every
        connection to the server is idle."""
        return (bool(self.threads) and all(t.wait in WAITS_ON_ITSELF for t in self.threads)
                and all(c.idle for c in self.connections))

    def describe(self) -> str:
        threads = ", ".join(f"{t.tid} {t.wait}" for t in self.threads) or "none"
        connections = "; ".join(
            f":{c.client_port} {c.state} client send/receive queue {c.client_send}/"
            f"{c.client_receive} B, server {c.server_send}/{c.server_receive} B"
            for c in self.connections) or "none"
        return f"threads: {threads}\nconnections to the server: {connections}"


@dataclass(frozen=True)
class ServerAccount:
    """What the server says about the model: requests answered (success + failure counts
    of the statistics extension) and requests pending (``nv_inference_pending_request_count``
    summed over every model)."""

    answered: int
    pending: int


@dataclass(frozen=True)
class Hang:
    """Two looks, a moment apart, at a run that had not ended after its timeout.
    ``expected``: the requests the run was to send (``--request-count``), when known."""

    timeout_s: float
    answered_before: int
    expected: int | None
    first: tuple[ClientSnapshot, ServerAccount]
    second: tuple[ClientSnapshot, ServerAccount]

    @property
    def answered(self) -> int:
        """Requests the server answered since the run began (at the second look)."""
        return self.second[1].answered - self.answered_before

    @property
    def perf_analyzer_waits_on_itself(self) -> bool:
        """perf_analyzer's own hang (see the module's docstring)."""
        (client1, server1), (client2, server2) = self.first, self.second
        server_idle = (server1.pending == server2.pending == 0
                       and server1.answered == server2.answered)
        connections_idle = all(c.idle for c in client1.connections + client2.connections)
        threads_wait_on_themselves = client1.waits_on_itself and client2.waits_on_itself
        all_answered = self.expected is not None and self.answered >= self.expected
        return server_idle and connections_idle and (threads_wait_on_themselves
                                                      or all_answered)

    def explain(self) -> str:
        verdict = ("perf_analyzer waits on itself (a race of its own: see "
                   "tests/core/perf_analyzer_hang.py)" if self.perf_analyzer_waits_on_itself
                   else "NOT shown to be perf_analyzer's own wait: a thread may be waiting "
                   "for the server, bytes are queued, or the server holds or is still "
                   "answering a request")
        expected = "" if self.expected is None else f" of the {self.expected} it was to send"
        looks = "\n".join(
            f"look {i}: server answered {server.answered - self.answered_before} request(s) "
            f"of this model since the run began{expected}, {server.pending} pending\n"
            f"{client.describe()}"
            for i, (client, server) in enumerate((self.first, self.second), 1))
        return f"no end after {self.timeout_s:g} s; {verdict}\n{looks}"


def _syscall_name(number: int) -> str:
    return SYSCALL_NAMES.get(platform.machine(), {}).get(number, f"syscall {number}")


def _thread_wait(task: Path) -> str:
    try:
        fields = (task / "syscall").read_text().split()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    if not fields:
        return "unreadable: empty"
    if fields[0] == "running":
        return "running"
    number = int(fields[0])
    return "not in a system call" if number < 0 else _syscall_name(number)


def _threads(pid: int) -> tuple[ThreadWait, ...]:
    tasks = Path(f"/proc/{pid}/task")
    try:
        tids = sorted(int(name) for name in os.listdir(tasks))
    except OSError:
        return ()
    return tuple(ThreadWait(tid, _thread_wait(tasks / str(tid))) for tid in tids)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fds = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fds)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fds / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


@dataclass(frozen=True)
class _TcpRow:
    local_port: int
    remote_port: int
    state: str
    send: int
    receive: int
    inode: str


def _tcp_rows(pid: int) -> list[_TcpRow]:
    rows = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            send, receive = (int(q, 16) for q in fields[4].split(":"))
            rows.append(_TcpRow(int(fields[1].rsplit(":", 1)[1], 16),
                                int(fields[2].rsplit(":", 1)[1], 16),
                                TCP_STATES.get(fields[3], fields[3]), send, receive, fields[9]))
    return rows


def _connections(pid: int, server_port: int) -> tuple[Connection, ...]:
    rows = _tcp_rows(pid)
    inodes = _socket_inodes(pid)
    connections = []
    for row in rows:
        if row.inode not in inodes or row.remote_port != server_port:
            continue
        server_end = next((r for r in rows if r.local_port == server_port
                           and r.remote_port == row.local_port), None)
        connections.append(Connection(
            row.local_port, row.state, row.send, row.receive,
            None if server_end is None else server_end.send,
            None if server_end is None else server_end.receive))
    return tuple(sorted(connections, key=lambda c: c.client_port))


def snapshot(pid: int, server_port: int) -> ClientSnapshot:
    """What the client process ``pid`` is blocked in, thread by thread, and what is queued
    on its TCP connections to ``server_port`` (on this host's loopback)."""
    return ClientSnapshot(_threads(pid), _connections(pid, server_port))


def port_of(url: str) -> int:
    """The port of ``HOST:PORT`` (perf_analyzer's ``-u``)."""
    return int(url.rsplit(":", 1)[1])


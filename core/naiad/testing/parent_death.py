"""Start a process that ends when the process that started it ends, however that one ends.

A test runner stopped with SIGTERM or SIGKILL (a CI timeout, a Ctrl-C twice) must not leave
servers and their workers running under PID 1. Linux's PR_SET_PDEATHSIG makes the kernel send
the child a signal when its parent dies; a small launcher sets it in the child and then
``exec``s the real command, so no Python code runs between fork and exec in a process that
has threads (``preexec_fn`` is not safe there).

The Linux caveat: the "parent" PR_SET_PDEATHSIG watches is the *thread* that forked the
child, not the process. A server started from a short-lived thread (the differential suite
starts naiad and tritonserver in parallel threads) would get the signal as soon as that
thread returns. So every child is forked by one thread that lives as long as the process: the
main thread when it is the caller, else a daemon spawner thread started on first use.

Elsewhere than Linux the launcher does nothing and the server outlives a killed runner.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

PARENT_PID_ENV = "NAIAD_TESTING_PARENT_PID"
PARENT_DEATH_SIGNAL = signal.SIGTERM  # a server stops its workers on SIGTERM

# Runs in the child (python -S -c): ask for the signal, check the parent has not already
# ended (then the request came too late and nothing would ever fire), become the command.
_LAUNCHER = """
import ctypes, os, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, int(sys.argv[1]))  # PR_SET_PDEATHSIG
except (AttributeError, OSError):
    pass
if os.getppid() != int(os.environ.pop(sys.argv[2])):
    sys.exit(1)
os.execvp(sys.argv[3], sys.argv[3:])
"""


def launcher_command(cmd: Sequence[str]) -> list[str]:
    """``cmd`` behind the launcher that sets the parent-death signal before exec."""
    return [sys.executable, "-S", "-c", _LAUNCHER, str(int(PARENT_DEATH_SIGNAL)), PARENT_PID_ENV,
            *cmd]


_jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _spawn_forever() -> None:
    while True:
        job, result = _jobs.get()
        try:
            result.set_result(job())
        except BaseException as exc:  # handed to the caller, who raises it
            result.set_exception(exc)


def _in_long_lived_thread(job: Callable[[], Any]) -> Any:
    """Run ``job`` in a thread that ends only with the process."""
    global _spawner
    if threading.current_thread() is threading.main_thread():
        return job()
    with _spawner_lock:
        if _spawner is None:
            _spawner = threading.Thread(target=_spawn_forever, name="naiad-testing-spawner",
                                        daemon=True)
            _spawner.start()
    result: Future[Any] = Future()
    _jobs.put((job, result))
    return result.result()


def popen_ending_with_this_process(cmd: Sequence[str], **kwargs: Any
                                   ) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(cmd, **kwargs)`` whose process gets SIGTERM when this process ends
    (Linux), forked by a thread that lives as long as this process."""
    env = dict(kwargs.pop("env", None) or os.environ)
    env[PARENT_PID_ENV] = str(os.getpid())
    full = launcher_command(cmd)
    return _in_long_lived_thread(lambda: subprocess.Popen(full, env=env, **kwargs))

"""The server ``Triton`` starts (PyTriton's ``pytriton.server.triton_server``): ``naiad serve``
as a child process of the program, in a session of its own, ended with the program."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys

LOGGER = logging.getLogger("naiad.pytriton.triton")


def start(serve_args: list[str]) -> subprocess.Popen[bytes]:
    """Start ``naiad serve`` with ``serve_args``; the modules the callables import by name
    resolve in its workers as in this program (its ``sys.path`` as ``PYTHONPATH``)."""
    env = dict(os.environ)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    command = [sys.executable, "-m", "naiad", "serve", *serve_args]
    LOGGER.debug("Starting naiad: %s", " ".join(command))
    return subprocess.Popen(command, env=env, start_new_session=True,
                            preexec_fn=_die_with_parent)


def stop(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM, then SIGKILL to its whole session past ``timeout_s`` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _die_with_parent() -> None:
    """In the server child: SIGTERM when the program that started it ends (PDEATHSIG), so
    a killed program leaves no server behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)

"""Running an environment's build steps (venv, pip, conda-unpack) as logged child
processes with a deadline, and the short error they fail with."""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from naiad.errors import unavailable

log = logging.getLogger("naiad.backend.python")

#: Variables the worker launcher removes from the worker's environment, as bin/activate does:
#: a PYTHONHOME meant for the server's interpreter breaks any other interpreter.
UNSET_VARIABLES = ("PYTHONHOME",)


#: The most lines of a failed build's output that its error message carries ...
ERROR_TAIL_LINES = 15


#: ... and the most characters, in all ...
ERROR_TAIL_CHARS = 4000


#: ... and per line (pip's "Ignored the following versions" line lists every version seen).
ERROR_LINE_CHARS = 300


#: Lines pip prints as ERROR that are notes, not the failure: the versions it skipped (for
#: another Python, or yanked) come before the line that says what failed.
PIP_NOTES = ("ERROR: Ignored the following",)


#: How many lines of a build's output are kept to find its error lines in.
OUTPUT_KEPT_LINES = 400


def child_env(variables: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET_VARIABLES}
    env.update(variables)
    return env


def run_logged(model_name: str, label: str, command: list[str], *, cwd: Path,
                variables: dict[str, str], lock_fd: int, deadline: float, limit: str,
                failure: str) -> None:
    """Run ``command``, forwarding each line it prints to the log at INFO as it comes, and
    kill it (with everything it started) at ``deadline``. Raises UNAVAILABLE with
    ``failure`` and the tail of the output when it fails."""
    env = child_env(variables)
    env.pop("PYTHONPATH", None)  # the server's packages must not satisfy the model's
    env.update(PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1")  # lines as they come; no ~/.local
    if deadline <= time.monotonic():
        raise unavailable(f"{failure}: not finished within {limit}")
    try:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", start_new_session=True,
                                   pass_fds=(lock_fd,))
    except OSError as exc:
        raise unavailable(f"{failure}: cannot start {command[0]}: {exc.strerror}") from None
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # pip's own children too

    timer = threading.Timer(deadline - time.monotonic(), kill)
    timer.daemon = True
    timer.start()
    output: collections.deque[str] = collections.deque(maxlen=OUTPUT_KEPT_LINES)
    with process:  # closes the pipe
        try:
            assert process.stdout is not None
            for raw in process.stdout:
                line = raw.rstrip()
                if line:
                    log.info("model '%s': %s: %s", model_name, label, line)
                    output.append(line)
            status = process.wait()
        finally:
            timer.cancel()
            if process.poll() is None:
                kill()
                process.wait()
    if status != 0 and timed_out.is_set():
        raise unavailable(f"{failure}: stopped, not finished within {limit}; last output: "
                          f"{tail(list(output))}")
    if status != 0:
        raise unavailable(f"{failure} (exit status {status}): {tail(list(output))}")


def tail(lines: list[str]) -> str:
    """The end of a failed command's output, from its first error line when it has one
    (pip prints ``ERROR: ...``, a failed build backend ``error: ...``)."""
    lines = [_shortened(line.strip()) for line in lines if line.strip()]
    first_error = next((i for i, line in enumerate(lines)
                        if line.startswith(("ERROR:", "error:", "Error:"))
                        and not line.startswith(PIP_NOTES)), None)
    if first_error is not None:
        lines = lines[first_error:]
    text = " | ".join(lines[-ERROR_TAIL_LINES:]) or "no output"
    return text if len(text) <= ERROR_TAIL_CHARS else "..." + text[-ERROR_TAIL_CHARS:]


def _shortened(line: str) -> str:
    if len(line) <= ERROR_LINE_CHARS:
        return line
    half = ERROR_LINE_CHARS // 2
    return f"{line[:half]} ... {line[-half:]}"

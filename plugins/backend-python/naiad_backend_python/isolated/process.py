"""One worker process: start it, wait for it, end it.

The process runs ``stub/naiad_stub_main.py`` with the model's interpreter, in a process group
of its own (so that ending it also ends whatever the model started, and a Ctrl-C in the
server's terminal does not reach it). What is said over its socket is ``channel.py``'s job.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from naiad.errors import unavailable
from naiad_backend_python.isolated.channel import WorkerChannel
from naiad_backend_python.isolated.regions import RegionPolicy
from naiad_backend_python.stub import naiad_stub_wire as wire

log = logging.getLogger("naiad.backend.python")

STUB_DIR = Path(wire.__file__).parent
# Started with -c rather than the script's path, so that PYTHONSAFEPATH or -P in the
# environment cannot keep the stub's folder off sys.path.
_BOOTSTRAP = ("import sys; sys.path[:0] = [sys.argv[1]]; import naiad_stub_main; "
              "sys.exit(naiad_stub_main.main(sys.argv[1:]))")
# How long a worker that was asked to end (or was killed) may take to be reaped.
REAP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Launch:
    """How to start a worker: the interpreter and what to add to its environment."""

    python: str
    variables: dict[str, str]
    description: str
    #: variables of the server's environment the worker must not inherit (PYTHONHOME)
    unset: tuple[str, ...] = ()


def describe_exit(returncode: int | None) -> str:
    """How a process ended, in words: "exited with code 1", "was killed by SIGSEGV"."""
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


class WorkerProcess:
    """A started worker and its :class:`WorkerChannel`. ``kill``, ``wait`` and ``mark_gone``
    may come from any thread."""

    def __init__(self, launch: Launch, model_name: str, instance_name: str,
                 regions: RegionPolicy) -> None:
        self.model_name = model_name
        self.instance_name = instance_name
        self.regions = regions
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {key: value for key, value in os.environ.items() if key not in launch.unset}
        env.update(launch.variables)
        try:
            self.process = subprocess.Popen(
                [launch.python, "-c", _BOOTSTRAP, str(STUB_DIR), str(child.fileno()),
                 str(os.getpid())],
                pass_fds=[child.fileno()], env=env, stdin=subprocess.DEVNULL,
                start_new_session=True)
        except OSError as exc:
            parent.close()
            raise unavailable(f"model '{model_name}' instance '{instance_name}': cannot start "
                              f"its worker process with {launch.python} "
                              f"({launch.description}): {exc.strerror or exc}") from None
        finally:
            child.close()
        self.pid = self.process.pid
        self.channel = WorkerChannel(wire.Connection(parent), model_name, instance_name,
                                     regions)
        self.channel.on_fault = self._fault
        #: why the server ended the worker (it broke the protocol, or outlived the execute
        #: timeout); "" when it ended by itself
        self.fault = ""
        self._gone = threading.Event()

    # --- ending it ----------------------------------------------------------------------

    def finalize(self, timeout_s: float) -> None:
        """Ask the worker to run ``finalize`` and exit; kill it after ``timeout_s``."""
        reply = self.channel.finalize(timeout_s)
        if reply is None:
            if self.wait(0) is None:
                log.warning("model '%s' instance '%s': finalize took more than %s s; the "
                            "worker process (pid %d) is killed", self.model_name,
                            self.instance_name, timeout_s, self.pid)
                self.kill()
            else:
                log.warning("model '%s' instance '%s': the worker process (pid %d) ended "
                            "during finalize", self.model_name, self.instance_name, self.pid)
        elif reply.get("error"):
            log.error("model '%s' instance '%s': finalize failed: %s", self.model_name,
                      self.instance_name, reply["error"])
        self.reap()

    def _fault(self, reason: str) -> None:
        """The worker cannot be talked to any more: end it (its supervisor restarts it, as
        after a crash)."""
        if not self.fault:
            self.fault = reason
        self.kill()

    def describe_end(self, returncode: int | None) -> str:
        """How the process ended, with the server's reason if the server ended it."""
        text = describe_exit(returncode)
        if self.fault:
            text += f" by the server ({self.fault})"
        return text

    def kill(self) -> None:
        """End the worker and everything it started, now."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.mark_gone()

    def mark_gone(self) -> None:
        """Unblock a call waiting on the socket: the process has ended."""
        if not self._gone.is_set():
            self._gone.set()
            try:
                self.channel.connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def wait(self, timeout_s: float | None = None) -> int | None:
        """The exit status once the process has ended (None if it is still running)."""
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def reap(self) -> None:
        """Wait for the process (killing it if it lingers), end what it left running in its
        group, and release the socket and the region."""
        if self.wait(REAP_TIMEOUT_S) is None:
            self.kill()
            self.wait()
        try:
            os.killpg(self.pid, signal.SIGKILL)  # children the model started
        except (ProcessLookupError, PermissionError):
            pass
        self.mark_gone()
        self.channel.close()


def ended_message(model_name: str, instance_name: str, pid: int, returncode: int | None,
                  doing: str, fault: str = "") -> str:
    how = describe_exit(returncode) + (f" by the server ({fault})" if fault else "")
    # the last sentence is Triton's, for whoever greps the log for it (L0_backend_python)
    return (f"model '{model_name}' instance '{instance_name}': its worker process (pid {pid}) "
            f"{how} {doing}. Stub process '{instance_name}' is not healthy.")


"""One worker process and the server's end of its socket: start it, talk to it, end it.

The process runs ``stub/naiad_stub_main.py`` with the model's interpreter, in a process group
of its own (so that ending it also ends whatever the model started, and a Ctrl-C in the
server's terminal does not reach it). Messages are ``naiad_stub_wire`` frames; tensors go
through a shared memory region that this side owns and grows (see :class:`RegionPolicy`).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from naiad.errors import InferenceServerError, Status, unavailable
from naiad.types import InferenceRequest, InferenceResponse, Tensor
from naiad_backend_python.stub import naiad_stub_wire as wire

log = logging.getLogger("naiad.backend.python")
model_log = logging.getLogger("naiad.model")

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


class WorkerDied(Exception):
    """The worker's socket closed under a call: the process ended."""


class RegionPolicy:
    """Sizes of an instance's shared memory region (Triton's ``shm-default-byte-size`` and
    ``shm-growth-byte-size``, and naiad's ``shm-max-byte-size``)."""

    def __init__(self, directory: str, default: int, growth: int, maximum: int) -> None:
        self.directory = directory
        self.default = default
        self.growth = max(growth, 1)
        self.maximum = maximum

    def size_for(self, needed: int) -> int:
        """The region size that holds ``needed`` bytes: the default, grown in steps."""
        if needed <= self.default:
            return self.default
        steps = -(-(needed - self.default) // self.growth)
        return min(self.default + steps * self.growth, self.maximum)


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
    """A started worker. ``call`` and ``execute`` are used by one thread at a time (the
    instance's); ``kill`` and ``mark_gone`` may come from any thread."""

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
        self.connection = wire.Connection(parent)
        self.region: wire.Region | None = None
        self._region_failed = False
        self._output_hint = 0  # bytes the last batch's outputs took
        self._calls = 0
        self._gone = threading.Event()

    # --- talking to it ------------------------------------------------------------------

    def call(self, header: dict, buffers: Sequence[memoryview] = (),
             fds: Sequence[int] = ()) -> tuple[dict, memoryview]:
        """Send one message and return the worker's answer (its log messages on the way
        are logged). Raises :class:`WorkerDied`."""
        try:
            self.connection.send(header, buffers, fds)
            while True:
                reply, payload, extra = self.connection.receive()
                for fd in extra:  # the worker never sends descriptors
                    os.close(fd)
                if reply.get("op") != "log":
                    return reply, payload
                self._log(reply)
        except (wire.PeerGone, OSError) as exc:
            raise WorkerDied(str(exc)) from None

    def _log(self, message: dict) -> None:
        """Log a record the worker sent as if the model had logged it here."""
        level = message.get("level", logging.INFO)
        if model_log.isEnabledFor(level):
            record = model_log.makeRecord(
                model_log.name, level, message.get("pathname", ""), message.get("lineno", 0),
                "%s", (message.get("message", ""),), None, message.get("function"),
                {"model": self.model_name, "instance": self.instance_name})
            model_log.handle(record)

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        """Run a batch in the worker. A failed batch raises :class:`InferenceServerError`
        with the model's status; a dead worker raises :class:`WorkerDied`."""
        staged = []
        needed = 0
        for request in requests:
            tensors = [(t.name, t.datatype, t.data, wire.tensor_buffer(t.datatype, t.data))
                       for t in request.inputs.values()]
            needed += sum(wire.align(len(t[3])) for t in tensors)
            staged.append((request, tensors))
        fds = self._fit_region(needed + self._output_hint)
        region = self.region
        header: dict[str, Any] = {"op": "execute", "id": self._calls}
        self._calls += 1
        packer = wire.Packer(region)
        messages = []
        for request, tensors in staged:
            requested = request.requested_outputs
            messages.append({
                "id": request.id,
                "parameters": request.parameters or None,
                "outputs": None if requested is None else [o.name for o in requested],
                "inputs": [packer.add_buffer(name, datatype, data.shape, buffer)
                           for name, datatype, data, buffer in tensors],
            })
        header["requests"] = messages
        header["out"] = packer.offset
        if fds:
            header["region_size"] = region.size  # type: ignore[union-attr]
        try:
            reply, payload = self.call(header, packer.payload, fds)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            return self._responses(reply, payload, region)
        finally:
            if reply.get("retire_region") and region is not None:
                # The model kept inputs that live in the region (see naiad_stub_main): with
                # this batch's outputs copied out, the next batch gets a new region.
                if self.region is region:
                    self.region = None
                region.close()

    def _responses(self, reply: dict, payload: memoryview, region: wire.Region | None
                   ) -> list[InferenceResponse]:
        failure = reply.get("failure")
        if failure is not None:
            status, message = failure
            log.error("%s", message)
            raise InferenceServerError(message, _status(status))
        responses = []
        output_bytes = 0
        for answer in reply["responses"]:
            error = answer.get("error")
            if error is not None:
                responses.append(InferenceResponse(
                    error=InferenceServerError(error[1], _status(error[0]))))
                continue
            outputs = []
            for descriptor in answer["outputs"]:
                name, datatype, array = wire.unpack(descriptor, region, payload, copy=True)
                output_bytes += wire.align(descriptor[5])
                outputs.append(Tensor(name, datatype, array.shape, array))
            parameters = answer.get("parameters")
            responses.append(InferenceResponse(outputs=outputs, parameters=parameters)
                             if parameters else InferenceResponse(outputs=outputs))
        self._output_hint = output_bytes
        return responses

    def _fit_region(self, needed: int) -> list[int]:
        """Make the region big enough for ``needed`` bytes where the policy allows; return
        the descriptor to send when a new region was made (the worker maps it)."""
        region = self.region
        if self._region_failed or (region is not None and needed <= region.size):
            return []
        size = self.regions.size_for(needed)
        if region is not None and size <= region.size:
            return []  # at the maximum already: what does not fit goes in the payload
        try:
            new, fd = wire.create_region(self.regions.directory, size)
        except OSError as exc:
            self._region_failed = True
            log.warning("model '%s' instance '%s': no shared memory region of %d bytes in "
                        "%s (%s; %s): its tensors travel over the worker's socket instead, "
                        "which copies them once more", self.model_name, self.instance_name,
                        size, self.regions.directory, exc.strerror or exc,
                        _free_space(self.regions.directory))
            return []
        if region is not None:
            region.close()
        self.region = new
        return [fd]

    # --- ending it ----------------------------------------------------------------------

    def finalize(self, timeout_s: float) -> None:
        """Ask the worker to run ``finalize`` and exit; kill it after ``timeout_s``."""
        timer = threading.Timer(timeout_s, self.kill)
        timer.daemon = True
        timer.start()
        try:
            reply, _ = self.call({"op": "finalize"})
            if reply.get("error"):
                log.error("model '%s' instance '%s': finalize failed: %s", self.model_name,
                          self.instance_name, reply["error"])
        except WorkerDied:
            if timer.is_alive():
                log.warning("model '%s' instance '%s': the worker process (pid %d) ended "
                            "during finalize", self.model_name, self.instance_name, self.pid)
            else:
                log.warning("model '%s' instance '%s': finalize took more than %s s; the "
                            "worker process (pid %d) was killed", self.model_name,
                            self.instance_name, timeout_s, self.pid)
        finally:
            timer.cancel()
        self.reap()

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
                self.connection.sock.shutdown(socket.SHUT_RDWR)
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
        self.connection.close()
        if self.region is not None:
            self.region.close()
            self.region = None


def _status(name: str) -> Status:
    try:
        return Status[name]
    except KeyError:
        return Status.INTERNAL


def _free_space(directory: str) -> str:
    try:
        stat = os.statvfs(directory)
    except OSError:
        return f"{directory} is missing"
    return f"{stat.f_bavail * stat.f_frsize} bytes free there"


def ended_message(model_name: str, instance_name: str, pid: int, returncode: int | None,
                  doing: str) -> str:
    return (f"model '{model_name}' instance '{instance_name}': its worker process (pid {pid}) "
            f"{describe_exit(returncode)} {doing}")


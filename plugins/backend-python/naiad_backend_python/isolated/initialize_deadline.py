"""The initialize timeout: a worker whose start and ``initialize`` take longer than
``--backend-config python,initialize-timeout-seconds`` is killed, so that its load fails
instead of holding the load (and a load slot) forever.

Triton has no such timeout (an ``initialize`` that never returns holds the load until the
server is killed), so it is off (0) by default. A thread cannot be interrupted; the worker
process can, which is why only isolated models have it."""

from __future__ import annotations

import threading

from naiad_backend_python.isolated.process import WorkerProcess

#: The setting, as a user writes it.
SETTING = "--backend-config python,initialize-timeout-seconds"


class InitializeDeadline:
    """Kills ``worker`` unless cancelled within ``seconds`` (0: never)."""

    def __init__(self, worker: WorkerProcess, seconds: float) -> None:
        self.worker = worker
        self.seconds = seconds
        self._passed = threading.Event()
        self._timer: threading.Timer | None = None
        if seconds > 0:
            self._timer = threading.Timer(seconds, self._expire)
            self._timer.daemon = True
            self._timer.name = f"naiad-init-timeout-{worker.pid}"
            self._timer.start()

    def _expire(self) -> None:
        self._passed.set()
        self.worker.kill()  # the call waiting for initialize's answer sees the socket close

    def cancel(self) -> None:
        """initialize answered (or failed): no kill from now on."""
        if self._timer is not None:
            self._timer.cancel()

    def passed(self) -> bool:
        """Whether the timeout fired (the worker was killed for it)."""
        return self._passed.is_set()

    def message(self, model_name: str, instance_name: str) -> str:
        return (f"model '{model_name}' instance '{instance_name}': initialize did not return "
                f"within {self.seconds:g} s ({SETTING}={self.seconds:g}); its worker process "
                f"(pid {self.worker.pid}) was killed")

"""Where a Python model's coroutines run: ``async def execute`` (a decoupled model's side by
side on a loop thread of the instance's own, as Triton's stub runs them; an ordinary
model's waited for there) and an ``async def`` ``initialize`` or ``finalize``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import triton_python_backend_utils as pb_utils
from naiad_stub_results import ContractError, describe

_thread_state = pb_utils._current

class BackgroundExecutes:
    """The event loop, on a thread of its own, that a decoupled model's ``async def
    execute`` coroutines run on, side by side (Triton's stub does the same)."""

    def __init__(self, instance_name: str) -> None:
        self.instance_name = instance_name
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name=f"naiad-async-execute-{instance_name}")
        self.thread.start()

    def run(self, coroutine: Any, model_dir: str) -> Any:
        """Run an ordinary model's ``async def execute`` there and wait for its result."""
        return asyncio.run_coroutine_threadsafe(_in_model(coroutine, model_dir),
                                                self.loop).result()

    def submit(self, coroutine: Any, pb_requests: list[Any]) -> None:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        future.add_done_callback(lambda done: self._done(done, pb_requests))

    def _done(self, done: Any, pb_requests: list[Any]) -> None:
        if done.cancelled():
            return
        exc = done.exception()
        if exc is None and done.result() is not None:
            exc = ContractError(f"Python model '{self.instance_name}' is using the decoupled "
                                 f"mode and the execute function must return None.")
        if exc is None:
            return
        # Triton's words for a failed execute; the requests still open get the error
        message = (f"Failed to process the request(s) for model '{self.instance_name}', "
                   f"message: {describe(exc)}")
        pb_utils.Logger.log_error(message)
        for pb_request in pb_requests:
            sender = pb_request._sender
            if sender is not None and not sender._closed:
                try:
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
                                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                except Exception:  # the model closed it meanwhile
                    pass

    def close(self, timeout: float = 30.0) -> None:
        """Let the running executes finish (up to ``timeout`` seconds), then stop."""
        pending = asyncio.run_coroutine_threadsafe(_drain(), self.loop)
        try:
            pending.result(timeout)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)
        if not self.thread.is_alive():
            self.loop.close()


async def _in_model(coroutine: Any, model_dir: str) -> Any:
    _thread_state.model_dir = model_dir  # for pb_utils.get_model_dir() on the loop's thread
    return await coroutine


async def _drain() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


def finish(result: Any, loop: asyncio.AbstractEventLoop | None = None) -> Any:
    """Await ``result`` if ``initialize``/``finalize`` was an ``async def``."""
    if not asyncio.iscoroutine(result):
        return result
    if loop is None or loop.is_closed():
        return asyncio.run(result)
    return loop.run_until_complete(result)

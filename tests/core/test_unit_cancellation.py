"""``naiad.types.Cancellation``: every callback runs exactly once, whether it was registered
before the request was cancelled, after it, or while another thread cancelled it."""

from __future__ import annotations

import sys
import threading

from naiad.types import Cancellation


def test_callbacks_before_and_after_cancel_run_once_each():
    cancellation = Cancellation()
    ran: list[str] = []
    cancellation.on_cancel(lambda: ran.append("before"))
    assert ran == [] and not cancellation.cancelled
    cancellation.cancel()
    cancellation.cancel()  # a second cancel runs nothing again
    assert ran == ["before"] and cancellation.cancelled
    cancellation.on_cancel(lambda: ran.append("after"))
    assert ran == ["before", "after"]


def test_callbacks_registered_while_another_thread_cancels_run_once_each():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads interleave within a few opcodes
    try:
        for _ in range(100):
            registered_while_cancelled()
    finally:
        sys.setswitchinterval(interval)


def registered_while_cancelled() -> None:
    """Two threads register 200 callbacks each while a third cancels."""
    cancellation = Cancellation()
    ran: list[int] = []

    def register(first: int) -> None:
        start.wait()
        for i in range(first, first + 200):
            cancellation.on_cancel(lambda i=i: ran.append(i))

    def cancel() -> None:
        start.wait()
        cancellation.cancel()

    threads = [threading.Thread(target=register, args=(0,)),
               threading.Thread(target=register, args=(200,)),
               threading.Thread(target=cancel)]
    start = threading.Barrier(len(threads))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ran) == list(range(400))

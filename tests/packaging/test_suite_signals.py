"""The processes a test starts stop on SIGINT, however the suite was started: a shell starts a
background job with SIGINT ignored, which every process would inherit
(``tests/conftest.py``, ``pytest_configure``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT_S = 60.0
# Prints whether a Python started now gets Python's own SIGINT handler.
SHOW_CHILD_HANDLER = ("import signal, subprocess, sys; print(subprocess.run([sys.executable, "
                      "'-c', 'import signal; print(signal.getsignal(signal.SIGINT) is "
                      "signal.default_int_handler)'], capture_output=True, text=True, "
                      "check=True).stdout.strip())")


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S, check=True)
    return done.stdout.strip()


def test_a_process_a_test_starts_gets_the_default_sigint_handler() -> None:
    assert _run(SHOW_CHILD_HANDLER) == "True"


def test_the_suite_restores_sigint_that_its_starter_ignored() -> None:
    ignored = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    assert _run(ignored + SHOW_CHILD_HANDLER) == "False"  # what the hook is for
    restored = (f"{ignored}import sys; sys.path.insert(0, {str(TESTS)!r}); import conftest; "
                f"conftest.pytest_configure(None); ")
    assert _run(restored + SHOW_CHILD_HANDLER) == "True"

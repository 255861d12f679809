"""Helpers for testing naiad and its plugins: real server processes and a conformance kit
(``naiad.testing.conformance``: import it from tests; it needs pytest, serving does not)."""

from naiad.testing.parent_death import popen_ending_with_this_process
from naiad.testing.server import ServerProcess, free_port, naiad_server, stop_process

__all__ = ["ServerProcess", "free_port", "naiad_server", "popen_ending_with_this_process",
           "stop_process"]

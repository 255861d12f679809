"""The errors a run stops on, each with the exit status the command line returns for it.

A format that fails to export or to match the original is not an error of the run: it is
recorded in the report as failed, and another format is chosen.
"""

from __future__ import annotations

import re

EXIT_OK = 0
EXIT_SOURCE = 1         # the model cannot be loaded or run at all
EXIT_USAGE = 2          # bad arguments, or inputs that do not match the model
EXIT_NO_FORMAT = 3      # no format exported and met the tolerance (or --format X failed)
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM: run the same command again to resume


class ConvertError(Exception):
    """Stops the run: one line for the user, and the exit status that goes with it."""

    def __init__(self, message: str, status: int = EXIT_SOURCE) -> None:
        super().__init__(message)
        self.status = status


def usage_error(message: str) -> ConvertError:
    return ConvertError(message, EXIT_USAGE)


_TERMINAL_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first non-empty line of an exception's message (framework errors run to pages),
    without terminal colour codes, cut to ``limit`` characters."""
    for line in _TERMINAL_COLOURS.sub("", str(exc)).splitlines():
        line = line.strip()
        if line:
            text = f"{type(exc).__name__}: {line}"
            return text if len(text) <= limit else text[: limit - 3] + "..."
    return type(exc).__name__

"""``pb_utils.Logger``: a model's log lines, written to Python logging (logger
``naiad.model``; a worker sends them on to the server). Re-exported by
``triton_python_backend_utils``."""

from __future__ import annotations

import enum
import logging
from typing import Any

_log = logging.getLogger("naiad.model")


class Logger:
    """Writes a model's log lines to Python logging, logger ``naiad.model``."""

    class LogLevel(enum.IntEnum):
        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    # Triton's binding takes a str message and a LogLevel (not a plain int): TypeError else

    @staticmethod
    def log(message: str, level: Logger.LogLevel = LogLevel.INFO) -> None:
        if type(level) is not Logger.LogLevel:
            raise TypeError(f"Logger.log(): level must be a pb_utils.Logger.LogLevel, not "
                            f"{type(level).__name__}")
        _log.log(_LEVELS[level], "%s", _message(message), stacklevel=2)

    @staticmethod
    def log_info(message: str) -> None:
        _log.info("%s", _message(message), stacklevel=2)

    @staticmethod
    def log_warn(message: str) -> None:
        _log.warning("%s", _message(message), stacklevel=2)

    @staticmethod
    def log_error(message: str) -> None:
        _log.error("%s", _message(message), stacklevel=2)

    @staticmethod
    def log_verbose(message: str) -> None:
        _log.debug("%s", _message(message), stacklevel=2)


def _message(message: Any) -> str:
    if not isinstance(message, str):
        raise TypeError(f"Logger: the message must be a str, not {type(message).__name__}")
    return message


_LEVELS = {
    Logger.LogLevel.INFO: logging.INFO,
    Logger.LogLevel.WARNING: logging.WARNING,
    Logger.LogLevel.ERROR: logging.ERROR,
    Logger.LogLevel.VERBOSE: logging.DEBUG,
}

"""The server's log: tritonserver's line format, its switches, and the logging extension.

``--log-info``, ``--log-warning`` and ``--log-error`` turn each severity on or off on its
own, as in Triton (a filter on the handler, not one threshold); ``--log-verbose N`` adds
debug lines. The same switches can be read and changed while the server runs, through the
logging extension (``GET``/``POST /v2/logging``, gRPC ``LogSettings``). ``log_file`` and
``log_format`` are fixed at start-up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from naiad.errors import invalid_arg

LOG_FORMATS = ("default", "ISO8601")

# Control characters (C0, DEL, C1) and the Unicode line separators: each becomes an escape
# in the values a line shows, so that a value (a model name sent by a client) cannot end
# the line and forge the next one.
_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7f, 0xa0))}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t",
                 0x2028: "\\u2028", 0x2029: "\\u2029"})


def escaped(value: object) -> object:
    """``value`` as a log line may show it: numbers as they are, anything else as its text
    with control characters escaped."""
    if isinstance(value, (int, float)):
        return value
    return str(value).translate(_CONTROL)


def message_of(record: logging.LogRecord) -> str:
    """The record's message with its arguments (the values, not the developer's format
    string) escaped by :func:`escaped`."""
    args = record.args
    if not args:
        return str(record.msg)
    if isinstance(args, dict):
        return str(record.msg) % {key: escaped(value) for key, value in args.items()}
    try:
        return str(record.msg) % tuple(escaped(value) for value in args)
    except (TypeError, ValueError):  # a format that wanted the original types (%r, %x)
        return record.getMessage().translate(_CONTROL)


class TritonLogFormatter(logging.Formatter):
    """tritonserver's line prefixes: ``I1123 16:55:53.123456 4242 naiad.models] ...``
    (default) or ``2026-11-23T16:55:53Z I naiad.models] ...`` (ISO8601)."""

    def __init__(self, log_format: str = "default") -> None:
        super().__init__()
        self.iso8601 = log_format == "ISO8601"

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname[0]
        if self.iso8601:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
            prefix = f"{stamp} {level} {record.name}] "
        else:
            local = time.localtime(record.created)
            micros = int((record.created % 1) * 1_000_000)
            prefix = (f"{level}{time.strftime('%m%d %H:%M:%S', local)}.{micros:06d} "
                      f"{record.process} {record.name}] ")
        text = prefix + message_of(record)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


@dataclass
class LogSettings(logging.Filter):
    """The switches, in Triton's names; also the handler's filter that applies them."""

    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"
    log_file: str = ""

    def __post_init__(self) -> None:
        logging.Filter.__init__(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return self.log_error
        if record.levelno >= logging.WARNING:
            return self.log_warning
        if record.levelno >= logging.INFO:
            return self.log_info
        return self.log_verbose_level > 0

    def as_dict(self) -> dict[str, bool | int | str]:
        return {"log_file": self.log_file, "log_info": self.log_info,
                "log_warning": self.log_warning, "log_error": self.log_error,
                "log_verbose_level": self.log_verbose_level, "log_format": self.log_format}

    def update(self, changes: dict[str, Any]) -> None:
        """Apply the logging extension's settings. Names Triton does not know are ignored,
        as Triton ignores them; a wrong type or a start-up-only setting is INVALID_ARG."""
        for key in ("log_info", "log_warning", "log_error"):
            if key in changes and not isinstance(changes[key], bool):
                raise invalid_arg(f"log setting '{key}' must be a boolean, got "
                                  f"{changes[key]!r}")
        verbose = changes.get("log_verbose_level", self.log_verbose_level)
        if isinstance(verbose, bool) or not isinstance(verbose, int) or verbose < 0:
            raise invalid_arg(f"log setting 'log_verbose_level' must be a non-negative "
                              f"integer, got {verbose!r}")
        for key in ("log_file", "log_format"):
            if key in changes and changes[key] != getattr(self, key):
                raise invalid_arg(f"log setting '{key}' is fixed at start-up "
                                  f"(--{key.replace('_', '-')}); it is "
                                  f"{getattr(self, key)!r}")
        for key in ("log_info", "log_warning", "log_error"):
            if key in changes:
                setattr(self, key, changes[key])
        self.log_verbose_level = verbose
        _apply_level(self)


# The settings of this process (configure() replaces them).
current = LogSettings()


def configure(settings: LogSettings) -> None:
    """Send the log to standard error or ``settings.log_file``, in tritonserver's format,
    filtered by the switches of ``settings``, which become :data:`current`."""
    global current
    handler: logging.Handler = (logging.FileHandler(settings.log_file, encoding="utf-8")
                                if settings.log_file else logging.StreamHandler())
    handler.setFormatter(TritonLogFormatter(settings.log_format))
    handler.addFilter(settings)
    logging.basicConfig(handlers=[handler], force=True)
    current = settings
    _apply_level(settings)


#: Called with the new level when the root logger's level changes (verbose logging turned
#: on or off at run time): code that makes log records elsewhere (a Python model's worker
#: process) follows it. ``naiad.backend_utils.on_log_level_change`` adds one.
level_listeners: list[Callable[[int], object]] = []


def _apply_level(settings: LogSettings) -> None:
    # Debug records are only made when verbose logging is on: the filter does the rest.
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.DEBUG if settings.log_verbose_level > 0 else logging.INFO)
    if root.level != before:
        for listener in list(level_listeners):
            try:
                listener(root.level)
            except Exception:  # a listener must not break the logging extension
                logging.getLogger("naiad").exception("a log level listener failed")

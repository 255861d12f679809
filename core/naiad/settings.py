"""Reading KEY=VALUE settings: one set of checks, units, bounds and messages for every plugin.

Plugins take settings as text: ``--backend-config NAME,KEY=VALUE``, ``--cache-config
NAME,KEY=VALUE``, a config.pbtxt ``parameters`` value, an environment variable. Each helper
here reads one such text and returns the value, or raises :class:`SettingError` with one
message shape::

    {where}{name}={text}: expected {what}

``where`` says where the setting was given (``"--cache-config redis,"``, ``"model 'm':
parameters "``; empty for an environment variable), ``name`` is the key or variable as the
user wrote it, and ``what`` names the kind, unit and bounds (``a whole number of
milliseconds from 1 to 60000``, ``a number of seconds greater than 0``). So a user reads
the same sentence whichever plugin refused a value, and a plugin author writes one line per
setting.

A public module: plugins import it (docs/plugin-author-guide.md); the core's own
``--metrics-config`` reads its values with it too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from naiad.errors import InferenceServerError, Status

#: What :func:`boolean` reads as true and as false (case-insensitive), as Triton does.
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})

_T = TypeVar("_T")


class SettingError(InferenceServerError, ValueError):
    """A setting that cannot be used: INVALID_ARG for the server (a plugin's load or start
    fails naming it), and a ``ValueError`` for code that checks command-line values."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Status.INVALID_ARG)


def refuse(name: str, text: str, what: str, where: str = "") -> SettingError:
    """The error for setting ``name`` given as ``text`` when ``what`` was expected."""
    return SettingError(f"{where}{name}={text}: expected {what}")


def boolean(name: str, text: str, *, where: str = "") -> bool:
    """``text`` as true or false (1/0, true/false, yes/no, on/off)."""
    lowered = text.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise refuse(name, text, "true or false", where)


def _unit(unit: str) -> str:
    return f" of {unit}" if unit else ""


def _span(minimum: float | None, maximum: float | None, above: bool = False) -> str:
    if minimum is not None and maximum is not None:
        return f" from {minimum:g} to {maximum:g}"
    if minimum is not None:
        return f" greater than {minimum:g}" if above else f", at least {minimum:g}"
    if maximum is not None:
        return f", at most {maximum:g}"
    return ""


def integer(name: str, text: str, *, minimum: int | None = None, maximum: int | None = None,
            unit: str = "", where: str = "") -> int:
    """``text`` as a whole number within ``minimum``..``maximum`` (either may be None).
    ``unit`` (``milliseconds``, ``bytes``) is named in the message."""
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or (minimum is not None and value < minimum) or \
            (maximum is not None and value > maximum):
        raise refuse(name, text, f"a whole number{_unit(unit)}{_span(minimum, maximum)}",
                     where)
    return value


def number(name: str, text: str, *, minimum: float | None = None,
           maximum: float | None = None, above_minimum: bool = False, unit: str = "",
           where: str = "") -> float:
    """``text`` as a finite number within ``minimum``..``maximum``; with ``above_minimum``
    it must be greater than ``minimum`` (a duration of 0 that would mean "never")."""
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    low_ok = minimum is None or (value > minimum if above_minimum else value >= minimum)
    high_ok = maximum is None or value <= maximum
    if not (math.isfinite(value) and low_ok and high_ok):
        span = (_span(minimum, None, above=True) if above_minimum and maximum is None
                else _span(minimum, maximum))
        raise refuse(name, text, f"a number{_unit(unit)}{span}", where)
    return value


def seconds(name: str, text: str, *, allow_zero: bool = False, where: str = "") -> float:
    """``text`` as a duration in seconds: more than 0 (or 0 too, with ``allow_zero``)."""
    return number(name, text, minimum=0, above_minimum=not allow_zero, unit="seconds",
                  where=where)


def read(settings: Mapping[str, str], name: str, default: _T,
         parse: Callable[..., _T], **checks: Any) -> _T:
    """``parse(name, settings[name], **checks)``, or ``default`` when ``name`` was not given:
    how a plugin reads one optional KEY=VALUE setting. A key given with an empty value is
    checked like any other (and refused by the numeric helpers): nothing given is ignored."""
    if name not in settings:
        return default
    return parse(name, settings[name], **checks)


def read_env(environ: Mapping[str, str], name: str, default: _T,
             parse: Callable[..., _T], **checks: Any) -> _T:
    """:func:`read` for an environment variable: unset or empty (``VAR=``, how shells and
    container specs leave one out) gives ``default``."""
    text = environ.get(name, "")
    if not text.strip():
        return default
    return parse(name, text, **checks)

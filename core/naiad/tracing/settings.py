"""Trace settings: what ``--trace-config`` (and the older ``--trace-*`` flags) set at
start-up, and what the trace extension changes at run time.

Triton 2.51 reads ``--trace-config [MODE,]KEY=VALUE``: the global keys ``level``
(repeatable: OFF, TIMESTAMPS, TENSORS), ``rate``, ``count`` and ``mode``; ``triton,file=PATH``
and ``triton,log-frequency=N``; ``opentelemetry,url=...``, ``resource=KEY=VALUE``
(repeatable) and the batch span processor's ``bsp_max_queue_size``, ``bsp_schedule_delay``
(milliseconds) and ``bsp_max_export_batch_size``. The deprecated ``--trace-file``,
``--trace-level``, ``--trace-rate``, ``--trace-count`` and ``--trace-log-frequency`` give
the same settings and lose to ``--trace-config``.

Where Triton accepts a command line and then traces nothing (an unknown key, a setting of
the other mode, level on without a file, a negative count), naiad refuses it at start-up
with the reason: a flag is never accepted and silently ignored. At run time only level,
rate, count and log frequency change (:func:`parse_update`), with Triton's messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from naiad.errors import InferenceServerError, invalid_arg, unsupported

#: Trace levels are bits: TIMESTAMPS and TENSORS may both be on.
OFF = 0
TIMESTAMPS = 1
TENSORS = 2
LEVELS = {"TIMESTAMPS": TIMESTAMPS, "TENSORS": TENSORS}

TRITON = "triton"
OPENTELEMETRY = "opentelemetry"
MODES = (TRITON, OPENTELEMETRY)

#: Triton's ranges (uint32 rate and log frequency, int32 count).
RATE_MAX = 2**32 - 1
COUNT_MAX = 2**31 - 1
LOG_FREQUENCY_MAX = 2**32 - 1

DEFAULT_RATE = 1000
DEFAULT_COUNT = -1  # no limit
DEFAULT_LOG_FREQUENCY = 0  # the whole trace file at shutdown

#: opentelemetry-cpp's default OTLP/HTTP endpoint, which Triton keeps.
DEFAULT_URL = "http://localhost:4318/v1/traces"
DEFAULT_SERVICE_NAME = "triton-inference-server"
#: The batch span processor's settings and defaults (queue and batch in spans, delay in
#: milliseconds), in the order Triton lists the ones not given.
BSP_DEFAULTS = (("bsp_max_export_batch_size", 512), ("bsp_schedule_delay", 5000),
                ("bsp_max_queue_size", 2048))

GLOBAL_KEYS = ("level", "rate", "count", "mode")
MODE_KEYS = {
    TRITON: ("file", "log-frequency"),
    OPENTELEMETRY: ("url", "resource", *(key for key, _ in BSP_DEFAULTS)),
}

#: The settings the trace extension changes at run time, by their protocol names.
UPDATABLE = ("trace_level", "trace_rate", "trace_count", "log_frequency")
#: Fixed at start-up: a change is refused (Triton's text for the file).
FILE_FIXED = "trace file location can not be updated through network protocol"


def level_names(level: int) -> list[str]:
    """The protocol's form of ``level``: ``["OFF"]`` or the levels that are on."""
    return [name for name, bit in LEVELS.items() if level & bit] or ["OFF"]


@dataclass(frozen=True)
class TraceValues:
    """The settings a trace extension request can change (one model's or the global ones)."""

    level: int = OFF
    rate: int = DEFAULT_RATE
    count: int = DEFAULT_COUNT
    log_frequency: int = DEFAULT_LOG_FREQUENCY


@dataclass(frozen=True)
class OpenTelemetryConfig:
    """``--trace-config opentelemetry,...``: where and how spans are exported."""

    url: str = DEFAULT_URL
    #: resource attributes, in the order given (``service.name`` defaults to Triton's)
    resource: tuple[tuple[str, str], ...] = ()
    bsp_max_queue_size: int = 2048
    bsp_schedule_delay_ms: int = 5000
    bsp_max_export_batch_size: int = 512
    #: (key, value) as given on the command line, in order: the settings view lists them
    given: tuple[tuple[str, str], ...] = ()

    def settings_view(self) -> list[tuple[str, list[str]]]:
        """The opentelemetry settings as the trace extension lists them (Triton's order:
        those given, then the batch span processor defaults not given)."""
        view: dict[str, list[str]] = {}
        for key, value in self.given:
            view.setdefault(key, []).append(value)
        for key, default in BSP_DEFAULTS:
            view.setdefault(key, [str(default)])
        return list(view.items())


@dataclass(frozen=True)
class TraceConfig:
    """Every trace setting of the command line, with Triton's defaults (tracing off)."""

    values: TraceValues = field(default_factory=TraceValues)
    file: str = ""
    mode: str = TRITON
    opentelemetry: OpenTelemetryConfig = field(default_factory=OpenTelemetryConfig)


def _integer(text: str, low: int, high: int, what: str) -> int:
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise ValueError(f"{what}: expected an integer, got '{text}'") from None
    if not low <= value <= high:
        raise ValueError(f"{what}: expected an integer from {low} to {high}, got {value}")
    return value


def _level(text: str, what: str) -> int:
    name = text.strip().upper()
    if name == "OFF":
        return OFF
    if name not in LEVELS:
        raise ValueError(f"{what}: invalid value for trace level option: {text} (expected "
                         f"OFF, TIMESTAMPS or TENSORS)")
    return LEVELS[name]


@dataclass
class _Given:
    """What the command line says, before defaults and consistency checks."""

    levels: list[int] | None = None
    rate: int | None = None
    count: int | None = None
    mode: str | None = None
    file: str | None = None
    log_frequency: int | None = None
    otel: list[tuple[str, str]] = field(default_factory=list)


def _split_entry(entry: str) -> tuple[str, str, str]:
    """``[MODE,]KEY=VALUE`` -> (mode or "", key, value)."""
    head, eq, value = entry.partition("=")
    if not eq:
        raise ValueError(f"--trace-config option format is '<trace mode>,<setting>=<value>'. "
                         f"Got {entry}")
    mode, comma, key = head.partition(",")
    if not comma:
        mode, key = "", head
    mode, key = mode.strip(), key.strip()
    if comma and mode not in MODES:
        raise ValueError(f"--trace-config {entry}: invalid value for trace mode option: "
                         f"{mode}. Available options are \"triton\" and \"opentelemetry\"")
    return mode, key, value.strip()


def _read_entry(entry: str, given: _Given) -> None:
    mode, key, value = _split_entry(entry)
    what = f"--trace-config {entry}"
    if not mode:
        if key == "level":
            given.levels = [*(given.levels or []), _level(value, what)]
        elif key == "rate":
            given.rate = _integer(value, 0, RATE_MAX, what)
        elif key == "count":
            given.count = _integer(value, -1, COUNT_MAX, what)
        elif key == "mode":
            if value not in MODES:
                raise ValueError(f"{what}: invalid value for trace mode option: {value}. "
                                 f"Available options are \"triton\" and \"opentelemetry\"")
            given.mode = value
        elif key in MODE_KEYS[TRITON]:
            raise ValueError(f"{what}: '{key}' is a setting of the triton mode: write "
                             f"--trace-config triton,{key}={value}")
        elif key in MODE_KEYS[OPENTELEMETRY]:
            raise ValueError(f"{what}: '{key}' is a setting of the opentelemetry mode: "
                             f"write --trace-config opentelemetry,{key}={value}")
        else:
            raise ValueError(f"{what}: unknown setting '{key}' (global settings: "
                             f"{', '.join(GLOBAL_KEYS)})")
        return
    if key in GLOBAL_KEYS:
        raise ValueError(f"{what}: '{key}' is a global setting: write --trace-config "
                         f"{key}={value}")
    if key not in MODE_KEYS[mode]:
        raise ValueError(f"{what}: unknown setting '{key}' of the {mode} mode (its settings: "
                         f"{', '.join(MODE_KEYS[mode])})")
    if mode == TRITON:
        if key == "file":
            given.file = value
        else:
            given.log_frequency = _integer(value, 0, LOG_FREQUENCY_MAX, what)
    else:
        given.otel.append((key, value))


def _opentelemetry(entries: Sequence[tuple[str, str]]) -> OpenTelemetryConfig:
    config = OpenTelemetryConfig(given=tuple(entries))
    resource: list[tuple[str, str]] = []
    for key, value in entries:
        what = f"--trace-config opentelemetry,{key}={value}"
        if key == "url":
            if not value.startswith(("http://", "https://")):
                raise ValueError(f"{what}: the OTLP/HTTP endpoint must be an http:// or "
                                 f"https:// URL")
            config = replace(config, url=value)
        elif key == "resource":
            name, eq, attribute = value.partition("=")
            if not eq or not name.strip():
                raise ValueError(f"{what}: expected resource=KEY=VALUE "
                                 f"(for example service.name=my-server)")
            resource.append((name.strip(), attribute.strip()))
        elif key == "bsp_schedule_delay":
            config = replace(config, bsp_schedule_delay_ms=_integer(value, 0, 2**31 - 1, what))
        elif key == "bsp_max_queue_size":
            config = replace(config, bsp_max_queue_size=_integer(value, 1, 2**31 - 1, what))
        else:
            config = replace(config,
                             bsp_max_export_batch_size=_integer(value, 1, 2**31 - 1, what))
    if config.bsp_max_export_batch_size > config.bsp_max_queue_size:
        raise ValueError(f"--trace-config opentelemetry,bsp_max_export_batch_size="
                         f"{config.bsp_max_export_batch_size} must not exceed "
                         f"bsp_max_queue_size ({config.bsp_max_queue_size})")
    return replace(config, resource=tuple(resource))


@dataclass
class DeprecatedFlags:
    """Triton's older flags (``None``: not given). They lose to ``--trace-config``."""

    trace_file: str | None = None
    trace_level: list[str] | None = None
    trace_rate: str | None = None
    trace_count: str | None = None
    trace_log_frequency: str | None = None


def _apply_deprecated(old: DeprecatedFlags, given: _Given) -> list[str]:
    """Fill ``given`` from the older flags where ``--trace-config`` left a setting unset;
    the warnings Triton prints for them."""
    warnings = []

    def warn(flag: str, replacement: str, overridden: bool) -> None:
        warnings.append(f"'{flag}' has been deprecated: use '--trace-config {replacement}' "
                        f"instead")
        if overridden:
            warnings.append(f"Overriding deprecated '{flag}' in favor of the value in "
                            f"--trace-config")

    if old.trace_file is not None:
        warn("--trace-file", "triton,file=<path>", given.file is not None)
        if given.file is None:
            given.file = old.trace_file
    if old.trace_level is not None:
        warn("--trace-level", "level=<OFF|TIMESTAMPS|TENSORS>", given.levels is not None)
        if given.levels is None:
            given.levels = [_level(value, f"--trace-level {value}") for value in old.trace_level]
    if old.trace_rate is not None:
        warn("--trace-rate", "rate=<rate>", given.rate is not None)
        if given.rate is None:
            given.rate = _integer(old.trace_rate, 0, RATE_MAX, "--trace-rate")
    if old.trace_count is not None:
        warn("--trace-count", "count=<count>", given.count is not None)
        if given.count is None:
            given.count = _integer(old.trace_count, -1, COUNT_MAX, "--trace-count")
    if old.trace_log_frequency is not None:
        warn("--trace-log-frequency", "triton,log-frequency=<n>",
             given.log_frequency is not None)
        if given.log_frequency is None:
            given.log_frequency = _integer(old.trace_log_frequency, 0, LOG_FREQUENCY_MAX,
                                           "--trace-log-frequency")
    return warnings


def parse_trace_config(entries: Iterable[str], old: DeprecatedFlags | None = None
                       ) -> tuple[TraceConfig, list[str]]:
    """The :class:`TraceConfig` of ``--trace-config`` ``entries`` and the older flags, and
    the deprecation warnings to log. Raises :class:`ValueError` saying what is wrong."""
    given = _Given()
    for entry in entries:
        _read_entry(entry, given)
    warnings = _apply_deprecated(old or DeprecatedFlags(), given)
    mode = given.mode or TRITON
    level = 0
    for bit in given.levels or ():
        level |= bit
    values = TraceValues(
        level=level,
        rate=DEFAULT_RATE if given.rate is None else given.rate,
        count=DEFAULT_COUNT if given.count is None else given.count,
        log_frequency=given.log_frequency or DEFAULT_LOG_FREQUENCY)
    if mode == TRITON:
        if given.otel:
            keys = ", ".join(dict.fromkeys(key for key, _ in given.otel))
            raise ValueError(f"--trace-config opentelemetry settings ({keys}) are given but "
                             f"the trace mode is triton: add --trace-config mode=opentelemetry")
        file = given.file or ""
        if level != OFF and not file:
            raise ValueError(f"--trace-config level={'/'.join(level_names(level))} in triton "
                             f"mode needs a trace file: add --trace-config triton,file=PATH")
        if level != OFF and values.rate == 0:
            raise ValueError("--trace-config rate=0 traces nothing in triton mode (the rate "
                             "is 1 of N requests; N must be at least 1)")
        if file and not Path(file).parent.is_dir():
            raise ValueError(f"--trace-config triton,file={file}: the folder "
                             f"'{Path(file).parent}' does not exist")
        return TraceConfig(values=values, file=file, mode=mode), warnings
    if given.file is not None or given.log_frequency is not None:
        raise ValueError("the trace file and log frequency are settings of the triton mode, "
                         "but the trace mode is opentelemetry (spans go to the OTLP url)")
    if level & TENSORS:
        raise ValueError("--trace-config level=TENSORS is not supported in opentelemetry "
                         "mode (as in Triton): use TIMESTAMPS")
    return TraceConfig(values=values, mode=mode,
                       opentelemetry=_opentelemetry(given.otel)), warnings


# --- run-time updates (the trace extension) ---------------------------------------------

#: An update: the new value of each setting named (None: clear it, fall back).
Update = dict[str, "int | None"]


def _one_value(key: str, value: object) -> str | None:
    """A scalar setting's text; None to clear it. gRPC sends a list of strings (empty:
    clear), HTTP a string or null."""
    if value is None:
        return None
    if isinstance(value, list):
        if not value:
            return None
        if len(value) > 1:
            raise invalid_arg(f"expect only 1 value for '{key}'")
        value = value[0]
    if not isinstance(value, str):
        raise invalid_arg(f"'{key}' must be a string, got {type(value).__name__} {value!r}")
    return value


def _parse_integer(key: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise invalid_arg(f"Unable to parse '{key}', got: {text}") from None
    if key == "trace_count" and value < -1:
        raise invalid_arg(f"Unable to parse '{key}'. Expecting value >= -1, got:{value}")
    if not low <= value <= high:
        raise invalid_arg(f"Unable to parse '{key}', value is out of range [ {low}, {high} ], "
                          f"got: {text}")
    return value


def _parse_levels(value: object) -> int | None:
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid_arg(f"'trace_level' must be a list of strings (OFF, TIMESTAMPS, "
                          f"TENSORS), got {value!r}")
    names = [v.strip().upper() for v in value]
    if "OFF" in names:
        if len(names) > 1:
            raise invalid_arg("Expect only one trace level 'OFF' is specified")
        return OFF
    level = 0
    for name, original in zip(names, value, strict=True):
        if name not in LEVELS:
            raise invalid_arg(f"unknown trace level '{original}' in 'trace_level' (expected "
                              f"OFF, TIMESTAMPS or TENSORS)")
        level |= LEVELS[name]
    return level


def parse_update(changes: Mapping[str, object], config: TraceConfig) -> Update:
    """A trace extension request's settings, checked. Level, rate, count and log frequency
    change; ``trace_file`` is refused as Triton refuses it (UNSUPPORTED); ``trace_mode`` and
    the opentelemetry settings are fixed at start-up (400 unless unchanged); other keys are
    ignored, as Triton ignores them. Raises :class:`InferenceServerError` naming the
    setting."""
    if "trace_file" in changes:
        raise unsupported(FILE_FIXED)
    update: Update = {}
    for key, value in changes.items():
        if key == "trace_level":
            level = _parse_levels(value)
            if level is not None and level & TENSORS and config.mode == OPENTELEMETRY:
                raise invalid_arg("'trace_level' TENSORS is not supported in opentelemetry "
                                  "mode (as in Triton): use TIMESTAMPS")
            update["level"] = level
        elif key in ("trace_rate", "trace_count", "log_frequency"):
            text = _one_value(key, value)
            low, high = {"trace_rate": (0, RATE_MAX), "trace_count": (-1, COUNT_MAX),
                         "log_frequency": (0, LOG_FREQUENCY_MAX)}[key]
            name = {"trace_rate": "rate", "trace_count": "count",
                    "log_frequency": "log_frequency"}[key]
            update[name] = None if text is None else _parse_integer(key, text, low, high)
        elif key == "trace_mode":
            text = _one_value(key, value)
            if text is not None and text != config.mode:
                raise invalid_arg(f"'trace_mode' is fixed at start-up (--trace-config "
                                  f"mode=...); this server traces in {config.mode} mode")
        elif key in MODE_KEYS[OPENTELEMETRY]:
            raise invalid_arg(f"'{key}' is fixed at start-up (--trace-config "
                              f"opentelemetry,{key}=...)")
    return update


def check_valid(values: TraceValues, config: TraceConfig) -> None:
    """Refuse a setting that would turn tracing on and trace nothing (Triton's texts)."""
    if values.level == OFF:
        return
    reason = ""
    if values.rate == 0 and config.mode == TRITON:
        reason = "sample rate must be non-zero"
    elif config.mode == TRITON and not config.file:
        reason = "trace file name is not given"
    if reason:
        raise InferenceServerError(f"Attempting to set invalid trace setting :{reason}")

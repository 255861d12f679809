"""The frontend's flags on ``naiad serve`` and its registration (``naiad.frontends:openai``).

Imported whenever ``naiad serve`` builds its flags: only argparse here; the frontend itself
(starlette, uvicorn, transformers) is imported when it is built.
"""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from naiad import hookimpl

if TYPE_CHECKING:
    from naiad.types import Frontend, FrontendContext

#: Triton's defaults (python/openai/openai_frontend/main.py)
DEFAULT_PORT = 9000
DEFAULT_MAX_TOKENS = 16
DEFAULT_MAX_TOOL_CALL_PARSE_BYTES = 1024 * 1024
TOOL_CALL_PARSERS = ("llama3", "mistral")
REQUEST_FORMATS = ("vllm", "tensorrtllm")


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "on", "yes"):
        return True
    if lowered in ("false", "0", "off", "no"):
        return False
    raise argparse.ArgumentTypeError(f"'{value}' is not a boolean (true/false)")


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not an integer") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not greater than 0")
    return number


#: where the names of the OpenAI flags given on the command line are kept (the API is off
#: unless --allow-openai: a setting given while it is off is named in a warning, not
#: dropped without a word)
GIVEN = "openai_flags_given"

log = logging.getLogger("naiad.openai")


def _record(namespace: argparse.Namespace, option_string: str | None) -> None:
    if option_string:
        setattr(namespace, GIVEN, [*getattr(namespace, GIVEN, []), option_string])


class _Store(argparse.Action):
    """``store``, remembering that the flag was given (:data:`GIVEN`)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        _record(namespace, option_string)


class _Restriction(argparse.Action):
    """Appends ``APIS HEADER VALUE`` and refuses an unknown or twice-restricted API at
    once (a usage error, exit 2), with Triton's messages."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from naiad_frontend_openai.settings import parse_restrictions

        given = [*getattr(namespace, self.dest, []), list(values)]  # type: ignore[call-overload]
        try:
            parse_restrictions(given)
        except ValueError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        setattr(namespace, self.dest, given)
        _record(namespace, option_string)


@hookimpl
def naiad_frontend_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("OpenAI-compatible frontend (docs/openai.md)")
    group.add_argument("--allow-openai", type=_bool, nargs="?", const=True, default=False,
                       metavar="BOOL",
                       help="serve the OpenAI API (default false: as tritonserver, naiad serve "
                            "opens no OpenAI port unless asked; '--allow-openai' alone is true)")
    group.add_argument("--openai-address", action=_Store, default=None, metavar="HOST",
                       help="address of the OpenAI API (default: --http-address's, as "
                            "Triton's frontends share --host)")
    group.add_argument("--openai-port", action=_Store, type=int, default=DEFAULT_PORT,
                       metavar="PORT",
                       help=f"port of the OpenAI API (default {DEFAULT_PORT}); a port "
                            f"another process holds stops start-up")
    group.add_argument("--reuse-openai-port", action=_Store, type=_bool, nargs="?",
                       const=True, default=False, metavar="BOOL",
                       help="let other servers listen on the same OpenAI port (SO_REUSEPORT, "
                            "each of them setting it; default false)")
    group.add_argument("--tokenizer", action=_Store, default=None, metavar="PATH",
                       help="a Hugging Face tokenizer folder (or hub id, when the hub can be "
                            "reached) for chat templates and token counts; a model whose "
                            "folder holds a tokenizer uses its own")
    group.add_argument("--chat-template", action=_Store, default=None, metavar="FILE",
                       help="a Jinja chat template file used instead of the tokenizer's")
    group.add_argument("--tool-call-parser", action=_Store, choices=TOOL_CALL_PARSERS,
                       default=None,
                       help="how tool calls are read from generated text (tools with "
                            "tool_choice auto need one)")
    group.add_argument("--max-tool-call-parse-bytes", action=_Store, type=_positive,
                       default=DEFAULT_MAX_TOOL_CALL_PARSE_BYTES, metavar="BYTES",
                       help="most generated text the streaming tool-call parser re-reads per "
                            "request; past it the stream ends with finish_reason 'length' and "
                            "the model's work is cancelled (default 1 MiB)")
    group.add_argument("--default-max-tokens", action=_Store, type=_positive,
                       default=DEFAULT_MAX_TOKENS, metavar="N",
                       help=f"max_tokens of a request that gives none (default "
                            f"{DEFAULT_MAX_TOKENS})")
    group.add_argument("--openai-request-format", action=_Store, choices=REQUEST_FORMATS,
                       default=None,
                       help="tensor format of every model (Triton's --backend): default "
                            "vllm's for backend 'vllm' models, TensorRT-LLM's for the rest")
    group.add_argument("--openai-restricted-api", nargs=3, action=_Restriction, default=[],
                       metavar=("APIS", "HEADER", "VALUE"),
                       help="APIs (comma-separated: inference, model-repository, metrics, "
                            "health) answered only to requests with this header value "
                            "(repeatable)")
    group.add_argument("--openai-max-concurrent-streams", action=_Store, type=_positive,
                       default=1024, metavar="N",
                       help="most generations under way at once through the OpenAI API; "
                            "more are answered 503 (default 1024)")


@hookimpl
def naiad_frontend(options: argparse.Namespace) -> object:
    """The OpenAI frontend when ``--allow-openai`` asks for it. Off, the OpenAI flags given
    are named in a warning (they would otherwise change nothing without a word)."""
    if not getattr(options, "allow_openai", False):
        given = sorted(set(getattr(options, GIVEN, [])))
        if given:
            log.warning("%s: the OpenAI API is off, so %s nothing; add --allow-openai to "
                        "serve it (docs/openai.md)", ", ".join(given),
                        "this changes" if len(given) == 1 else "these change")
        return None
    return build_frontend


def build_frontend(context: FrontendContext) -> Frontend:
    """The OpenAI frontend for a running server (imports the frontend's modules now)."""
    from naiad_frontend_openai.frontend import OpenAIFrontend
    from naiad_frontend_openai.settings import OpenAISettings

    return OpenAIFrontend(context, OpenAISettings.from_options(context.options))

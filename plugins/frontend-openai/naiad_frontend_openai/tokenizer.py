"""Tokenizers: chat templates and token counts, for each model.

A model whose folder (or version folder) holds a tokenizer (``tokenizer_config.json``) uses
its own, beyond Triton, which has one ``--tokenizer`` for every model; the others use
``--tokenizer``. A folder with ``tokenizer.json`` is read with the ``tokenizers`` library and
its chat template rendered with Jinja as transformers renders it (sandboxed, ``tojson``,
``raise_exception``, ``strftime_now``, the special tokens as variables): a fraction of a
second, where importing transformers takes seconds. Anything else (a hub id, a
SentencePiece-only tokenizer) goes through transformers' ``AutoTokenizer``. Loaded on
first use, in a worker thread, and cached by source.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
from pathlib import Path
from typing import Any

from naiad_frontend_openai.errors import server_error

TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER_FILE = "tokenizer.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


class FolderTokenizer:
    """A ``tokenizer.json`` and its ``tokenizer_config.json``, without transformers."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        config_path = folder / TOKENIZER_CONFIG
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        template = config.get("chat_template")
        if (folder / CHAT_TEMPLATE_FILE).is_file():
            template = (folder / CHAT_TEMPLATE_FILE).read_text()
        if isinstance(template, list):  # named templates: the default one
            template = next((t["template"] for t in template if t.get("name") == "default"),
                            template[0]["template"] if template else None)
        self.chat_template: str | None = template
        self.special_tokens = {key: _token_text(config.get(key)) for key in (
            "bos_token", "eos_token", "unk_token", "pad_token")}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def apply_chat_template(self, conversation: list[dict], tokenize: bool = False,
                            add_generation_prompt: bool = True,
                            tools: list[dict] | None = None,
                            chat_template: str | None = None) -> str:
        template = chat_template or self.chat_template
        if template is None:
            raise ValueError("this tokenizer has no chat template (tokenizer_config.json "
                             "chat_template): cannot use chat template; give one with "
                             "--chat-template")
        return _compiled(template).render(messages=conversation, tools=tools,
                                          add_generation_prompt=add_generation_prompt,
                                          **self.special_tokens)


def _token_text(token: Any) -> str | None:
    if isinstance(token, dict):
        return token.get("content")
    return token


_TEMPLATES: dict[str, Any] = {}


def _compiled(source: str) -> Any:
    """A chat template compiled as transformers compiles it (cached)."""
    found = _TEMPLATES.get(source)
    if found is None:
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
                   separators: Any = None, sort_keys: bool = False) -> str:
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                              separators=separators, sort_keys=sort_keys)

        def strftime_now(format: str) -> str:
            return datetime.datetime.now().strftime(format)

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.filters["tojson"] = tojson
        environment.globals["raise_exception"] = raise_exception
        environment.globals["strftime_now"] = strftime_now
        found = _TEMPLATES[source] = environment.from_string(source)
    return found


class Tokenizers:
    """The tokenizer of each model, loaded once."""

    def __init__(self, default: str | None, chat_template: Path | None) -> None:
        self.default = default
        self.template = chat_template.read_text() if chat_template is not None else None
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    def source_for(self, model: Any) -> str | None:
        """Where ``model``'s tokenizer comes from: its folder, else ``--tokenizer``."""
        model_dir = getattr(getattr(model, "context", None), "model_dir", None)
        if model_dir is not None:
            for folder in (Path(model_dir) / str(model.version), Path(model_dir)):
                if (folder / TOKENIZER_CONFIG).is_file():
                    return str(folder)
        return self.default or None

    async def get(self, model: Any) -> Any | None:
        """``model``'s tokenizer, None when it has none."""
        source = self.source_for(model)
        if source is None:
            return None
        found = self._cache.get(source)
        if found is None:
            found = await asyncio.to_thread(self._load, source)
        return found

    def preload(self) -> None:
        """Load ``--tokenizer`` now (start-up), so the first request does not wait."""
        if self.default:
            self._load(self.default)

    def _load(self, source: str) -> Any:
        with self._lock:
            if source not in self._cache:
                self._cache[source] = _load(source)
            return self._cache[source]

    def apply_chat_template(self, tokenizer: Any, messages: list[dict],
                            tools: list[dict] | None) -> str:
        """The prompt for ``messages`` (and ``tools``) through the chat template."""
        try:
            prompt = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, tools=tools,
                chat_template=self.template)
        except Exception as exc:  # a template's own error names itself
            raise server_error(f"{type(exc).__name__}: {exc}") from None
        if not isinstance(prompt, str):
            raise server_error("the chat template did not give a prompt string")
        return prompt


def _load(source: str) -> Any:
    folder = Path(source)
    try:
        if (folder / TOKENIZER_FILE).is_file():
            return FolderTokenizer(folder)
    except Exception as exc:
        raise server_error(f"cannot load the tokenizer '{source}': {type(exc).__name__}: "
                           f"{exc}") from None
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise server_error(f"the tokenizer '{source}' has no {TOKENIZER_FILE}: reading it "
                           f"needs transformers (pip install transformers): {exc}") from None
    try:
        return AutoTokenizer.from_pretrained(source)
    except Exception as exc:
        raise server_error(f"cannot load the tokenizer '{source}': {type(exc).__name__}: "
                           f"{exc}") from None


def count_tokens(tokenizer: Any, text: str) -> int:
    """How many tokens ``text`` is (no special tokens added)."""
    return len(tokenizer.encode(text, add_special_tokens=False))

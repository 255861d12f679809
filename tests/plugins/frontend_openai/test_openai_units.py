"""The OpenAI frontend's parts without a server: tool-call parsers (whole and streamed),
the stop matcher, the body limit, the admission limit, the restriction parser."""

from __future__ import annotations

import asyncio
import json

import pytest
from naiad_frontend_openai.engine import Admission
from naiad_frontend_openai.errors import OpenAIError
from naiad_frontend_openai.generation import StopMatcher
from naiad_frontend_openai.limits import BodyLimit
from naiad_frontend_openai.settings import parse_restrictions
from naiad_frontend_openai.tool_parsers import (
    Llama3Parser,
    MistralParser,
    StreamingToolCalls,
)

LLAMA = ('<|python_tag|>{"name": "a", "parameters": {"x": 1}}; '
         '{"name": "b", "parameters": {"y": "z"}}')
MISTRAL = '[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]'


def test_llama3_and_mistral_parse_whole_texts() -> None:
    content, calls = Llama3Parser().parse(LLAMA)
    assert content is None
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("a", {"x": 1}),
                                                                  ("b", {"y": "z"})]
    content, calls = MistralParser().parse(MISTRAL)
    assert content is None and [c.name for c in calls] == ["a", "b"]
    assert Llama3Parser().parse("plain text") == ("plain text", [])
    assert MistralParser().parse("[TOOL_CALLS][{broken") == ("[TOOL_CALLS][{broken", [])
    assert Llama3Parser().parse('{"no": "name"}') == ('{"no": "name"}', [])


@pytest.mark.parametrize(("parser", "text"), [(Llama3Parser(), LLAMA),
                                              (MistralParser(), MISTRAL)])
def test_streamed_tool_calls_arrive_as_each_completes(parser, text: str) -> None:
    stream = StreamingToolCalls(parser)
    deltas = []
    for start in range(0, len(text), 5):
        deltas += stream.feed(text[start:start + 5], final=False)
    deltas += stream.feed("", final=True)
    assert not any("content" in d for d in deltas)
    calls = [d["tool_calls"][0] for d in deltas]
    assert [(c["index"], c["function"]["name"]) for c in calls] == [(0, "a"), (1, "b")]
    assert stream.called


def test_streamed_text_that_is_no_tool_call_is_content_at_once() -> None:
    stream = StreamingToolCalls(Llama3Parser())
    assert stream.feed("Hello", final=False) == [{"content": "Hello"}]
    assert stream.feed(" {x}", final=False) == [{"content": " {x}"}]
    held = StreamingToolCalls(MistralParser())
    assert held.feed("[TOOL", final=False) == []  # could still be "[TOOL_CALLS]"
    assert held.feed("S are", final=True) == [{"content": "[TOOLS are"}]


def test_stop_matcher_holds_back_only_what_could_start_a_stop() -> None:
    matcher = StopMatcher(["END", "xy"])
    assert matcher.feed("abc") == "a"  # "bc" could begin "END"
    assert matcher.feed("dE") == "bc"
    assert matcher.feed("ND more") == "d"
    assert matcher.stopped
    assert StopMatcher([]).feed("anything") == "anything"
    tail = StopMatcher(["END"])
    assert tail.feed("abEN") == "ab" and tail.flush() == "EN"


def test_admission_refuses_past_its_limit() -> None:
    admission = Admission(2)
    admission.enter()
    admission.enter()
    with pytest.raises(OpenAIError) as error:
        admission.enter()
    assert error.value.status == 503 and "--openai-max-concurrent-streams" in error.value.message
    admission.leave()
    admission.enter()


def test_restrictions_parse_as_triton_checks_them() -> None:
    assert parse_restrictions([["inference,metrics", "Key", "v"]]) == {
        "inference": ("key", "v"), "metrics": ("key", "v")}
    with pytest.raises(ValueError, match="Unknown API 'nope'"):
        parse_restrictions([["nope", "k", "v"]])
    with pytest.raises(ValueError, match="can not be specified in multiple config groups"):
        parse_restrictions([["health", "k", "v"], ["health", "k2", "v2"]])


def test_body_limit_reads_within_its_time() -> None:
    async def app(scope, receive, send):
        raise AssertionError("the app must not be reached")

    async def slow_receive():
        await asyncio.sleep(10)

    sent = []

    async def send(message):
        sent.append(message)

    limit = BodyLimit(app, 100, timeout_s=0.05)
    asyncio.run(limit({"type": "http", "method": "POST", "path": "/v1/completions",
                       "headers": []}, slow_receive, send))
    assert sent[0]["status"] == 408


def test_openai_flags_given_while_the_api_is_off_are_named_in_a_warning(caplog) -> None:
    from naiad.cli import build_parser
    from naiad.plugins import PluginManager

    plugins = PluginManager()
    plugins.load_frontends()
    for off in ([], ["--allow-openai=false"]):
        caplog.clear()
        options = build_parser().parse_args(["serve", "--model-repository", "/tmp", *off,
                                             "--tokenizer", "t", "--openai-port=9001"])
        assert plugins.frontends(options) == []
        assert ("--openai-port, --tokenizer: the OpenAI API is off, so these change nothing; "
                "add --allow-openai to serve it") in caplog.text
    caplog.clear()
    assert plugins.frontends(build_parser().parse_args(
        ["serve", "--model-repository", "/tmp"])) == []
    assert "OpenAI" not in caplog.text  # nothing given, nothing said


def test_the_frontend_hooks_add_flags_and_build_the_frontend() -> None:
    from naiad.cli import build_parser
    from naiad.plugins import PluginManager

    def parse(*flags: str):
        return build_parser().parse_args(["serve", "--model-repository", "/tmp", *flags])

    options = parse("--allow-openai", "--openai-port", "1234", "--tool-call-parser", "mistral")
    assert options.openai_port == 1234 and options.tool_call_parser == "mistral"
    plugins = PluginManager()
    assert plugins.load_frontends() == ["openai"]
    assert len(plugins.frontends(options)) == 1
    assert len(plugins.frontends(parse("--allow-openai=true"))) == 1
    assert plugins.frontends(parse()) == []  # off unless asked for, as tritonserver
    assert plugins.frontends(parse("--allow-openai=false")) == []
    assert PluginManager(block=["naiad-frontend-openai"]).load_frontends() == []
    with pytest.raises(SystemExit):  # a usage error, exit 2
        parse("--openai-restricted-api", "inference,nope", "k", "v")


def test_chat_templates_render_without_transformers(tmp_path) -> None:
    import subprocess
    import sys

    from naiad_frontend_openai.tokenizer import Tokenizers, count_tokens

    from tests.plugins.frontend_openai.openai_models import build_tokenizer

    folder = build_tokenizer(tmp_path / "tokenizer")
    tokenizers = Tokenizers(str(folder), None)
    tokenizers.preload()
    tokenizer = tokenizers._cache[str(folder)]
    messages = [{"role": "user", "content": "hello"}]
    assert tokenizers.apply_chat_template(tokenizer, messages, None) == \
        "<|user|>hello\n<|assistant|>"
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert '<|tools|>[{"type": "function"' in tokenizers.apply_chat_template(
        tokenizer, messages, tools)
    assert count_tokens(tokenizer, "hello world") > 0
    override = tmp_path / "template.jinja"
    override.write_text("{{ bos_token }}{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    assert Tokenizers(str(folder), override).apply_chat_template(tokenizer, messages, None) \
        == "<s>[hello]"
    # Reading a tokenizer folder and rendering its template import no transformers.
    check = subprocess.run([sys.executable, "-c", (
        "import sys; from naiad_frontend_openai.tokenizer import Tokenizers; "
        f"t = Tokenizers({str(folder)!r}, None); t.preload(); "
        f"t.apply_chat_template(t._cache[{str(folder)!r}], [{{'role': 'user', "
        "'content': 'x'}], None); assert 'transformers' not in sys.modules")],
        capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr

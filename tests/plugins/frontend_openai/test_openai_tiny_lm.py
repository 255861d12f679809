"""The OpenAI API over a tiny Hugging Face causal LM in a decoupled Python model (random
weights from a config, the tokenizer trained in the test): token-by-token streaming, usage
from the model's counts, sampling parameters, a disconnect that stops the model, embeddings."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.plugins.frontend_openai.conftest import OpenAIServer

# Its server starts two Python models that import torch and transformers: tens of seconds on
# two cores, past the default run's budget (the same paths run on scripted_llm there).
pytestmark = pytest.mark.long

MESSAGES = [{"role": "user", "content": "what is the weather in paris today"}]


def test_chat_completion_of_the_tiny_lm(lm_server: OpenAIServer) -> None:
    client = lm_server.client()
    answer = client.chat.completions.create(model="tiny_lm", messages=MESSAGES, max_tokens=8)
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"  # the model reports 8 tokens of the 8 allowed
    assert answer.usage.completion_tokens == 8
    assert answer.usage.prompt_tokens > 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 8
    # Greedy: the same answer again; the default max_tokens (16) when none is given.
    again = client.chat.completions.create(model="tiny_lm", messages=MESSAGES, max_tokens=8)
    assert again.choices[0].message.content == choice.message.content
    default = client.chat.completions.create(model="tiny_lm", messages=MESSAGES)
    assert default.usage.completion_tokens == 16


def test_sampling_parameters_reach_the_model(lm_server: OpenAIServer) -> None:
    client = lm_server.client()

    def sample(seed: int) -> str:
        return client.chat.completions.create(
            model="tiny_lm", messages=MESSAGES, max_completion_tokens=12, temperature=2.0,
            top_p=1.0, seed=seed).choices[0].message.content

    assert sample(1) == sample(1)
    assert len({sample(1), sample(2), sample(3)}) > 1


def test_streamed_chat_is_token_by_token(lm_server: OpenAIServer) -> None:
    client = lm_server.client()
    whole = client.chat.completions.create(model="tiny_lm", messages=MESSAGES,
                                           max_tokens=10).choices[0].message.content
    chunks = list(client.chat.completions.create(
        model="tiny_lm", messages=MESSAGES, max_tokens=10, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert not chunks[0].choices[0].delta.content
    content = [c.choices[0].delta.content for c in chunks[1:] if c.choices
               and c.choices[0].delta.content]
    assert len(content) >= 5  # one chunk per token (the tokenizer merges a few)
    assert "".join(content) == whole
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishing[-1] == "length" and not any(finishing[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10


def test_embeddings(lm_server: OpenAIServer) -> None:
    client = lm_server.client()
    result = client.embeddings.create(model="tiny_embed",
                                      input=["hello world", "machine learning is fun"])
    assert [item.index for item in result.data] == [0, 1]
    assert len(result.data[0].embedding) == 32  # the tiny LM's hidden size
    assert result.data[0].embedding != result.data[1].embedding
    assert result.usage.prompt_tokens > 0
    short = client.embeddings.create(model="tiny_embed", input="hello world", dimensions=8)
    assert short.data[0].embedding == pytest.approx(result.data[0].embedding[:8], rel=1e-5)


def test_a_client_that_disconnects_cancels_the_model(lm_server: OpenAIServer) -> None:
    log = lm_server.repository / "tiny_lm" / "cancelled.log"
    before = log.read_text().splitlines() if log.exists() else []
    body = json.dumps({"model": "tiny_lm", "messages": MESSAGES, "max_tokens": 400,
                       "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", lm_server.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: "
                     b"application/json\r\ncontent-length: " + str(len(body)).encode()
                     + b"\r\n\r\n" + body)
        received = b""
        while received.count(b"data: ") < 4:  # a few tokens in: the model is generating
            received += sock.recv(65536)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if log.exists() and len(log.read_text().splitlines()) > len(before):
            break
        time.sleep(0.1)
    steps = log.read_text().splitlines()[len(before):]
    assert steps, "the model never saw the request cancelled"
    assert int(steps[0]) < 400  # it stopped early


def test_completions_of_the_tiny_lm(lm_server: OpenAIServer) -> None:
    client = lm_server.client()
    streamed = list(client.completions.create(model="tiny_lm", prompt="hello naiad",
                                              max_tokens=6, stream=True,
                                              stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in streamed if c.choices)
    plain = client.completions.create(model="tiny_lm", prompt="hello naiad", max_tokens=6)
    assert text == plain.choices[0].text
    assert streamed[-1].usage.completion_tokens == 6 == plain.usage.completion_tokens
    assert plain.choices[0].finish_reason == "length"

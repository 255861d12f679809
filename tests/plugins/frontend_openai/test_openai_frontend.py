"""The OpenAI API on ``naiad serve``, judged by the official ``openai`` client: chat and
completions, plain and streamed, usage, stop, tool calls, embeddings, errors, a client
that disconnects, model listing."""

from __future__ import annotations

import json
import socket
import time

import openai
import pytest
import requests

from tests.plugins.frontend_openai.conftest import OpenAIServer

MESSAGES = [{"role": "user", "content": "what is the weather in paris today"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}


def say(text: str) -> list[dict]:
    """Messages that make scripted_llm answer ``text``."""
    return [{"role": "user", "content": f"SAY:{text}"}]


def test_models_are_listed(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    names = {model.id for model in client.models.list()}
    assert names == {"mock_llm", "identity_py", "scripted_llm", "tool_stream_py", "llm_pre",
                     "llm_gen", "llm_post", "llm_ensemble", "params_echo", "vllm_echo"}
    model = client.models.retrieve("scripted_llm")
    assert model.id == "scripted_llm" and model.object == "model" and model.created > 0
    with pytest.raises(openai.NotFoundError) as error:
        client.models.retrieve("no_such_model")
    assert "no_such_model" in error.value.message


def test_metrics_and_readiness_on_the_same_port(openai_server: OpenAIServer) -> None:
    base = openai_server.base_url
    assert requests.get(f"{base}/health/ready", timeout=10).status_code == 200
    metrics = requests.get(f"{base}/metrics", timeout=10)
    assert metrics.status_code == 200 and "nv_cpu_utilization" in metrics.text
    assert 'nv_inference_request_success{model="mock_llm"' in metrics.text
    assert requests.get(f"{base}/does-not-exist", timeout=10).status_code == 404
    assert requests.get(f"{base}/v1/completions", timeout=10).status_code == 405


def test_chat_through_the_chat_template(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    # mock_llm answers its prompt: the messages rendered by the tokenizer's chat template.
    answer = client.chat.completions.create(model="mock_llm", messages=[
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]}])
    assert answer.choices[0].message.content == (
        "<|system|>be brief\n<|user|>hello\n<|assistant|>")
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].finish_reason == "stop"
    # No token counts from the model: counted with the tokenizer.
    assert answer.usage.prompt_tokens == answer.usage.completion_tokens > 0


def test_streamed_chat(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    chunks = list(client.chat.completions.create(
        model="scripted_llm", messages=say("streamed in pieces"), stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert not chunks[0].choices[0].delta.content
    content = [c.choices[0].delta.content for c in chunks[1:] if c.choices
               and c.choices[0].delta.content]
    assert content == ["stre", "amed", " in ", "piec", "es"]  # one chunk per response
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishing[-1] == "stop" and not any(finishing[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert all(c.id == chunks[0].id for c in chunks)


def test_completions_plain_streamed_and_echo(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    answer = client.completions.create(model="mock_llm", prompt="hello naiad")
    assert answer.choices[0].text == "hello naiad"  # mock_llm repeats its input
    assert answer.choices[0].finish_reason == "stop"
    echoed = client.completions.create(model="scripted_llm", prompt="SAY:there", echo=True)
    assert echoed.choices[0].text == "SAY:therethere"
    streamed = list(client.completions.create(model="scripted_llm", prompt="SAY:one two",
                                              stream=True,
                                              stream_options={"include_usage": True}))
    assert [c.choices[0].text for c in streamed if c.choices] == ["one ", "two", ""]
    assert streamed[-2].choices[0].finish_reason == "stop"
    assert streamed[-1].usage.completion_tokens > 0


def test_stop_sequences_cut_the_text(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    answer = client.chat.completions.create(model="scripted_llm",
                                            messages=say("one two three four"),
                                            stop=["thr"])
    assert answer.choices[0].message.content == "one two "
    assert answer.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(model="scripted_llm",
                                                 messages=say("one two three four"),
                                                 stop="o t", stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "one tw"


def test_llama3_tool_calls(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    call = '{"name": "get_current_weather", "parameters": {"city": "Paris"}}'
    answer = client.chat.completions.create(model="scripted_llm", messages=say(call),
                                            tools=[WEATHER_TOOL])
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    (tool_call,) = choice.message.tool_calls
    assert tool_call.function.name == "get_current_weather"
    assert json.loads(tool_call.function.arguments) == {"city": "Paris"}
    # Streamed: the call arrives as a tool_calls delta, no content.
    chunks = list(client.chat.completions.create(
        model="scripted_llm", messages=say("<|python_tag|>" + call), tools=[WEATHER_TOOL],
        stream=True))
    calls = [t for c in chunks for t in (c.choices[0].delta.tool_calls or [])]
    assert [t.function.name for t in calls] == ["get_current_weather"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert not any(c.choices[0].delta.content for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # Plain text with tools: content, finish_reason stop.
    plain = client.chat.completions.create(model="scripted_llm", messages=say("no tools"),
                                           tools=[WEATHER_TOOL])
    assert plain.choices[0].message.content == "no tools"
    assert plain.choices[0].finish_reason == "stop"


def test_named_and_required_tool_choice(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    arguments = '{"city": "Oslo"}'
    for choice in ({"type": "function", "function": {"name": "get_current_weather"}},
                   "required"):
        answer = client.chat.completions.create(model="scripted_llm", messages=say(arguments),
                                                tools=[WEATHER_TOOL], tool_choice=choice)
        (call,) = answer.choices[0].message.tool_calls
        assert call.function.name == "get_current_weather"
        assert json.loads(call.function.arguments) == {"city": "Oslo"}
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model="scripted_llm", messages=say("x"), tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "unknown_tool"}})
    assert "unknown_tool" in error.value.message


def test_errors_as_openai_clients_expect(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    # Triton's frontend: a request naming a model it does not serve is a 400 "Unknown
    # model" (a ClientError); GET /v1/models/nope is the 404
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(model="nope", messages=MESSAGES)
    assert unknown.value.body["message"] == "Unknown model: nope"  # type: ignore[index]
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model="mock_llm", messages=MESSAGES, n=2)
    assert "only single choice" in error.value.message
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="mock_llm", messages=[])
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="mock_llm", messages=MESSAGES,
                                       temperature="hot")
    with pytest.raises(openai.BadRequestError) as error:
        client.embeddings.create(model="mock_llm", input="hello")
    assert "does not produce embeddings" in error.value.message
    raw = requests.post(f"{openai_server.base_url}/v1/chat/completions", data=b"{not json",
                        timeout=10)
    assert raw.status_code == 422 and set(raw.json()["error"]) >= {"message", "type", "code"}
    # Fields the API does not know are accepted and ignored.
    answer = requests.post(f"{openai_server.base_url}/v1/completions", timeout=30, json={
        "model": "mock_llm", "prompt": "x", "some_new_field": {"a": 1}})
    assert answer.status_code == 200, answer.text
    # A model that does not take text says so (before any stream starts).
    raw = requests.post(f"{openai_server.base_url}/v1/completions", timeout=30,
                        json={"model": "identity_py", "prompt": "x", "stream": True})
    assert raw.status_code == 400
    assert "has no input 'text_input'" in raw.json()["error"]["message"]


def test_a_client_that_disconnects_cancels_the_model(openai_server: OpenAIServer) -> None:
    log = openai_server.repository / "scripted_llm" / "cancelled.log"
    before = log.read_text().splitlines() if log.exists() else []
    body = json.dumps({"model": "scripted_llm", "messages": say("SLOW"),
                       "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", openai_server.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: "
                     b"application/json\r\ncontent-length: " + str(len(body)).encode()
                     + b"\r\n\r\n" + body)
        received = b""
        while received.count(b"data: ") < 4:  # a few responses in: the model is running
            received += sock.recv(65536)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if log.exists() and len(log.read_text().splitlines()) > len(before):
            break
        time.sleep(0.05)
    steps = log.read_text().splitlines()[len(before):] if log.exists() else []
    assert steps, "the model never saw the request cancelled"
    assert int(steps[0]) < 500  # it stopped early


def test_a_decoupled_ensemble_streams_through_the_api(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    chunks = list(client.chat.completions.create(
        model="llm_ensemble", messages=say("alpha beta gamma delta"), stream=True,
        max_tokens=3))
    content = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert content == ["alpha ", "beta ", "gamma "]  # one chunk per response of llm_gen
    whole = client.completions.create(model="llm_ensemble", prompt="SAY:one two", max_tokens=5)
    assert whole.choices[0].text == "one two "


def test_sampling_parameters_in_tensorrt_llm_format(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    answer = client.completions.create(
        model="params_echo", prompt="hi", max_tokens=7, temperature=0.5, top_p=0.25,
        frequency_penalty=0.5, presence_penalty=-0.5, seed=42, stop=["@@", "##"])
    seen = json.loads(answer.choices[0].text)
    assert seen["text_input"] == {"shape": [1, 1], "value": ["hi"]}
    assert seen["stream"]["value"] == [False]
    assert seen["max_tokens"] == {"shape": [1, 1], "value": [7]}
    assert seen["stop_words"] == {"shape": [1, 2], "value": [b"@@".hex(),
                                                             b"##".hex()]}
    assert seen["temperature"]["value"] == [0.5] and seen["top_p"]["value"] == [0.25]
    assert seen["frequency_penalty"]["value"] == [0.5]
    assert seen["presence_penalty"]["value"] == [-0.5]
    assert seen["seed"] == {"shape": [1, 1], "value": [42]}
    default = json.loads(client.completions.create(model="params_echo", prompt="hi")
                         .choices[0].text)
    assert default["max_tokens"]["value"] == [16]  # --default-max-tokens
    assert "temperature" not in default  # nothing the request did not give


def test_vllm_format_for_backend_vllm(openai_server: OpenAIServer) -> None:
    client = openai_server.client()
    answer = client.completions.create(
        model="vllm_echo", prompt="hi", max_tokens=9, temperature=0.5, seed=3, stop="@@",
        echo=True, extra_body={"top_k": 4, "ignore_eos": True, "unknown_field": 1})
    text = answer.choices[0].text
    seen = json.loads(text)
    assert seen["text_input"] == "hi" and seen["stream"] is False
    assert seen["exclude_input_in_output"] is False  # echo
    assert json.loads(bytes.fromhex(seen["sampling_parameters"])) == {
        "temperature": 0.5, "seed": 3, "stop": ["@@"], "max_tokens": 9, "top_k": 4,
        "ignore_eos": True}
    assert seen["return_num_input_tokens"] is True
    assert answer.usage.prompt_tokens == 3 and answer.usage.completion_tokens == 5

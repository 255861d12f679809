"""Model repositories for the OpenAI frontend's tests: Triton's own CPU test models (from
../shared/upstream, copied) and models built here: a tiny Hugging Face causal LM (random
weights from a config, a tokenizer trained here with ``tokenizers`` and saved with a chat
template; nothing downloaded) served by a decoupled Python model, its embeddings, and a
scripted model that streams the text a test asks for."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

UPSTREAM = (Path(__file__).resolve().parents[3].parent / "shared" / "upstream"
            / "triton-server-openai-e1db8a6" / "python" / "openai" / "tests")

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if tools %}<|tools|>{{ tools | tojson }}\n{% endif %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}")

CORPUS = [
    "the quick brown fox jumps over the lazy dog", "machine learning is fun",
    "what is the weather in paris today", "naiad serves models the triton way",
    "tokens stream one by one to the client", "hello world, hello naiad",
] * 20


def build_tokenizer(folder: Path) -> Path:
    """A byte-level BPE tokenizer trained on a small corpus, saved as Hugging Face saves
    one (tokenizer.json, tokenizer_config.json with the chat template)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
        "eos_token": "</s>", "unk_token": "<unk>", "chat_template": CHAT_TEMPLATE,
        "model_max_length": 512}))
    (folder / "special_tokens_map.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    return folder


SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>",
                  "<|tool|>", "<|tools|>"]


TINY_LM_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1, 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] optional: true },
  { name: "stop_words" data_type: TYPE_STRING dims: [ 1, -1 ] optional: true },
  { name: "temperature" data_type: TYPE_FP32 dims: [ 1, 1 ] optional: true },
  { name: "top_p" data_type: TYPE_FP32 dims: [ 1, 1 ] optional: true },
  { name: "seed" data_type: TYPE_UINT64 dims: [ 1, 1 ] optional: true },
  { name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1, 1 ] optional: true },
  { name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1, 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ 1, -1 ] },
  { name: "num_input_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] },
  { name: "num_output_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

TINY_LM_MODEL = '''
"""A decoupled Python model around a Hugging Face causal LM (TensorRT-LLM's tensor format):
greedy, or sampled with temperature/top_p/seed; one response per token when streaming;
stops when the client cancels (and notes it in cancelled.log for the tests)."""
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig


def tiny_llama(vocab_size, auto_class):
    """Two Llama layers of width 32, random weights (seed 0): the same model every time."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=1024, bos_token_id=1, eos_token_id=2)
    return auto_class.from_config(config).eval()


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        folder = Path(args["model_repository"]) / args["model_version"]
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = tiny_llama(len(self.tokenizer), AutoModelForCausalLM)
        self.log = Path(args["model_repository"]) / "cancelled.log"
        self.step_delay = float(os.environ.get("TINY_LM_STEP_DELAY", "0"))

    def _response(self, text, prompt_tokens, tokens):
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("text_output", np.array([[text.encode()]], dtype=object)),
            pb_utils.Tensor("num_input_tokens", np.array([[prompt_tokens]], np.int32)),
            pb_utils.Tensor("num_output_tokens", np.array([[tokens]], np.int32))])

    def execute(self, requests):
        for request in requests:
            self._generate(request)
        return None

    def _generate(self, request):
        sender = request.get_response_sender()
        prompt = _scalar(request, "text_input", b"").decode()
        stream = bool(_scalar(request, "stream", False))
        max_tokens = int(_scalar(request, "max_tokens", 16))
        temperature = float(_scalar(request, "temperature", 0.0))
        top_p = float(_scalar(request, "top_p", 1.0))
        seed = _scalar(request, "seed", None)
        generator = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        prompt_tokens = ids.shape[1]
        past, generated, text_so_far, unsent = None, [], "", 0
        with torch.no_grad():
            for step in range(max_tokens):
                if request.is_cancelled():
                    with open(self.log, "a") as log:
                        log.write(f"{step}\\n")
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    return
                out = self.model(input_ids=ids if past is None else ids[:, -1:],
                                 past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1]
                logits[self.tokenizer.eos_token_id] = float("-inf")  # a fixed length
                if temperature > 0:
                    probs = torch.softmax(logits / temperature, -1)
                    sorted_probs, order = torch.sort(probs, descending=True)
                    keep = torch.cumsum(sorted_probs, 0) - sorted_probs < top_p
                    sorted_probs[~keep] = 0
                    token = order[torch.multinomial(sorted_probs, 1, generator=generator)]
                else:
                    token = logits.argmax().reshape(1)
                ids = torch.cat([ids, token.reshape(1, 1)], 1)
                generated.append(int(token))
                unsent += 1
                text = self.tokenizer.decode(generated)
                if stream and not text.endswith("\ufffd"):  # a whole character
                    sender.send(self._response(text[len(text_so_far):], prompt_tokens,
                                               unsent))
                    text_so_far, unsent = text, 0
                    if self.step_delay:
                        time.sleep(self.step_delay)
        if stream:
            text = self.tokenizer.decode(generated)
            if unsent:
                sender.send(self._response(text[len(text_so_far):], prompt_tokens, unsent))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        else:
            sender.send(self._response(self.tokenizer.decode(generated), prompt_tokens,
                                       len(generated)),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

SCRIPTED_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1, 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1, -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

SCRIPTED_MODEL = '''
"""Streams, 4 characters a response, the text after the prompt's last "SAY:" (up to the
end of that line): tool calls, stop sequences, whatever a test needs the model to say.
"SLOW" instead streams "x" every 20 ms, 500 times, unless the request is cancelled (then it
notes after how many in cancelled.log, in the model folder)."""
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.log = Path(args["model_repository"]) / "cancelled.log"

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(
                request, "text_input").as_numpy().reshape(-1)[0].decode()
            text = prompt.rsplit("SAY:", 1)[-1].split("\\n", 1)[0]
            if text == "SLOW":
                self._slow(request, sender)
                continue
            for start in range(0, len(text), 4):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor(
                    "text_output", np.array([[text[start:start + 4].encode()]], object))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def _slow(self, request, sender):
        for step in range(500):
            if request.is_cancelled():
                with open(self.log, "a") as log:
                    log.write(f"{step}\\n")
                break
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor(
                "text_output", np.array([[b"x"]], object))]))
            time.sleep(0.02)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

EMBED_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "embedding_request" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "num_input_tokens" data_type: TYPE_INT32 dims: [ 1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

EMBED_MODEL = '''
"""vLLM's embedding format on a Hugging Face model: the mean of the last hidden states."""
import json
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModel, AutoTokenizer, LlamaConfig


class TritonPythonModel:
    def initialize(self, args):
        folder = Path(args["model_repository"]) / args["model_version"]
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        torch.manual_seed(0)
        self.model = AutoModel.from_config(LlamaConfig(
            vocab_size=len(self.tokenizer), hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4)).eval()

    def execute(self, requests):
        responses = []
        for request in requests:
            body = json.loads(pb_utils.get_input_tensor_by_name(
                request, "embedding_request").as_numpy().reshape(-1)[0])
            ids = self.tokenizer(body["input"], return_tensors="pt").input_ids
            with torch.no_grad():
                vector = self.model(input_ids=ids).last_hidden_state[0].mean(0).tolist()
            dims = (body.get("pooling_params") or {}).get("dimensions")
            if dims:
                vector = vector[:dims[0]]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("text_output", np.array([json.dumps(vector).encode()], object)),
                pb_utils.Tensor("num_input_tokens", np.array([ids.shape[1]], np.int32))]))
        return responses
'''


# A TensorRT-LLM-shaped ensemble: preprocessing -> a decoupled step -> postprocessing.
ENSEMBLE_PRE_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] }
]
output [ { name: "WORDS" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
ENSEMBLE_PRE_MODEL = '''
"""The words after the prompt's last "SAY:", at most max_tokens of them."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(
                request, "text_input").as_numpy().reshape(-1)[0].decode()
            limit = int(pb_utils.get_input_tensor_by_name(
                request, "max_tokens").as_numpy().reshape(-1)[0])
            words = prompt.rsplit("SAY:", 1)[-1].split("\\n", 1)[0].split()[:limit]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "WORDS", np.array([w.encode() for w in words] or [b""], dtype=object))]))
        return responses
'''
ENSEMBLE_GEN_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "WORDS" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "WORD" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
ENSEMBLE_GEN_MODEL = '''
"""One response per word."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for word in pb_utils.get_input_tensor_by_name(request, "WORDS").as_numpy():
                if word:
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor(
                        "WORD", np.array([word], dtype=object))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''
ENSEMBLE_POST_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "WORD" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1, 1 ] } ]
"""
ENSEMBLE_POST_MODEL = '''
"""The word and a space: the text the client reads."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("text_output", np.array(
            [[pb_utils.get_input_tensor_by_name(r, "WORD").as_numpy()[0] + b" "]],
            dtype=object))]) for r in requests]
'''
ENSEMBLE_CONFIG = """
platform: "ensemble"
max_batch_size: 0
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1, 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "llm_pre" model_version: -1
      input_map { key: "text_input" value: "text_input" }
      input_map { key: "max_tokens" value: "max_tokens" }
      output_map { key: "WORDS" value: "words" } },
    { model_name: "llm_gen" model_version: -1
      input_map { key: "WORDS" value: "words" }
      output_map { key: "WORD" value: "word" } },
    { model_name: "llm_post" model_version: -1
      input_map { key: "WORD" value: "word" }
      output_map { key: "text_output" value: "text_output" } }
  ]
}
"""


# What reaches a model, in each format: the text is the JSON of what it received.
PARAMS_ECHO_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1, 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1, 1 ] optional: true },
  { name: "stop_words" data_type: TYPE_STRING dims: [ 1, -1 ] optional: true },
  { name: "temperature" data_type: TYPE_FP32 dims: [ 1, 1 ] optional: true },
  { name: "top_p" data_type: TYPE_FP32 dims: [ 1, 1 ] optional: true },
  { name: "frequency_penalty" data_type: TYPE_FP32 dims: [ 1, 1 ] optional: true },
  { name: "presence_penalty" data_type: TYPE_FP32 dims: [ 1, 1 ] optional: true },
  { name: "seed" data_type: TYPE_UINT64 dims: [ 1, 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1, 1 ] } ]
"""
PARAMS_ECHO_MODEL = '''
"""Answers the JSON of the inputs it received (TensorRT-LLM's format); stop words in hex,
so that the frontend's own stop does not cut the answer at them."""
import json

import numpy as np
import triton_python_backend_utils as pb_utils

NAMES = ("text_input", "stream", "max_tokens", "stop_words", "temperature", "top_p",
         "frequency_penalty", "presence_penalty", "seed")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seen = {}
            for name in NAMES:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    value = tensor.as_numpy()
                    seen[name] = {"shape": list(value.shape), "value": [
                        (v.hex() if name == "stop_words" else v.decode())
                        if isinstance(v, bytes) else v.item() for v in value.reshape(-1)]}
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "text_output", np.array([[json.dumps(seen).encode()]], dtype=object))]))
        return responses
'''
# A stand-in for Triton's vllm_backend, as a Python-based backend named "vllm" (so its
# models get vLLM's tensors): it answers the JSON of what it received.
FAKE_VLLM_BACKEND = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        for name, kind, dims in (("text_input", "TYPE_STRING", [1]),
                                 ("stream", "TYPE_BOOL", [1]),
                                 ("sampling_parameters", "TYPE_STRING", [1]),
                                 ("exclude_input_in_output", "TYPE_BOOL", [1]),
                                 ("return_num_input_tokens", "TYPE_BOOL", [1]),
                                 ("return_num_output_tokens", "TYPE_BOOL", [1])):
            config.add_input({"name": name, "data_type": kind, "dims": dims,
                              "optional": name != "text_input"})
        config.add_output({"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]})
        config.add_output({"name": "num_input_tokens", "data_type": "TYPE_UINT32", "dims": [1]})
        config.add_output({"name": "num_output_tokens", "data_type": "TYPE_UINT32", "dims": [1]})
        config.set_max_batch_size(0)
        config.set_model_transaction_policy({"decoupled": True})
        return config

    def execute(self, requests):
        for request in requests:
            seen = {}
            for name in ("text_input", "stream", "sampling_parameters",
                         "exclude_input_in_output", "return_num_input_tokens"):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    value = tensor.as_numpy().reshape(-1)[0]
                    # in hex: the frontend's own stop must not cut at the stop words in it
                    seen[name] = ((value.hex() if name == "sampling_parameters"
                                   else value.decode())
                                  if isinstance(value, bytes) else value.item())
            request.get_response_sender().send(pb_utils.InferenceResponse([
                pb_utils.Tensor("text_output", np.array([json.dumps(seen).encode()], object)),
                pb_utils.Tensor("num_input_tokens", np.array([3], np.uint32)),
                pb_utils.Tensor("num_output_tokens", np.array([5], np.uint32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


def write_fake_vllm_backend(backends: Path) -> Path:
    (backends / "vllm").mkdir(parents=True)
    (backends / "vllm" / "model.py").write_text(textwrap.dedent(FAKE_VLLM_BACKEND))
    return backends


def _model(repository: Path, name: str, config: str, source: str,
           files_from: Path | None = None) -> None:
    version = repository / name / "1"
    version.mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(textwrap.dedent(config))
    (version / "model.py").write_text(textwrap.dedent(source))
    if files_from is not None:
        for item in files_from.iterdir():
            shutil.copy(item, version / item.name)


def write_repository(repository: Path, upstream: bool = True) -> Path:
    """Triton's mock_llm, identity_py and tool_stream_py (``upstream``), scripted_llm and
    llm_ensemble (llm_pre -> decoupled llm_gen -> llm_post): Python models that import
    nothing heavy."""
    repository.mkdir(parents=True, exist_ok=True)
    if upstream:
        for name in ("mock_llm", "identity_py"):
            shutil.copytree(UPSTREAM / "test_models" / name, repository / name)
        shutil.copytree(UPSTREAM / "tool_parser_models" / "tool_stream_py",
                        repository / "tool_stream_py")
    _model(repository, "scripted_llm", SCRIPTED_CONFIG, SCRIPTED_MODEL)
    _model(repository, "llm_pre", ENSEMBLE_PRE_CONFIG, ENSEMBLE_PRE_MODEL)
    _model(repository, "llm_gen", ENSEMBLE_GEN_CONFIG, ENSEMBLE_GEN_MODEL)
    _model(repository, "llm_post", ENSEMBLE_POST_CONFIG, ENSEMBLE_POST_MODEL)
    _model(repository, "params_echo", PARAMS_ECHO_CONFIG, PARAMS_ECHO_MODEL)
    (repository / "vllm_echo" / "1").mkdir(parents=True)
    (repository / "vllm_echo" / "config.pbtxt").write_text('backend: "vllm"\n')
    (repository / "llm_ensemble" / "1").mkdir(parents=True)
    (repository / "llm_ensemble" / "config.pbtxt").write_text(textwrap.dedent(ENSEMBLE_CONFIG))
    return repository


def write_lm_repository(repository: Path, tokenizer: Path) -> Path:
    """tiny_lm and tiny_embed (torch and transformers in their worker processes), each
    with the tokenizer in its version folder."""
    repository.mkdir(parents=True, exist_ok=True)
    _model(repository, "tiny_lm", TINY_LM_CONFIG, TINY_LM_MODEL, tokenizer)
    _model(repository, "tiny_embed", EMBED_CONFIG, EMBED_MODEL, tokenizer)
    return repository

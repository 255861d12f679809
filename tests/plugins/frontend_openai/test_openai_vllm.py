"""vLLM models through the OpenAI API: what the frontend sends is what current vLLM takes.

Triton's vllm_backend (``src/utils/vllm_backend_utils.py``) builds
``TritonSamplingParams(**json.loads(sampling_parameters))``, a subclass of vLLM's
``SamplingParams`` (a msgspec Struct): a name that is not one of its fields fails the
request. The first test checks every name the frontend can send against vLLM's fields: those
of the installed vLLM where it is importable (detected when the test runs), else the fields
of vLLM's ``SamplingParams`` as of vLLM 0.11 (V1 engine, ``structured_outputs``), written
below. The second runs Triton's vllm_backend ``model.py`` on a GPU with a real model; it
needs what this repository's CI has not (a CUDA GPU, vllm, the backend's sources and a
model folder) and says which is missing when it skips.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("naiad_frontend_openai", reason="naiad-frontend-openai is not installed")

from naiad_frontend_openai.formats import (
    VLLM_EXTRA_SAMPLING,
    Generation,
    InputSpec,
    ModelFormat,
    build_request,
)

#: vLLM's SamplingParams fields a request may set (vLLM 0.11+, vllm/sampling_params.py);
#: the ones it sets itself after construction (``_eos_token_id``...) are left out
VLLM_SAMPLING_FIELDS = frozenset({
    "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature",
    "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "ignore_eos", "max_tokens",
    "min_tokens", "logprobs", "prompt_logprobs", "detokenize", "skip_special_tokens",
    "spaces_between_special_tokens", "include_stop_str_in_output", "output_kind",
    "structured_outputs", "logit_bias", "allowed_token_ids", "extra_args", "bad_words",
})
#: what TritonSamplingParams adds
TRITON_SAMPLING_FIELDS = frozenset({"lora_name"})


def vllm_model_format() -> ModelFormat:
    """A ``backend: "vllm"`` model's inputs, as vllm_backend's auto_complete_config
    declares them."""
    def spec(name: str, datatype: str) -> InputSpec:
        return InputSpec(name, datatype, np.object_ if datatype == "BYTES" else np.bool_,
                         (1,))

    names = {"text_input": "BYTES", "stream": "BOOL", "sampling_parameters": "BYTES",
             "exclude_input_in_output": "BOOL", "return_finish_reason": "BOOL",
             "return_cumulative_logprob": "BOOL", "return_logprobs": "BOOL",
             "return_num_input_tokens": "BOOL", "return_num_output_tokens": "BOOL"}
    return ModelFormat("llm", 1, "vllm", "vllm", False, True,
                       {name: spec(name, kind) for name, kind in names.items()})


def vllm_fields() -> tuple[frozenset[str], str]:
    """The SamplingParams fields of the installed vLLM, or the ones written here."""
    if importlib.util.find_spec("vllm") is None:
        return VLLM_SAMPLING_FIELDS, "vLLM 0.11's, written in this test (vllm not installed)"
    from vllm import SamplingParams

    fields = frozenset(name for name in SamplingParams.__struct_fields__
                       if not name.startswith("_"))
    return fields, "the installed vLLM's"


def test_every_sampling_parameter_sent_is_a_field_of_vllms_sampling_params() -> None:
    generation = Generation(
        prompt="hi", stream=True, max_tokens=8, stop=["\n"], temperature=0.5, top_p=0.9,
        frequency_penalty=0.1, presence_penalty=0.2, seed=7, echo=False,
        extra={"top_k": 4, "min_p": 0.1, "repetition_penalty": 1.1, "ignore_eos": True,
               "min_tokens": 1, "stop_token_ids": [2], "skip_special_tokens": False,
               "spaces_between_special_tokens": False, "include_stop_str_in_output": True,
               "length_penalty": 1.5, "best_of": 2, "use_beam_search": True})
    request = build_request(vllm_model_format(), generation, "r1")
    sent = json.loads(request.inputs["sampling_parameters"].data.reshape(-1)[0])
    fields, whose = vllm_fields()
    unknown = set(sent) - fields - TRITON_SAMPLING_FIELDS
    assert not unknown, f"not fields of {whose} SamplingParams: {sorted(unknown)}"
    # every extension the frontend forwards reached it, nothing vLLM dropped did
    assert set(VLLM_EXTRA_SAMPLING) <= set(sent)
    assert not {"length_penalty", "best_of", "use_beam_search"} & set(sent)
    assert sent["max_tokens"] == 8 and sent["stop"] == ["\n"]
    if importlib.util.find_spec("vllm") is not None:  # vLLM builds it as vllm_backend does
        from vllm import SamplingParams

        assert SamplingParams(**sent).max_tokens == 8


def gpu_requirements() -> str | None:
    """Why the GPU test cannot run here, or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (it needs a CUDA GPU; this repository's CI has none)"
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU"
    for variable, what in (("NAIAD_VLLM_BACKEND_SRC", "vllm_backend's src/ folder"),
                           ("NAIAD_VLLM_MODEL", "a local Hugging Face model folder")):
        if not os.environ.get(variable):
            return f"{variable} is not set ({what})"
    return None


@pytest.mark.long
def test_triton_vllm_backend_serves_chat_and_completions_on_a_gpu(tmp_path: Path) -> None:
    """Triton's vllm_backend model.py, unmodified, under naiad serve with the OpenAI API."""
    reason = gpu_requirements()
    if reason:
        pytest.skip(reason)
    import openai

    from naiad.testing import naiad_server

    backends = tmp_path / "backends"
    shutil.copytree(os.environ["NAIAD_VLLM_BACKEND_SRC"], backends / "vllm")
    version = tmp_path / "models" / "llm" / "1"
    version.mkdir(parents=True)
    (version.parent / "config.pbtxt").write_text(
        'backend: "vllm"\ninstance_group [{kind: KIND_MODEL}]\n')
    (version / "model.json").write_text(json.dumps({
        "model": os.environ["NAIAD_VLLM_MODEL"], "gpu_memory_utilization": 0.3,
        "enforce_eager": True}))
    with naiad_server("--model-repository", str(tmp_path / "models"), "--allow-openai",
                      "--backend-directory", str(backends), "--tokenizer",
                      os.environ["NAIAD_VLLM_MODEL"], ready_timeout=600) as server, \
            openai.OpenAI(base_url=f"http://127.0.0.1:{server.openai_port}/v1",
                          api_key="EMPTY") as client:
        answer = client.completions.create(model="llm", prompt="The capital of France is",
                                           max_tokens=8, temperature=0,
                                           extra_body={"top_k": 1, "min_tokens": 2})
        assert answer.choices[0].text.strip()
        assert answer.usage is not None and 2 <= answer.usage.completion_tokens <= 8
        chunks = list(client.completions.create(model="llm", prompt="Count: 1, 2,",
                                                max_tokens=8, stream=True))
        assert sum(bool(c.choices and c.choices[0].text) for c in chunks) >= 2

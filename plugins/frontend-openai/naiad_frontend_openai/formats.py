"""Triton's two tensor formats for language models, as its OpenAI frontend builds them.

vLLM's (``backend: "vllm"`` models): ``text_input``, ``stream``, ``sampling_parameters`` (a
JSON string: temperature, top_p, penalties, seed, stop, max_tokens...),
``exclude_input_in_output`` and the ``return_*`` flags. TensorRT-LLM's (everything else:
ensembles, Python and BLS models): ``text_input``, ``stream``, ``max_tokens``, ``stop_words``,
``temperature``, ``top_p``, ``frequency_penalty``, ``presence_penalty``, ``seed`` as tensors of
their own. Both read ``text_output`` back, and ``num_input_tokens`` / ``num_output_tokens``
when the model has them.

Only the inputs a model declares are sent: a model without ``top_p`` gets none (Triton would
refuse the request; docs/openai.md says which parameters reach which format). Every tensor
is shaped to the model's configuration (``[1, 1]``, ``[1]``, a batch dimension or not).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import DataType

from naiad.types import InferenceRequest, InferenceResponse, Tensor
from naiad_frontend_openai.errors import OpenAIError

#: config data types the formats use -> (KServe datatype, numpy dtype)
_TYPES: dict[int, tuple[str, Any]] = {
    DataType.TYPE_STRING: ("BYTES", np.object_),
    DataType.TYPE_BOOL: ("BOOL", np.bool_),
    DataType.TYPE_INT32: ("INT32", np.int32),
    DataType.TYPE_INT64: ("INT64", np.int64),
    DataType.TYPE_UINT32: ("UINT32", np.uint32),
    DataType.TYPE_UINT64: ("UINT64", np.uint64),
    DataType.TYPE_FP32: ("FP32", np.float32),
    DataType.TYPE_FP64: ("FP64", np.float64),
    DataType.TYPE_FP16: ("FP16", np.float16),
}

#: the inputs that turn "echo" on or off, by name (Triton's frontend looks for both)
ECHO_INPUTS = ("exclude_input_in_output", "sampling_param_exclude_input_from_output")

#: request fields passed to vLLM as sampling parameters besides the OpenAI ones the request
#: parser reads; any other field is not vLLM's to see. Each is a field of vLLM's
#: ``SamplingParams`` as of vLLM 0.11+ (V1 engine): Triton's vllm_backend builds
#: ``TritonSamplingParams(**sampling_parameters)``, a msgspec Struct, so a name vLLM does not
#: have fails the request (``length_penalty`` went with beam search's removal from
#: SamplingParams). tests/plugins/frontend_openai/test_openai_vllm.py checks these against
#: the installed vLLM where there is one.
VLLM_EXTRA_SAMPLING = {
    "top_k", "min_p", "repetition_penalty", "ignore_eos", "min_tokens", "stop_token_ids",
    "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output",
}
#: the OpenAI fields that reach vLLM's sampling parameters under their own names
VLLM_OPENAI_SAMPLING = ("temperature", "top_p", "frequency_penalty", "presence_penalty",
                        "seed", "stop", "max_tokens")


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str
    dtype: Any
    dims: tuple[int, ...]


@dataclass(frozen=True)
class ModelFormat:
    """How one model version takes a generation request: its format and its inputs."""

    name: str
    version: int
    backend: str
    #: "vllm" or "tensorrtllm"
    request_format: str
    batched: bool
    decoupled: bool
    inputs: dict[str, InputSpec] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()

    @property
    def echo_input(self) -> str | None:
        return next((name for name in ECHO_INPUTS if name in self.inputs), None)

    @classmethod
    def of(cls, model: Any, override: str | None = None) -> ModelFormat:
        """The format of a loaded version (``InferenceServer.model()``'s result)."""
        config = model.config
        backend = config.backend or ("ensemble" if config.platform == "ensemble"
                                     else config.platform)
        inputs = {}
        for item in config.input:
            kind = _TYPES.get(item.data_type)
            if kind is not None:
                inputs[item.name] = InputSpec(item.name, kind[0], kind[1], tuple(item.dims))
        return cls(model.name, model.version, backend,
                   override or ("vllm" if backend == "vllm" else "tensorrtllm"),
                   config.max_batch_size > 0, bool(model.decoupled), inputs,
                   tuple(item.name for item in config.output))

    def tensor(self, name: str, values: list[Any]) -> Tensor:
        """Input ``name`` holding ``values``, shaped as the model's config says."""
        spec = self.inputs[name]
        shape = [1] if self.batched else []
        dims = [d if d > 0 else 1 for d in spec.dims] or [1]
        variable = [i for i, d in enumerate(spec.dims) if d < 0]
        if len(values) != 1:
            if not variable:
                raise OpenAIError(400, f"model '{self.name}': input '{name}' holds "
                                  f"{list(spec.dims)} elements, not the {len(values)} the "
                                  f"request gives", "invalid_value")
            dims[variable[-1]] = len(values)
        shape += dims
        if spec.dtype is np.object_:
            data = np.array([v.encode() if isinstance(v, str) else v for v in values],
                            dtype=np.object_)
        else:
            data = np.array(values, dtype=spec.dtype)
        return Tensor(name, spec.datatype, tuple(shape), data.reshape(shape))


@dataclass
class Generation:
    """One generation request, already checked: what either format is built from."""

    prompt: str
    stream: bool
    max_tokens: int
    stop: list[str] = field(default_factory=list)
    temperature: float | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    seed: int | None = None
    echo: bool | None = None
    #: the request's other fields, passed to vLLM as sampling parameters
    extra: dict[str, Any] = field(default_factory=dict)


def build_request(model: ModelFormat, generation: Generation, request_id: str
                  ) -> InferenceRequest:
    """The inference request for ``generation`` in ``model``'s format."""
    values: dict[str, list[Any]] = {"text_input": [generation.prompt],
                                    "stream": [generation.stream]}
    if model.request_format == "vllm":
        sampling = {key: value for key, value in generation.extra.items()
                    if key in VLLM_EXTRA_SAMPLING and value is not None}
        for key in ("temperature", "top_p", "frequency_penalty", "presence_penalty", "seed"):
            value = getattr(generation, key)
            if value is not None:
                sampling[key] = value
        if generation.stop:
            sampling["stop"] = generation.stop
        sampling["max_tokens"] = generation.max_tokens
        values["sampling_parameters"] = [json.dumps(sampling)]
        values["return_logprobs"] = [False]
    else:
        values["max_tokens"] = [generation.max_tokens]
        if generation.stop:
            values["stop_words"] = list(generation.stop)
        for key in ("temperature", "top_p", "frequency_penalty", "presence_penalty", "seed"):
            value = getattr(generation, key)
            if value is not None:
                values[key] = [value]
    echo_input = model.echo_input
    if echo_input is not None:
        values[echo_input] = [not generation.echo]
    values["return_num_input_tokens"] = [True]
    values["return_num_output_tokens"] = [True]
    inputs = {name: model.tensor(name, value) for name, value in values.items()
              if name in model.inputs}
    missing = [name for name in ("text_input",) if name not in inputs]
    if missing:
        raise OpenAIError(400, f"model '{model.name}' has no input 'text_input' (BYTES): it "
                          f"does not take text in Triton's {model.request_format} format",
                          "model_not_supported")
    return InferenceRequest(model.name, model.version, inputs, id=request_id)


def embedding_request(model: ModelFormat, inputs: list[str], dimensions: int | None,
                      request_id: str) -> InferenceRequest:
    """vLLM's embedding request: ``embedding_request`` (JSON: input, pooling_params)."""
    if "embedding_request" not in model.inputs:
        raise OpenAIError(400, f"model '{model.name}' does not produce embeddings: it has no "
                          f"'embedding_request' input (vLLM's embedding format)",
                          "model_not_supported")
    pooling = {"dimensions": [dimensions]} if dimensions is not None else {}
    payload = json.dumps({"input": inputs if len(inputs) != 1 else inputs[0],
                          "pooling_params": pooling})
    values: dict[str, list[Any]] = {"embedding_request": [payload],
                                    "return_num_input_tokens": [True],
                                    "return_num_output_tokens": [True]}
    tensors = {name: model.tensor(name, value) for name, value in values.items()
               if name in model.inputs}
    return InferenceRequest(model.name, model.version, tensors, id=request_id)


def output_text(response: InferenceResponse) -> str:
    """``text_output`` of a response ("" without one), every element joined."""
    for tensor in response.outputs:
        if tensor.name == "text_output":
            parts = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                     for v in tensor.data.reshape(-1)]
            return "".join(parts)
    return ""


def token_counts(response: InferenceResponse) -> tuple[int | None, int | None]:
    """(``num_input_tokens``, ``num_output_tokens``) of a response, None where absent."""
    found: dict[str, int] = {}
    for tensor in response.outputs:
        if tensor.name in ("num_input_tokens", "num_output_tokens") and tensor.data.size:
            found[tensor.name] = int(tensor.data.reshape(-1)[0])
    return found.get("num_input_tokens"), found.get("num_output_tokens")

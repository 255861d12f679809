"""A model's inputs and outputs, precomputed at load time, and the per-request checks.

Everything the request path needs from config.pbtxt is decided once here: names, datatypes,
shapes with the implicit batch dimension, reshape targets and optional inputs. Checking a
request is then a few dict lookups and tuple comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from naiad.datatypes import config_to_datatype, format_shape
from naiad.errors import InferenceServerError, invalid_arg
from naiad.types import InferenceRequest, Tensor


@dataclass(slots=True, frozen=True)
class TensorSpec:
    """One input or output as the config declares it (dims without the batch dimension)."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None
    optional: bool

    def matches(self, shape: tuple[int, ...]) -> bool:
        dims = self.dims
        if -1 not in dims:  # a fixed shape: one comparison in C
            return tuple(shape) == dims
        if len(shape) != len(dims):
            return False
        return all(want == -1 or want == got for want, got in zip(dims, shape, strict=True))

    def reshaped(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The ``reshape`` target for a request shape (without the batch dimension). Its -1
        dimensions take the sizes of the request's variable dimensions, in order, as in
        Triton; with a different number of them, numpy infers a single -1."""
        assert self.reshape is not None
        if -1 not in self.reshape:
            return self.reshape
        sizes = iter(got for want, got in zip(self.dims, shape, strict=True) if want == -1)
        variable = sum(1 for want in self.dims if want == -1)
        if variable == self.reshape.count(-1):
            return tuple(next(sizes) if d == -1 else d for d in self.reshape)
        return self.reshape


#: How many kinds of request (see ``ModelSignature._passed``) a model remembers as checked.
PASSED_REMEMBERED = 64


class ModelSignature:
    """Input and output specs of one model and the checks a request must pass."""

    def __init__(self, name: str, config: ModelConfig) -> None:
        self.name = name
        self.max_batch_size = config.max_batch_size
        self.inputs = {t.name: _spec(t) for t in config.input}
        self.outputs = {t.name: _spec(t) for t in config.output}
        self.required = tuple(n for n, s in self.inputs.items() if not s.optional)
        # What passed the check, as (inputs' names, datatypes and shapes, outputs asked
        # for): the check is a function of exactly that, so a client that sends the same
        # kind of request again is not checked again. Not for a model with a reshape, which
        # the check applies to each request's tensors.
        self._passed: set[tuple[Any, ...]] = set()
        self._remembers = all(spec.reshape is None for spec in self.inputs.values())

    def check(self, request: InferenceRequest) -> None:
        """Raise an INVALID_ARG error naming the model and tensor when ``request`` does not
        fit the model's inputs; apply ``reshape`` so the backend sees configured shapes."""
        requested = request.requested_outputs
        try:
            key: tuple[Any, ...] | None = (
                tuple([(name, tensor.datatype, tensor.shape)
                       for name, tensor in request.inputs.items()]),
                tuple([output.name for output in requested]) if requested else None)
            if key in self._passed:
                return
        except TypeError:  # a shape given as a list: checked, not remembered
            key = None
        self._check(request)
        if key is not None and self._remembers and len(self._passed) < PASSED_REMEMBERED:
            self._passed.add(key)

    def _check(self, request: InferenceRequest) -> None:
        batch = None
        inputs = request.inputs
        for name, tensor in inputs.items():
            spec = self.inputs.get(name)
            if spec is None:
                raise invalid_arg(
                    f"unexpected inference input '{name}' for model '{self.name}': the model "
                    f"has inputs {_names(self.inputs)}")
            if tensor.datatype != spec.datatype:
                raise invalid_arg(
                    f"inference input '{name}' of model '{self.name}' has datatype "
                    f"{tensor.datatype}, but the model expects {spec.datatype}")
            shape = tensor.shape
            if self.max_batch_size > 0:
                if not shape:
                    raise self._shape_error(name, spec, shape)
                if batch is None:
                    batch = shape[0]
                    if not 1 <= batch <= self.max_batch_size:
                        raise invalid_arg(
                            f"inference input '{name}' of model '{self.name}' has batch size "
                            f"{batch} (the leading dimension of shape {format_shape(shape)}, "
                            f"the implicit batch dimension); the model accepts 1 to "
                            f"{self.max_batch_size}")
                elif shape[0] != batch:
                    raise invalid_arg(
                        f"inference input '{name}' of model '{self.name}' has batch size "
                        f"{shape[0]} but another input has batch size {batch}: all inputs of "
                        f"a request must share the leading (batch) dimension")
                if not spec.matches(shape[1:]):
                    raise self._shape_error(name, spec, shape)
                if spec.reshape is not None:
                    self._reshape(tensor, spec, (batch, *spec.reshaped(shape[1:])))
            else:
                if not spec.matches(shape):
                    raise self._shape_error(name, spec, shape)
                if spec.reshape is not None:
                    self._reshape(tensor, spec, spec.reshaped(shape))
        if len(inputs) < len(self.inputs):
            missing = [n for n in self.required if n not in inputs]
            if missing:
                raise invalid_arg(
                    f"model '{self.name}' expects input(s) {_names(missing)} but the request "
                    f"does not provide {'it' if len(missing) == 1 else 'them'} (it has "
                    f"{_names(inputs) if inputs else 'no inputs'})")
        if request.requested_outputs:
            for output in request.requested_outputs:
                if output.name not in self.outputs:
                    raise invalid_arg(
                        f"unexpected inference output '{output.name}' for model '{self.name}': "
                        f"the model has outputs {_names(self.outputs)}")

    def _reshape(self, tensor: Tensor, spec: TensorSpec, target: tuple[int, ...]) -> None:
        try:
            tensor.data = tensor.data.reshape(target)
        except ValueError:
            raise invalid_arg(
                f"input '{tensor.name}' of model '{self.name}' with shape "
                f"{format_shape(tensor.shape)} cannot take the configured reshape "
                f"{format_shape(spec.reshape or ())}") from None
        tensor.shape = tuple(tensor.data.shape)

    def _shape_error(self, name: str, spec: TensorSpec, shape: tuple[int, ...]
                     ) -> InferenceServerError:
        if self.max_batch_size > 0:
            expected = format_shape((-1, *spec.dims))
            note = (f" (the leading -1 is the implicit batch dimension, 1 to "
                    f"{self.max_batch_size}, because max_batch_size is {self.max_batch_size})")
        else:
            expected = format_shape(spec.dims)
            note = " (the model does not batch: max_batch_size is 0, so there is no implicit " \
                   "batch dimension)"
        return invalid_arg(
            f"unexpected shape for input '{name}' for model '{self.name}': expected "
            f"{expected}{note}, got {format_shape(shape)}")


def _spec(tensor: object) -> TensorSpec:
    reshape = None
    if tensor.HasField("reshape"):  # type: ignore[attr-defined]
        reshape = tuple(tensor.reshape.shape)  # type: ignore[attr-defined]
    return TensorSpec(
        name=tensor.name,  # type: ignore[attr-defined]
        datatype=config_to_datatype(DataType.Name(tensor.data_type)),  # type: ignore[attr-defined]
        dims=tuple(tensor.dims),  # type: ignore[attr-defined]
        reshape=reshape,
        optional=bool(getattr(tensor, "optional", False)),
    )


def _names(names: object) -> str:
    return ", ".join(f"'{n}'" for n in names)  # type: ignore[attr-defined]

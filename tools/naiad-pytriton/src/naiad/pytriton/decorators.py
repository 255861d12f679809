"""PyTriton's inference callable decorators (``pytriton.decorators``), same names and
behaviour: ``@batch``, ``@sample``, ``@group_by_keys``, ``@group_by_values``,
``@fill_optionals``, ``@first_value``, ``@pad_batch``, ``@triton_context``.

They are plain Python objects (not wrapt proxies) so that a decorated callable pickles by
value into naiad's worker process. Each works on functions and methods, and on callables that
return a value, a coroutine, a generator (decoupled models) or an async generator.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import itertools
import operator
from bisect import bisect_left
from collections.abc import Callable, MutableMapping
from typing import Any

import numpy as np

from naiad.pytriton.exceptions import (
    PyTritonBadParameterError,
    PyTritonRuntimeError,
    PyTritonValidationError,
)
from naiad.pytriton.model_config.triton_model_config import TritonModelConfig

TRITON_CONTEXT_FIELD_NAME = "triton_context"
_SPECIAL_KEYS = ["__triton_context__"]

InferenceRequest = dict[str, np.ndarray]
InferenceRequests = list[InferenceRequest] | tuple[InferenceRequest, ...]
InferenceResult = dict[str, np.ndarray]
InferenceResults = list[InferenceResult] | tuple[InferenceResult, ...]


class ModelConfigDict(MutableMapping):  # type: ignore[type-arg]
    """Model configs by inference callable (keyed by the callable's ``str``, as PyTriton)."""

    def __init__(self) -> None:
        self._data: dict[str, TritonModelConfig] = {}
        self._keys: list[Callable[..., Any]] = []
        self.default: TritonModelConfig | None = None

    @staticmethod
    def _key(infer_callable: Any) -> str:
        if inspect.ismethod(infer_callable) and infer_callable.__name__ == "__call__":
            infer_callable = infer_callable.__self__
        return str(infer_callable)

    def __getitem__(self, infer_callable: Any) -> TritonModelConfig:
        found = self._data.get(self._key(infer_callable))
        if found is None:
            if self.default is None:
                raise KeyError(infer_callable)
            return self.default
        return found

    def __setitem__(self, infer_callable: Any, item: TritonModelConfig) -> None:
        self._keys.append(infer_callable)
        self._data[self._key(infer_callable)] = item

    def __delitem__(self, infer_callable: Any) -> None:
        del self._data[self._key(infer_callable)]

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._keys)


@dataclasses.dataclass
class TritonContext:
    """What ``@triton_context`` passes: the model configs of the bound callables."""

    model_configs: ModelConfigDict = dataclasses.field(default_factory=ModelConfigDict)


# The context of the model whose callable runs now (set by naiad's proxy model around each
# call): every decorator level of one callable sees the same model config.
current_context: contextvars.ContextVar[TritonContext | None] = contextvars.ContextVar(
    "naiad_pytriton_context", default=None)


def get_triton_context(wrapped: Any, instance: Any) -> TritonContext:
    """The TritonContext of the running callable (PyTriton's ``get_triton_context``)."""
    found = current_context.get()
    if found is not None:
        return found
    caller = instance or wrapped
    if not hasattr(caller, "__triton_context__"):
        raise PyTritonValidationError(
            "Wrapped function or object must bound with triton to get  __triton_context__")
    return caller.__triton_context__  # type: ignore[no-any-return]


def get_model_config(wrapped: Any, instance: Any) -> TritonModelConfig:
    """The TritonModelConfig of the model the callable is bound to."""
    return get_triton_context(wrapped, instance).model_configs[wrapped]


class _Wrapper:
    """A decorated callable: ``impl(wrapped, instance, args, kwargs)`` as wrapt calls it;
    a method when it decorates one (descriptor)."""

    def __init__(self, wrapped: Callable[..., Any], impl: Callable[..., Any],
                 instance: Any = None) -> None:
        functools.update_wrapper(self, wrapped)
        self._naiad_wrapped = wrapped
        self._naiad_impl = impl
        self._naiad_instance = instance

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        bound = self._naiad_wrapped.__get__(instance, owner)  # type: ignore[attr-defined]
        return _Wrapper(bound, self._naiad_impl, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._naiad_impl(self._naiad_wrapped, self._naiad_instance, args, kwargs)

    def __repr__(self) -> str:
        return repr(self._naiad_wrapped)

    def __str__(self) -> str:
        return str(self._naiad_wrapped)


def _decorator(impl: Callable[..., Any]) -> Callable[[Callable[..., Any]], Any]:
    def decorate(wrapped: Callable[..., Any]) -> Any:
        return _Wrapper(wrapped, impl)

    decorate.__name__ = getattr(impl, "__name__", "decorator")
    decorate.__doc__ = impl.__doc__
    decorate._naiad_impl = impl  # type: ignore[attr-defined]
    return decorate


def _wrapper_impls(wrapped: Any) -> list[Any]:
    """The decorator implementations applied below ``wrapped``, outermost first."""
    found = []
    while wrapped is not None:
        impl = getattr(wrapped, "_naiad_impl", None)
        if impl is not None:
            found.append(impl)
        wrapped = getattr(wrapped, "_naiad_wrapped", None) or getattr(wrapped, "__wrapped__",
                                                                      None)
    return found


def _then(result: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert`` applied to each result of a callable, whatever it returned."""
    if inspect.isgenerator(result):
        return (convert(item) for item in result)
    if inspect.isasyncgen(result):
        async def each() -> Any:
            async for item in result:
                yield convert(item)
        return each()
    if inspect.isawaitable(result):
        async def one() -> Any:
            return convert(await result)
        return one()
    return convert(result)


def get_inference_request_batch_size(inference_request: InferenceRequest) -> int:
    """The batch size of a request: the first axis of its first input."""
    first_input_value = next(iter(inference_request.values()))
    return int(first_input_value.shape[0])


def convert_output(outputs: Any, wrapped: Any = None, instance: Any = None,
                   model_config: TritonModelConfig | None = None) -> dict[str, Any]:
    """A callable's outputs as a dict: a list or tuple maps onto the config's outputs in order."""
    if isinstance(outputs, dict):
        return outputs
    if isinstance(outputs, list | tuple):
        if model_config is None:
            model_config = get_model_config(wrapped, instance)
        specs = model_config.outputs or []
        if len(outputs) != len(specs):
            raise PyTritonValidationError("Outputs length different than config outputs length")
        return {spec.name: output for spec, output in zip(specs, outputs, strict=True)}
    raise PyTritonValidationError(f"Unsupported output type {type(outputs)}.")


def _sample(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Decorator for a callable of one request's named inputs (non-batching models)."""
    kwargs.update(args[0][0])
    outputs = wrapped(*args[1:], **kwargs)
    return _then(outputs, lambda out: [convert_output(out, wrapped, instance)])


sample = _decorator(_sample)


def _batch(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Decorator that concatenates the requests' inputs into one batch per input name and
    splits the outputs back into one result per request."""
    requests = args[0]
    input_names = requests[0].keys()
    for request in requests[1:]:
        if input_names != request.keys():
            raise PyTritonValidationError("Cannot batch requests with different set of inputs keys")
    inputs = {name: np.concatenate([request[name] for request in requests])
              for name in input_names}
    new_kwargs = dict(kwargs)
    new_kwargs.update(inputs)
    outputs = wrapped(*args[1:], **new_kwargs)

    def split(result: Any) -> list[dict[str, Any]]:
        result = convert_output(result, wrapped, instance)
        total = sum(get_inference_request_batch_size(request) for request in requests)
        wrong = {name: tensor.shape for name, tensor in result.items()
                 if tensor.shape[0] != total}
        if wrong:
            raise ValueError(
                "Received output tensors with different batch sizes: "
                f"{', '.join(': '.join(map(str, item)) for item in wrong.items())}. "
                f"Expected batch size: {total}. ")
        split_results = []
        start = 0
        for request in requests:
            size = get_inference_request_batch_size(request)
            split_results.append({name: tensor[start:start + size, ...]
                                  for name, tensor in result.items()})
            start += size
        return split_results

    return _then(outputs, split)


batch = _decorator(_batch)


def _group_by_keys(wrapped: Any, instance: Any, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> Any:
    """Decorator that calls the callable once per group of requests with the same inputs."""
    requests = args[0]
    indexed = sorted(((i, tuple(sorted(r.keys())), r) for i, r in enumerate(requests)),
                     key=operator.itemgetter(1))
    results: list[tuple[int, Any]] = []
    for _, group in itertools.groupby(indexed, key=operator.itemgetter(1)):
        indices, _keys, members = zip(*group, strict=True)
        out = wrapped(list(members), *args[1:], **kwargs)
        results.extend(zip(indices, out, strict=True))
    results.sort(key=operator.itemgetter(0))
    return [result for _, result in results]


group_by_keys = _decorator(_group_by_keys)


def _serialize_bytes(value: np.ndarray) -> bytes:
    return b"".join(len(bytes(item)).to_bytes(4, "little") + bytes(item)
                    for item in value.reshape(-1))


def group_by_values(*keys: str, pad_fn: Callable[[InferenceResults], InferenceResults] | None
                    = None) -> Callable[[Callable[..., Any]], Any]:
    """Decorator (below ``@batch``) that splits a batch into sub-batches whose samples have
    equal values of ``keys``, calls the callable per sub-batch and merges the results in the
    batch's order (``pad_fn`` first makes the sub-results' shapes equal)."""

    def value_key(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            if value.dtype == np.object_ or value.dtype.type == np.bytes_:
                return _serialize_bytes(value)
            return value.tobytes()
        return value

    def impl(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if _batch in _wrapper_impls(wrapped):
            raise PyTritonRuntimeError(
                "The @group_by_values decorator must be used after the @batch decorator.")
        request = {k: v for k, v in kwargs.items() if k not in _SPECIAL_KEYS}
        other = {k: v for k, v in kwargs.items() if k in _SPECIAL_KEYS}
        size = get_inference_request_batch_size(request)
        ordered = sorted(((i, tuple(value_key(request[key][i]) for key in keys))
                          for i in range(size)), key=operator.itemgetter(1))
        interim = []
        for _, group in itertools.groupby(ordered, key=operator.itemgetter(1)):
            indices = tuple(i for i, _ in group)
            sub_request = {name: value[indices, ...] for name, value in request.items()}
            interim.append((indices, wrapped(*args, **sub_request, **other)))
        if pad_fn is not None:
            index_groups, results = zip(*interim, strict=True)
            interim = list(zip(index_groups, pad_fn(results), strict=True))
        first = interim[0][1]
        merged = {name: np.zeros((size, *data.shape[1:]), dtype=data.dtype)
                  for name, data in first.items()}
        for indices, results in interim:
            for name, data in results.items():
                merged[name][indices, ...] = data
        return merged

    return _decorator(impl)


class ConstantPadder:
    """``pad_fn`` for ``@group_by_values``: pads every result to the largest shape with
    ``pad_value`` (b"" for bytes)."""

    def __init__(self, pad_value: Any = 0) -> None:
        self.pad_value = pad_value

    def __call__(self, batches_list: InferenceResults) -> InferenceResults:
        names = list(dict.fromkeys(name for batch in batches_list for name in batch))
        by_name = {name: [batch.get(name) for batch in batches_list] for name in names}
        for arrays in by_name.values():
            present = [a for a in arrays if a is not None]
            shape = tuple(np.max([a.shape[1:] for a in present], axis=0))
            dtypes = [a.dtype for a in present]
            dtype = dtypes[0]
            if not all(d.kind == dtype.kind for d in dtypes):
                raise PyTritonRuntimeError(
                    "All input arrays for given input name must have the same dtype.")
            if dtype.kind in "SU":
                dtype = np.dtype(f"{dtype.str[:2]}{max(int(d.str[2:]) for d in dtypes)}")
            elif not all(d == dtype for d in dtypes):
                raise PyTritonRuntimeError(
                    "All input arrays for given input name must have the same dtype.")
            for i, array in enumerate(arrays):
                if array is not None:
                    arrays[i] = np.pad(
                        array, [(0, 0)] + [(0, b - a) for a, b in zip(array.shape[1:], shape,
                                                                       strict=True)],
                        mode="constant",
                        constant_values=self.pad_value if dtype.kind not in "SUO" else b"",
                    ).astype(dtype)
        return [{name: arrays[i] for name, arrays in by_name.items() if arrays[i] is not None}
                for i in range(len(batches_list))]


def fill_optionals(**defaults: np.ndarray) -> Callable[[Callable[..., Any]], Any]:
    """Decorator that fills the optional inputs a request lacks with ``defaults`` (numpy
    arrays without the batch axis; repeated over the batch for batching models)."""

    def verify(config: TritonModelConfig) -> None:
        inputs = {spec.name: spec for spec in config.inputs or []}
        unknown = sorted(set(defaults) - set(inputs))
        if unknown:
            raise PyTritonBadParameterError(f"Could not found {', '.join(unknown)} inputs")
        not_numpy = {k: v for k, v in defaults.items() if not isinstance(v, np.ndarray)}
        if not_numpy:
            raise PyTritonBadParameterError(
                f"Could not use {', '.join(f'{k}={v}' for k, v in not_numpy.items())} defaults "
                "as they are not NumPy arrays")
        wrong_dtypes = {k: (v.dtype, inputs[k].dtype) for k, v in defaults.items()
                        if v.dtype != inputs[k].dtype}
        if wrong_dtypes:
            listed = ", ".join(f"{k}: dtype={have} expected_dtype={want}"
                               for k, (have, want) in wrong_dtypes.items())
            raise PyTritonBadParameterError(
                f"Could not use {listed} defaults as they have different than input signature "
                "dtypes")

        def shape_matches(have: tuple[int, ...], want: tuple[int, ...]) -> bool:
            return len(have) == len(want) and all(w == -1 or h == w
                                                  for h, w in zip(have, want, strict=True))

        wrong_shapes = {k: (v.shape, inputs[k].shape) for k, v in defaults.items()
                        if not shape_matches(v.shape, inputs[k].shape)}
        if wrong_shapes:
            listed = ", ".join(f"{k}: shape={have} expected_shape={want}"
                               for k, (have, want) in wrong_shapes.items())
            raise PyTritonBadParameterError(
                f"Could not use {listed} defaults as they have different than input signature "
                "shapes")

    def impl(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        config = get_model_config(wrapped, instance)
        verify(config)
        (requests,) = args
        for request in requests:
            size = get_inference_request_batch_size(request) if config.batching else None
            for key, value in defaults.items():
                if key in request:
                    continue
                if config.batching:
                    value = np.tile(value, (size,) + (1,) * value.ndim)
                request[key] = value
        return wrapped(*args, **kwargs)

    return _decorator(impl)


def _triton_context(wrapped: Any, instance: Any, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
    """Decorator that passes the TritonContext as keyword argument ``triton_context``."""
    kwargs[TRITON_CONTEXT_FIELD_NAME] = get_triton_context(wrapped, instance)
    return wrapped(*args, **kwargs)


triton_context = _decorator(_triton_context)


def _pad_batch(wrapped: Any, instance: Any, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
    """Decorator that repeats the last sample until the batch reaches the nearest preferred
    batch size (or max_batch_size)."""
    inputs = {k: v for k, v in kwargs.items() if k not in _SPECIAL_KEYS
              and k != TRITON_CONTEXT_FIELD_NAME}
    first = next(iter(inputs.values()))
    config = get_model_config(wrapped, instance)
    sizes = ([] if config.batcher is None or config.batcher.preferred_batch_size is None
             else sorted(config.batcher.preferred_batch_size))
    sizes.append(config.max_batch_size)
    size = sizes[bisect_left(sizes, first.shape[0])]
    for name, array in inputs.items():
        repeats = np.concatenate([np.ones(array.shape[0] - 1),
                                  np.array([size - array.shape[0] + 1])]).astype(np.int64)
        kwargs[name] = np.repeat(array, repeats, axis=0)
    return wrapped(*args, **kwargs)


pad_batch = _decorator(_pad_batch)


def first_value(*keys: str, squeeze_single_values: bool = True,
                strict: bool = True) -> Callable[[Callable[..., Any]], Any]:
    """Decorator that replaces inputs ``keys`` by their first value (a scalar when it holds
    one element and ``squeeze_single_values``); with ``strict``, every value must be equal."""
    not_allowed = [key for key in keys if key in _SPECIAL_KEYS]
    if not_allowed:
        raise PyTritonBadParameterError(
            f"The keys {', '.join(not_allowed)} are not allowed as keys for @first_value "
            f"wrapper. The set of not allowed keys are {', '.join(_SPECIAL_KEYS)}")

    def impl(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        config = get_model_config(wrapped, instance)
        if not config.batching:
            raise PyTritonRuntimeError(
                "The @first_value decorator can only be used with models that support batching.")

        def replace(request: Any) -> Any:
            for name in keys:
                if name not in request:
                    continue
                values = request[name]
                if strict:
                    unique = np.unique(values, axis=None if values.dtype == object else 0)
                    if len(unique) > 1:
                        raise PyTritonRuntimeError(
                            f"The values on the {name!r} input are not equal. "
                            "To proceed, either disable strict mode in @first_value wrapper "
                            "or ensure that the values always are consistent. "
                            f"The current values of {name!r} are {request[name]!r}.")
                value = values[0]
                if (squeeze_single_values and not np.isscalar(value)
                        and all(dim == 1 for dim in value.shape)):
                    value = np.squeeze(value)[()]
                request[name] = value
            return request

        if set(kwargs) - set(_SPECIAL_KEYS):
            return wrapped(*args, **replace(kwargs))
        requests, *other = args
        return wrapped([replace(request) for request in requests], *other, **kwargs)

    return _decorator(impl)

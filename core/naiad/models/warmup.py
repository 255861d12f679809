"""Model warmup (``model_warmup`` in config.pbtxt): requests every instance runs before the
model reports ready, so the first client does not pay for lazy initialisation.

As in Triton: a sample of ``batch_size`` N is N requests of one row each, handed to the
instance as one batch; ``count`` repeats it; inputs are ``zero_data``, ``random_data`` or
``input_data_file`` (raw row-major bytes from the model's ``warmup/`` folder; BYTES elements
are each a 4-byte little-endian length and the bytes). A sample that fails fails the load,
with the reason. Warmup requests are not counted in the statistics.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelWarmup

from naiad.datatypes import NUMPY_DTYPES, config_to_datatype, deserialize_bytes, element_count
from naiad.errors import InferenceServerError, Status, invalid_arg
from naiad.models.paths import WARMUP_FOLDER, inside_folder
from naiad.models.signature import ModelSignature
from naiad.types import InferenceRequest, Tensor

if TYPE_CHECKING:
    from naiad.scheduling.worker import InstanceWorker

_RANDOM = np.random.default_rng()


@dataclass(slots=True, frozen=True)
class WarmupSample:
    """One ``model_warmup`` entry, made into the batch of requests an instance executes."""

    name: str
    count: int
    requests: tuple[InferenceRequest, ...]


def warmup_samples(name: str, version: int, config: ModelConfig, model_dir: Path
                   ) -> list[WarmupSample]:
    """Build every warmup sample once, checked against the model's inputs. Raises
    INVALID_ARG naming the sample and input when one cannot be built."""
    if not config.model_warmup:
        return []
    signature = ModelSignature(name, config)
    batching = config.max_batch_size > 0
    samples = []
    for index, warmup in enumerate(config.model_warmup):
        label = f"model '{name}' warmup sample '{warmup.name or index}'"
        size = max(warmup.batch_size, 1)
        if not batching and size > 1:
            raise invalid_arg(f"{label} has batch_size {size}, but the model does not batch "
                              f"(max_batch_size is 0)")
        if batching and size > config.max_batch_size:
            raise invalid_arg(f"{label} has batch_size {size}, over the model's "
                              f"max_batch_size {config.max_batch_size}")
        requests = []
        for _ in range(size):
            inputs = {input_name: _tensor(name, label, input_name, spec, model_dir, batching)
                      for input_name, spec in warmup.inputs.items()}
            request = InferenceRequest(name, version, inputs, id=f"warmup:{warmup.name}")
            try:
                signature.check(request)
            except InferenceServerError as exc:
                raise invalid_arg(f"{label}: {exc.message}") from None
            requests.append(request)
        samples.append(WarmupSample(warmup.name or str(index), max(warmup.count, 1),
                                    tuple(requests)))
    return samples


async def warm_up(worker: InstanceWorker, samples: list[WarmupSample], model_name: str
                  ) -> None:
    """Execute every sample ``count`` times on ``worker``'s instance, one batch after the
    other, through :meth:`InstanceWorker.submit` as any batch. Raises UNAVAILABLE naming
    the sample when an execution fails."""
    for sample in samples:
        for _ in range(sample.count):
            execution = await asyncio.wrap_future(worker.submit(sample.requests))
            for response in execution.responses:
                if response.error is not None:
                    raise _failed(model_name, sample, response.error.message)


def _failed(model_name: str, sample: WarmupSample, reason: str) -> InferenceServerError:
    return InferenceServerError(f"model '{model_name}' warmup sample '{sample.name}' failed: "
                                f"{reason}", Status.UNAVAILABLE)


def _tensor(name: str, label: str, input_name: str, spec: ModelWarmup.Input, model_dir: Path,
            batching: bool) -> Tensor:
    datatype = config_to_datatype(DataType.Name(spec.data_type))
    dims = tuple(spec.dims)
    if any(d < 0 for d in dims):
        raise invalid_arg(f"{label} input '{input_name}' has dims {list(dims)}: warmup dims "
                          f"must be fixed (no -1)")
    dtype = NUMPY_DTYPES.get(datatype)
    count = element_count(dims)
    source = spec.WhichOneof("input_data_type")
    if source == "input_data_file":
        # Checked when the configuration was read; again here, where the file is opened.
        path = inside_folder(model_dir / WARMUP_FOLDER, spec.input_data_file, model=name,
                             field=f"warmup input '{input_name}' input_data_file")
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise invalid_arg(f"{label} input '{input_name}': cannot read {path}: "
                              f"{exc.strerror}") from None
        if dtype is None:
            data = deserialize_bytes(raw, count, f"{label} input '{input_name}'")
        else:
            if len(raw) < count * dtype.itemsize:
                raise invalid_arg(f"{label} input '{input_name}': {path.name} holds "
                                  f"{len(raw)} bytes; dims {list(dims)} of {datatype} need "
                                  f"{count * dtype.itemsize}")
            data = np.frombuffer(raw, dtype=dtype, count=count)
    elif source == "random_data" and dtype is not None:
        data = _random(dtype, count)
    elif source in ("zero_data", "random_data"):
        # BYTES random data is zero-length strings, as in Triton.
        data = (np.zeros(count, dtype) if dtype is not None
                else np.array([b""] * count, dtype=np.object_))
    else:
        raise invalid_arg(f"{label} input '{input_name}' gives no data: set zero_data, "
                          f"random_data or input_data_file")
    shape = (1, *dims) if batching else dims
    return Tensor(input_name, datatype, shape, data.reshape(shape))


def _random(dtype: np.dtype, count: int) -> np.ndarray:
    if dtype.kind == "b":
        return _RANDOM.integers(0, 2, count).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return _RANDOM.integers(max(info.min, -100), min(info.max, 100), count,
                                endpoint=True).astype(dtype)
    return _RANDOM.random(count).astype(dtype)

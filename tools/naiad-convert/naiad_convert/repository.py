"""A model repository for one format: ``MODEL/config.pbtxt``, ``MODEL/1/<model file>`` and
``MODEL/warmup/`` (one sample row per input, raw row-major bytes, named by a
``model_warmup`` entry), which naiad and Triton load as they are."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from naiad_convert.tensors import TensorSpec

VERSION = "1"
WARMUP_FOLDER = "warmup"
MAX_QUEUE_DELAY_US = 100  # dynamic batching's wait for a fuller batch, in microseconds
EXPORT_FILE = "model.pt2"  # served by the PyTorch backend when named as the model file


def warmup_file(index: int) -> str:
    """The warmup file of the index-th input (numbered: an input's name may hold characters
    a file name cannot)."""
    return f"input{index}"


def config_text(name: str, platform: str, file_name: str, inputs: Sequence[TensorSpec],
                outputs: Sequence[TensorSpec], max_batch_size: int,
                preferred_batch_size: int | None, warmup: bool) -> str:
    """config.pbtxt in protobuf text format, written through Triton's own ModelConfig."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    config = pb.ModelConfig(name=name, platform=platform, max_batch_size=max_batch_size)
    if file_name == EXPORT_FILE:
        config.default_model_filename = file_name
    for spec in inputs:
        config.input.add(name=spec.name, data_type=pb.DataType.Value(f"TYPE_{spec.datatype}"),
                         dims=list(spec.dims))
    for spec in outputs:
        config.output.add(name=spec.name, data_type=pb.DataType.Value(f"TYPE_{spec.datatype}"),
                          dims=list(spec.dims))
    if max_batch_size > 0:
        batching = config.dynamic_batching
        batching.max_queue_delay_microseconds = MAX_QUEUE_DELAY_US
        if preferred_batch_size and 1 < preferred_batch_size <= max_batch_size:
            batching.preferred_batch_size.append(preferred_batch_size)
    if warmup:
        sample = config.model_warmup.add(name="sample", batch_size=1, count=1)
        for index, spec in enumerate(inputs):
            entry = sample.inputs[spec.name]
            entry.data_type = pb.DataType.Value(f"TYPE_{spec.datatype}")
            entry.dims.extend(spec.dims)
            entry.input_data_file = warmup_file(index)
    return text_format.MessageToString(config)


def write_model(repository: Path, name: str, platform: str, model_file: Path,
                inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
                max_batch_size: int, preferred_batch_size: int | None,
                warmup_row: dict[str, np.ndarray] | None) -> Path:
    """Write ``repository/name`` (replacing what was there); returns that folder."""
    folder = repository / name
    shutil.rmtree(folder, ignore_errors=True)
    (folder / VERSION).mkdir(parents=True)
    shutil.copyfile(model_file, folder / VERSION / model_file.name)
    if warmup_row is not None:
        (folder / WARMUP_FOLDER).mkdir()
        for index, spec in enumerate(inputs):
            row = np.ascontiguousarray(warmup_row[spec.name])
            (folder / WARMUP_FOLDER / warmup_file(index)).write_bytes(row.tobytes())
    (folder / "config.pbtxt").write_text(config_text(
        name, platform, model_file.name, inputs, outputs, max_batch_size,
        preferred_batch_size, warmup_row is not None))
    return folder

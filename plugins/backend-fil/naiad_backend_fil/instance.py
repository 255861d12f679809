"""One loaded forest serving batches of requests.

A batch's ``input__0`` rows are concatenated (:func:`naiad.backend_utils.merge_inputs`),
predicted in one GTIL call, and each request gets its own rows back
(:func:`naiad.backend_utils.split_outputs`), as FIL predicts a dynamic batch at once. A model
that does not batch (``max_batch_size: 0``) takes ``[rows, features]`` per request.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from naiad.backend_utils import batch_sizes, merge_inputs, split_outputs
from naiad.errors import invalid_arg
from naiad.types import (
    InferenceRequest,
    InferenceResponse,
    InstanceInfo,
    ModelContext,
    ModelInstance,
    Tensor,
)
from naiad_backend_fil.forest import Forest

INPUT_NAME = "input__0"
OUTPUT_NAME = "output__0"


class FilModelInstance(ModelInstance):
    """A forest and the shape its answers take."""

    def __init__(self, forest: Forest, context: ModelContext, instance: InstanceInfo,
                 output_dims: tuple[int, ...]) -> None:
        self.forest = forest
        self.model_name = context.name
        self.instance_name = instance.name
        self.output_dims = output_dims

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        rows = merge_inputs(requests, (INPUT_NAME,))[INPUT_NAME]
        features = self.forest.info.num_feature
        if rows.ndim != 2 or rows.shape[1] != features:
            raise invalid_arg(f"input '{INPUT_NAME}' of model '{self.model_name}': shape "
                              f"{list(rows.shape)[1:]} per row; the model has {features} "
                              f"features")
        scores = self.forest.predict(np.ascontiguousarray(rows, dtype=np.float32))
        scores = scores.reshape(scores.shape[0], *self.output_dims)
        sizes = batch_sizes(requests) if len(requests) > 1 else [scores.shape[0]]
        parts = (split_outputs({OUTPUT_NAME: scores}, sizes) if len(requests) > 1
                 else [{OUTPUT_NAME: scores}])
        return [InferenceResponse(outputs=[Tensor(OUTPUT_NAME, "FP32",
                                                  tuple(part[OUTPUT_NAME].shape),
                                                  part[OUTPUT_NAME])])
                for part in parts]

    def close(self) -> None:
        self.forest.close()

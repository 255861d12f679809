"""A tree ensemble loaded with Treelite and predicted with GTIL, shaped as Triton FIL shapes
its answers.

Triton's FIL backend loads every format through Treelite and, on a CPU, predicts with
Treelite's GTIL; naiad does the same, so a model gives the numbers FIL gives. What FIL then
does with GTIL's scores (``src/tl_model.h`` of fil_backend r24.10) is repeated here:

- a regressor (``output_class: false``): the model's prediction, one column (a multi-class
  model's scores when it has several);
- a classifier without ``predict_proba``: the class, as FP32 — the index of the highest
  score for a multi-class model, ``score > threshold`` (1.0 or 0.0) for a binary one;
- ``predict_proba``: one probability per class; a binary model, which has one score, gives
  two columns, ``[1 - p, p]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import treelite

from naiad.errors import InferenceServerError, Status, invalid_arg
from naiad_backend_fil.parameters import FilParameters


@dataclass(frozen=True)
class ForestInfo:
    """What the model file says about itself."""

    num_feature: int
    num_class: int  # 1 for regressors and binary classifiers
    postprocessor: str  # Treelite's name: sigmoid, softmax, identity_multiclass, max_index...

    def output_columns(self, parameters: FilParameters) -> int:
        """How many values per row the output has: FIL's output dims, multiplied out."""
        if parameters.predict_proba:
            return 2 if self.num_class == 1 else self.num_class
        if parameters.output_class:
            return 1
        return self.num_class


def load(path: Path, parameters: FilParameters, model_name: str) -> treelite.Model:
    """The Treelite model in ``path``, read as ``model_type`` says. A file that is missing,
    of another format or damaged fails the load naming the model, the file and the cause."""
    if not path.is_file():
        raise InferenceServerError(
            f"model '{model_name}': no model file '{path}' (model_type "
            f"'{parameters.model_type}'; set default_model_filename to load another name)",
            Status.UNAVAILABLE)
    try:
        return _read(path, parameters)
    except treelite.TreeliteError as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise invalid_arg(f"model '{model_name}': cannot read '{path}' as model_type "
                          f"'{parameters.model_type}': {reason}") from None


def _read(path: Path, parameters: FilParameters) -> treelite.Model:
    model_type = parameters.model_type
    if model_type == "xgboost":
        return treelite.frontend.load_xgboost_model_legacy_binary(path)
    if model_type in ("xgboost_json", "xgboost_ubj"):
        return treelite.frontend.load_xgboost_model(
            path, format_choice="json" if model_type == "xgboost_json" else "ubjson",
            allow_unknown_field=parameters.allow_unknown_field)
    if model_type == "lightgbm":
        return treelite.frontend.load_lightgbm_model(path)
    return treelite.Model.deserialize(path)


def describe(model: treelite.Model, model_name: str) -> ForestInfo:
    """Features, classes and postprocessor of a loaded model. Multi-target models are
    refused, as FIL refuses them."""
    header = model.get_header_accessor()
    num_target = int(np.asarray(header.get_field("num_target")).reshape(-1)[0])
    if num_target != 1:
        raise InferenceServerError(f"model '{model_name}': a model with {num_target} targets; "
                                   f"the FIL backend serves single-target models",
                                   Status.UNSUPPORTED)
    num_class = int(np.asarray(header.get_field("num_class")).reshape(-1)[0])
    postprocessor = header.get_field("postprocessor")
    if isinstance(postprocessor, bytes):
        postprocessor = postprocessor.decode()
    return ForestInfo(num_feature=int(model.num_feature), num_class=num_class,
                      postprocessor=str(postprocessor))


class Forest:
    """A loaded model and the rule that turns GTIL's scores into FIL's output."""

    def __init__(self, model: treelite.Model, info: ForestInfo, parameters: FilParameters,
                 nthread: int) -> None:
        self.model = model
        self.info = info
        self.parameters = parameters
        self.nthread = nthread

    def predict(self, rows: np.ndarray) -> np.ndarray:
        """FIL's output for ``rows`` (a 2-D FP32 array of ``num_feature`` columns): a 2-D
        FP32 array of :meth:`ForestInfo.output_columns` columns."""
        info, parameters = self.info, self.parameters
        classify = parameters.output_class and not parameters.predict_proba
        if info.num_class > 1 and info.postprocessor == "max_index":
            # A model that stores only the winning class (XGBoost multi:softmax): FIL
            # asks for softmax probabilities instead when predict_proba is set.
            margins = self._gtil(rows, margin=True)
            if classify:
                return _column(np.argmax(margins, axis=1))
            scores = _softmax(margins) if parameters.predict_proba else margins
            return scores.astype(np.float32, copy=False)
        scores = self._gtil(rows, margin=False)
        if info.num_class > 1:
            if classify:
                return _column(np.argmax(scores, axis=1))
            return scores
        score = scores[:, :1]
        if parameters.predict_proba:
            return np.hstack((1.0 - score, score)).astype(np.float32, copy=False)
        if parameters.output_class:
            return (score > parameters.threshold).astype(np.float32)
        return score

    def _gtil(self, rows: np.ndarray, margin: bool) -> np.ndarray:
        # GTIL answers (rows, targets, classes); the model has one target.
        result = treelite.gtil.predict(self.model, rows, nthread=self.nthread,
                                       pred_margin=margin)
        return np.asarray(result, dtype=np.float32).reshape(rows.shape[0], -1)

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]


def _column(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float32).reshape(-1, 1)


def _softmax(margins: np.ndarray) -> np.ndarray:
    shifted = np.exp(margins - margins.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)

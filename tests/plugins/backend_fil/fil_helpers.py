"""Tiny forests trained in the test with the real frameworks, written as Triton FIL model
folders, and the answers those frameworks give called directly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost", reason="xgboost (xgboost-cpu) is not installed")
lgb = pytest.importorskip("lightgbm", reason="lightgbm is not installed")
ensemble = pytest.importorskip("sklearn.ensemble", reason="scikit-learn is not installed")
treelite = pytest.importorskip("treelite", reason="treelite is not installed")

FEATURES = 6
ROWS = 300


def training_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Features, a binary label, a three-class label and a real target."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    binary = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int32)
    three = (x[:, 0] > 0).astype(np.int32) + (x[:, 2] > 0.3).astype(np.int32)
    target = (2.0 * x[:, 0] - x[:, 3] + 0.1 * rng.normal(size=ROWS)).astype(np.float32)
    return x, binary, three, target


def samples(rows: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, FEATURES)).astype(np.float32)


def config(name: str, model_type: str, output_class: bool, columns: int, *,
           predict_proba: bool = False, max_batch_size: int = 64, extra: str = "",
           threshold: float | None = None) -> str:
    """A config.pbtxt as FIL's documentation writes one."""
    parameters = [("model_type", model_type), ("output_class", str(output_class).lower())]
    if predict_proba:
        parameters.append(("predict_proba", "true"))
    if threshold is not None:
        parameters.append(("threshold", str(threshold)))
    params = "\n".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
                       for k, v in parameters)
    return (f'name: "{name}"\nbackend: "fil"\nmax_batch_size: {max_batch_size}\n'
            f'input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]\n'
            f'output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {columns} ] }} ]\n'
            f'instance_group [ {{ kind: KIND_CPU }} ]\n{params}\n{extra}')


@dataclass
class Served:
    """A model written to the repository and how to compute its expected answer."""

    name: str
    expected: Any  # rows -> the FP32 array FIL answers with (its shape included)
    features: int = FEATURES  # the model's input width


def write(repo: Path, name: str, filename: str, text: str, save: Any) -> Path:
    folder = repo / name / "1"
    folder.mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(text)
    path = folder / filename
    save(path)
    return path


def build_repository(repo: Path) -> dict[str, Served]:
    """Every model format FIL reads, and each output form FIL gives."""
    x, binary, three, target = training_data()
    models: dict[str, Served] = {}

    clf = xgb.XGBClassifier(n_estimators=8, max_depth=3).fit(x, binary)
    write(repo, "xgb_binary_ubj", "xgboost.ubj",
          config("xgb_binary_ubj", "xgboost_ubj", True, 1),
          lambda p: clf.save_model(str(p)))
    models["xgb_binary_ubj"] = Served("xgb_binary_ubj",
                                      lambda r: clf.predict(r).astype(np.float32))
    write(repo, "xgb_binary_proba", "xgboost.json",
          config("xgb_binary_proba", "xgboost_json", True, 2, predict_proba=True),
          lambda p: clf.save_model(str(p)))
    models["xgb_binary_proba"] = Served("xgb_binary_proba",
                                        lambda r: clf.predict_proba(r).astype(np.float32))
    write(repo, "xgb_binary_score", "xgboost.json",
          config("xgb_binary_score", "xgboost_json", False, 1),
          lambda p: clf.save_model(str(p)))
    models["xgb_binary_score"] = Served(
        "xgb_binary_score", lambda r: clf.predict_proba(r)[:, 1].astype(np.float32))
    write(repo, "xgb_threshold", "xgboost.json",
          config("xgb_threshold", "xgboost_json", True, 1, threshold=0.8),
          lambda p: clf.save_model(str(p)))
    models["xgb_threshold"] = Served(
        "xgb_threshold", lambda r: (clf.predict_proba(r)[:, 1] > 0.8).astype(np.float32))

    multi = xgb.XGBClassifier(n_estimators=6, max_depth=3).fit(x, three)
    write(repo, "xgb_multi_proba", "xgboost.json",
          config("xgb_multi_proba", "xgboost_json", True, 3, predict_proba=True),
          lambda p: multi.save_model(str(p)))
    models["xgb_multi_proba"] = Served("xgb_multi_proba",
                                       lambda r: multi.predict_proba(r).astype(np.float32))
    write(repo, "xgb_multi_class", "xgboost.ubj",
          config("xgb_multi_class", "xgboost_ubj", True, 1),
          lambda p: multi.save_model(str(p)))
    models["xgb_multi_class"] = Served("xgb_multi_class",
                                       lambda r: multi.predict(r).astype(np.float32))

    reg = xgb.XGBRegressor(n_estimators=10, max_depth=3).fit(x, target)
    write(repo, "xgb_regressor", "xgboost.ubj",
          config("xgb_regressor", "xgboost_ubj", False, 1),
          lambda p: reg.save_model(str(p)))
    models["xgb_regressor"] = Served("xgb_regressor",
                                     lambda r: reg.predict(r).astype(np.float32))

    light = lgb.LGBMRegressor(n_estimators=10, num_leaves=8, verbose=-1).fit(x, target)
    write(repo, "lightgbm_regressor", "model.txt",
          config("lightgbm_regressor", "lightgbm", False, 1),
          lambda p: light.booster_.save_model(str(p)))
    models["lightgbm_regressor"] = Served("lightgbm_regressor",
                                          lambda r: light.predict(r).astype(np.float32))
    light_clf = lgb.LGBMClassifier(n_estimators=8, num_leaves=8, verbose=-1).fit(x, three)
    write(repo, "lightgbm_multi_proba", "model.txt",
          config("lightgbm_multi_proba", "lightgbm", True, 3, predict_proba=True),
          lambda p: light_clf.booster_.save_model(str(p)))
    models["lightgbm_multi_proba"] = Served(
        "lightgbm_multi_proba", lambda r: light_clf.predict_proba(r).astype(np.float32))

    forest = ensemble.RandomForestClassifier(n_estimators=5, max_depth=4,
                                             random_state=0).fit(x, three)
    write(repo, "sklearn_forest_proba", "checkpoint.tl",
          config("sklearn_forest_proba", "treelite_checkpoint", True, 3, predict_proba=True),
          lambda p: treelite.sklearn.import_model(forest).serialize(str(p)))
    models["sklearn_forest_proba"] = Served(
        "sklearn_forest_proba", lambda r: forest.predict_proba(r).astype(np.float32))
    write(repo, "sklearn_forest_class", "forest.tl",
          config("sklearn_forest_class", "treelite_checkpoint", True, 1,
                 extra='default_model_filename: "forest.tl"\n'),
          lambda p: treelite.sklearn.import_model(forest).serialize(str(p)))
    models["sklearn_forest_class"] = Served(
        "sklearn_forest_class", lambda r: forest.predict(r).astype(np.float32))
    # Triton FIL's documented example configuration (docs/model_config.md), unmodified: 32
    # features, XGBoost UBJSON, class output, KIND_AUTO, dynamic batching.
    wide_x = np.random.default_rng(5).normal(size=(ROWS, 32)).astype(np.float32)
    wide = xgb.XGBClassifier(n_estimators=6, max_depth=3).fit(wide_x, wide_x[:, 3] > 0)
    folder = repo / "triton_docs_example" / "1"
    folder.mkdir(parents=True)
    (repo / "triton_docs_example" / "config.pbtxt").write_text(TRITON_DOCS_CONFIG)
    wide.save_model(str(folder / "xgboost.ubj"))
    models["triton_docs_example"] = Served(
        "triton_docs_example", lambda r: wide.predict(widen(r)).astype(np.float32),
        features=32)
    # FIL's tuning parameters, GPU-only ones included: accepted, the answers unchanged.
    write(repo, "xgb_tuned", "xgboost.json",
          config("xgb_tuned", "xgboost_json", True, 2, predict_proba=True,
                 extra="".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
                               for k, v in TUNING.items())),
          lambda p: clf.save_model(str(p)))
    models["xgb_tuned"] = Served("xgb_tuned", lambda r: clf.predict_proba(r).astype(np.float32))
    return models


TRITON_DOCS_CONFIG = """backend: "fil"
max_batch_size: 32768
input [
 {
    name: "input__0"
    data_type: TYPE_FP32
    dims: [ 32 ]
  }
]
output [
 {
    name: "output__0"
    data_type: TYPE_FP32
    dims: [ 1 ]
  }
]
instance_group [{ kind: KIND_AUTO }]
parameters [
  {
    key: "model_type"
    value: { string_value: "xgboost_ubj" }
  },
  {
    key: "output_class"
    value: { string_value: "true" }
  }
]

dynamic_batching {}
"""

TUNING = {"use_experimental_optimizations": "true", "storage_type": "SPARSE",
          "algo": "NAIVE", "threads_per_tree": "4", "blocks_per_sm": "2",
          "transfer_threshold": "2", "cpu_nthread": "1", "xgboost_allow_unknown_field": "true"}


def widen(rows: np.ndarray) -> np.ndarray:
    """The test rows (FEATURES wide) repeated to 32 features, for the documented example."""
    return np.tile(rows, (1, -(-32 // rows.shape[1])))[:, :32]

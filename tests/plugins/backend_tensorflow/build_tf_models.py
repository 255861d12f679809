"""Builds the TensorFlow test models with the real TensorFlow and records what TensorFlow
itself answers on the test inputs: ``python build_tf_models.py FOLDER``.

Run in a process of its own so the test process never imports TensorFlow (seconds): it
writes FOLDER/repo (a model repository) and FOLDER/expected.npz (inputs and answers).

- ``keras_auto``: a Keras model exported as a SavedModel (``model.export``), no config.pbtxt;
- ``module_default`` / ``module_scaled``: a ``tf.Module`` SavedModel with two signatures
  (``serving_default``: a matmul and ``tf.strings.upper`` on BYTES; ``scaled``), the second
  chosen with ``TF_SIGNATURE_DEF``;
- ``keras_graphdef``: the Keras model frozen into a GraphDef (``model.graphdef``);
- ``keras_cached``: the Keras SavedModel with warmup and the response cache.
"""

from __future__ import annotations

import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import (
    convert_variables_to_constants_v2,
)

FEATURES, UNITS = 4, 3


class Module(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable(np.linspace(-1, 1, FEATURES * UNITS, dtype=np.float32)
                             .reshape(FEATURES, UNITS))

    @tf.function(input_signature=[tf.TensorSpec([None, FEATURES], tf.float32, name="INPUT0"),
                                  tf.TensorSpec([None, 2], tf.string, name="TEXT")])
    def serve(self, x, text):
        return {"OUTPUT0": tf.matmul(x, self.w), "UPPER": tf.strings.upper(text)}

    @tf.function(input_signature=[tf.TensorSpec([None, FEATURES], tf.float32, name="X")])
    def scaled(self, x):
        return {"Y": 3.0 * x + 1.0}


def main(folder: Path) -> None:
    repo = folder / "repo"
    rng = np.random.default_rng(0)
    x = {n: rng.normal(size=(n, FEATURES)).astype(np.float32) for n in (1, 3)}
    text = np.array([[b"abc", "é\u00df".encode()], [b"x", b"\xff\x00"], [b"", b"q"]],
                    dtype=object)
    expected: dict[str, np.ndarray] = {"x1": x[1], "x3": x[3], "text": text}

    model = keras.Sequential([keras.Input((FEATURES,), name="features"),
                              keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(UNITS, activation="softmax")])
    (repo / "keras_auto" / "1").mkdir(parents=True)
    model.export(str(repo / "keras_auto" / "1" / "model.savedmodel"), verbose=False)
    for n in (1, 3):
        expected[f"keras_{n}"] = np.asarray(model(x[n]))
    expected["keras_doubled_3"] = np.asarray(model(2 * x[3]))  # the ensemble's answer
    (repo / "keras_cached" / "1").mkdir(parents=True)
    model.export(str(repo / "keras_cached" / "1" / "model.savedmodel"), verbose=False)
    (repo / "keras_cached" / "config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel"\nmax_batch_size: 4\n'
        'response_cache { enable: true }\n'
        'model_warmup [ { name: "ones" batch_size: 2 inputs { key: "features" value: { '
        f'data_type: TYPE_FP32 dims: [ {FEATURES} ] random_data: true }} }} }} ]\n')

    module = Module()
    for name in ("module_default", "module_scaled"):
        (repo / name / "1").mkdir(parents=True)
        tf.saved_model.save(module, str(repo / name / "1" / "model.savedmodel"),
                            signatures={"serving_default": module.serve,
                                        "scaled": module.scaled})
    (repo / "module_scaled" / "config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel"\nmax_batch_size: 8\n'
        'parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "scaled" } }\n'
        'parameters { key: "TF_NUM_INTRA_THREADS" value: { string_value: "1" } }\n'
        'parameters { key: "TF_NUM_INTER_THREADS" value: { string_value: "1" } }\n'
        'parameters { key: "TF_USE_PER_SESSION_THREADS" value: { string_value: "1" } }\n'
        'instance_group [ { count: 2 kind: KIND_CPU } ]\n'
        'parameters { key: "MAX_SESSION_SHARE_COUNT" value: { string_value: "2" } }\n')
    served = module.serve(tf.constant(x[3]), tf.constant(text))
    expected["module_output0"] = served["OUTPUT0"].numpy()
    expected["module_upper"] = served["UPPER"].numpy()
    expected["scaled_3"] = module.scaled(tf.constant(x[3]))["Y"].numpy()

    function = tf.function(lambda features: model(features)).get_concrete_function(
        tf.TensorSpec([None, FEATURES], tf.float32, name="features"))
    frozen = convert_variables_to_constants_v2(function)
    graph_def = frozen.graph.as_graph_def()
    placeholder = next(n.name for n in graph_def.node if n.op == "Placeholder")
    output = frozen.outputs[0].name.split(":")[0]
    (repo / "keras_graphdef" / "1").mkdir(parents=True)
    (repo / "keras_graphdef" / "1" / "model.graphdef").write_bytes(
        graph_def.SerializeToString())
    (repo / "keras_graphdef" / "config.pbtxt").write_text(
        f'platform: "tensorflow_graphdef"\nmax_batch_size: 8\n'
        f'input [ {{ name: "{placeholder}" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]\n'
        f'output [ {{ name: "{output}" data_type: TYPE_FP32 dims: [ {UNITS} ] }} ]\n')
    expected["graphdef_names"] = np.array([placeholder, output], dtype=object)
    for n in (1, 3):
        expected[f"graphdef_{n}"] = frozen(tf.constant(x[n]))[0].numpy()

    # Models that must fail their load, each saying why.
    (repo / "wrong_signature" / "1").mkdir(parents=True)
    tf.saved_model.save(module, str(repo / "wrong_signature" / "1" / "model.savedmodel"),
                        signatures={"serving_default": module.serve})
    (repo / "wrong_signature" / "config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel"\n'
        'parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "predict" } }\n')
    (repo / "wrong_input" / "1").mkdir(parents=True)
    (repo / "wrong_input" / "1" / "model.graphdef").write_bytes(graph_def.SerializeToString())
    (repo / "wrong_input" / "config.pbtxt").write_text(
        f'platform: "tensorflow_graphdef"\nmax_batch_size: 8\n'
        f'input [ {{ name: "pixels" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]\n'
        f'output [ {{ name: "{output}" data_type: TYPE_FP32 dims: [ {UNITS} ] }} ]\n')
    (repo / "graphdef_no_config" / "1").mkdir(parents=True)
    (repo / "graphdef_no_config" / "1" / "model.graphdef").write_bytes(
        graph_def.SerializeToString())
    np.savez(folder / "expected.npz", **expected)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Loading a SavedModel or a GraphDef into a TensorFlow session, as Triton's backend does.

Triton runs TensorFlow models through the C++ session API (a ``SavedModelBundle``, or a
``GraphDef`` imported into a session); here the same happens through
``tf.compat.v1.Session``, so a model gets the session options Triton gives it
(``TF_NUM_INTRA_THREADS``, ``TF_NUM_INTER_THREADS``, ``TF_USE_PER_SESSION_THREADS``) and the
signature Triton would choose: ``TF_SIGNATURE_DEF``, else ``serving_default``, else the first
signature that is neither the init nor the train op (with a warning, as Triton logs it).

A SavedModel's tensors are its signature's inputs and outputs, by their signature keys. A
GraphDef names none: as in Triton, every ``Placeholder`` may be an input and every node an
output, and the configuration says which are used.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

import tensorflow as tf

from naiad.errors import InferenceServerError, Status, invalid_arg
from naiad_backend_tensorflow.settings import DEFAULT_SIGNATURE_DEF, ModelSettings

log = logging.getLogger("naiad.backend.tensorflow")

SAVEDMODEL = "tensorflow_savedmodel"
GRAPHDEF = "tensorflow_graphdef"
INIT_OP_KEY = "__saved_model_init_op"
TRAIN_OP_KEY = "__saved_model_train_op"

# TensorFlow dtype names -> V2 datatypes (the types Triton's tensorflow backend converts).
TF_TO_DATATYPE = {
    "bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32",
    "uint64": "UINT64", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "float16": "FP16", "float32": "FP32", "float64": "FP64", "string": "BYTES",
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor a model offers: its name in the session, datatype and shape (-1: any)."""

    tensor_name: str
    datatype: str | None  # None: a type Triton has no datatype for
    dims: tuple[int, ...] | None  # None: unknown rank
    tf_type: str


@dataclass
class LoadedModel:
    """A session holding the model, and the tensors it offers by their Triton names."""

    session: tf.compat.v1.Session
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]
    graphdef: bool
    lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> None:
        self.session.close()


def session_config(settings: ModelSettings, allow_soft_placement: bool
                   ) -> tf.compat.v1.ConfigProto:
    return tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=settings.intra_threads,
        inter_op_parallelism_threads=settings.inter_threads,
        use_per_session_threads=settings.per_session_threads,
        allow_soft_placement=allow_soft_placement,
        # naiad's tensorflow backend runs on the CPU: no GPU is touched even where one is.
        device_count={"GPU": 0},
    )


def load(path: Path, platform: str, settings: ModelSettings, allow_soft_placement: bool,
         model_name: str, version_dir: Path | None = None) -> LoadedModel:
    """Load ``path`` (a SavedModel folder or a GraphDef file) into a new session."""
    if not path.exists():
        raise InferenceServerError(f"model '{model_name}': unable to find '{path}'",
                                   Status.UNAVAILABLE)
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph,
                                   config=session_config(settings, allow_soft_placement))
    try:
        with graph.as_default():
            if platform == GRAPHDEF:
                loaded = _load_graphdef(session, path, model_name)
            else:
                loaded = _load_savedmodel(session, path, settings, model_name)
            if settings.init_ops_file:
                _run_init_ops(session, settings.init_ops_file, path, version_dir, model_name)
    except BaseException:
        session.close()
        raise
    return loaded


def _load_savedmodel(session: tf.compat.v1.Session, path: Path, settings: ModelSettings,
                     model_name: str) -> LoadedModel:
    if not path.is_dir():
        raise invalid_arg(f"model '{model_name}': '{path}' is not a SavedModel folder")
    try:
        meta = tf.compat.v1.saved_model.loader.load(session, [settings.graph_tag], str(path))
    except (RuntimeError, ValueError, OSError, tf.errors.OpError) as exc:
        raise invalid_arg(f"model '{model_name}': cannot load the SavedModel '{path}' with tag "
                          f"'{settings.graph_tag}': {_reason(exc)}") from None
    signatures = meta.signature_def
    wanted = settings.signature_def or DEFAULT_SIGNATURE_DEF
    key = wanted if wanted in signatures else None
    if key is None and not settings.signature_def:
        key = next((k for k in signatures if k not in (INIT_OP_KEY, TRAIN_OP_KEY)), None)
        if key is not None:
            log.warning("model '%s': unable to find serving signature '%s'; using signature "
                        "'%s'", model_name, DEFAULT_SIGNATURE_DEF, key)
    if key is None:
        raise invalid_arg(f"model '{model_name}': unable to load '{path}', expected "
                          f"'{wanted}' signature; it has {', '.join(sorted(signatures))}")
    signature = signatures[key]
    return LoadedModel(session,
                       {name: _info(t.name, t.dtype, t.tensor_shape)
                        for name, t in signature.inputs.items()},
                       {name: _info(t.name, t.dtype, t.tensor_shape)
                        for name, t in signature.outputs.items()},
                       graphdef=False)


def _load_graphdef(session: tf.compat.v1.Session, path: Path, model_name: str
                   ) -> LoadedModel:
    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(path.read_bytes())
        tf.import_graph_def(graph_def, name="")
    except (OSError, ValueError, tf.errors.OpError) as exc:
        raise invalid_arg(f"model '{model_name}': cannot read '{path}' as a GraphDef: "
                          f"{_reason(exc)}") from None
    except Exception as exc:  # protobuf's DecodeError is not part of its public API
        raise invalid_arg(f"model '{model_name}': cannot read '{path}' as a GraphDef: "
                          f"{type(exc).__name__}: {_reason(exc)}") from None
    inputs, outputs = {}, {}
    for op in session.graph.get_operations():
        if not op.outputs:
            continue
        tensor = op.outputs[0]
        shape = tensor.shape
        info = TensorInfo(tensor.name, TF_TO_DATATYPE.get(tensor.dtype.name),
                          None if shape.rank is None else
                          tuple(-1 if d is None else d for d in shape.as_list()),
                          tensor.dtype.name)
        (inputs if op.type == "Placeholder" else outputs)[op.name] = info
    return LoadedModel(session, inputs, outputs, graphdef=True)


def _run_init_ops(session: tf.compat.v1.Session, filename: str, path: Path,
                  version_dir: Path | None, model_name: str) -> None:
    """TF_INIT_OPS_FILE: a JSON file ``{"init_ops": [...]}`` in the version folder, else in
    the model folder (Triton's order); its operations run once, after loading."""
    folders = [version_dir] if version_dir is not None else [path.parent]
    folders.append(folders[0].parent)
    candidates = [folder / filename for folder in folders]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None or Path(filename).is_absolute() or ".." in Path(filename).parts:
        raise invalid_arg(f"model '{model_name}': parameter 'TF_INIT_OPS_FILE' names "
                          f"'{filename}', which is not a file in the version or model folder")
    try:
        ops = json.loads(found.read_text())["init_ops"]
        session.run([session.graph.get_operation_by_name(name) for name in ops])
    except (KeyError, TypeError, ValueError, tf.errors.OpError) as exc:
        raise invalid_arg(f"model '{model_name}': the init ops of '{found}' cannot run: "
                          f"{_reason(exc)}") from None


def _info(tensor_name: str, dtype_enum: int, shape: tf.TensorShape | object) -> TensorInfo:
    dtype = tf.dtypes.as_dtype(dtype_enum)
    proto = shape  # a TensorShapeProto
    dims = (None if proto.unknown_rank  # type: ignore[attr-defined]
            else tuple(d.size for d in proto.dim))  # type: ignore[attr-defined]
    return TensorInfo(tensor_name, TF_TO_DATATYPE.get(dtype.name), dims, dtype.name)


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__

"""The ``fil`` backend: tree ensembles served on CPU as Triton's FIL backend serves them.

One :class:`FilBackend` serves every model with ``backend: "fil"``. Each instance loads the
model file named by ``model_type`` (``xgboost.model``, ``xgboost.json``, ``xgboost.ubj``,
``model.txt``, ``checkpoint.tl``, or ``default_model_filename``) with Treelite and checks
the configured tensors against it, so a mismatch fails the load, not a request. FIL does
not auto-complete configurations, and neither does this backend: a FIL model needs its
config.pbtxt (its ``model_type`` and ``output_class`` exist nowhere else).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import treelite
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelInstanceGroup

from naiad.backend_utils import (
    model_file_path,
    refuse_unsupported_features,
    run_auto_groups_on_cpu,
)
from naiad.errors import invalid_arg, unsupported
from naiad.types import Backend, InstanceInfo, ModelContext
from naiad_backend_fil.forest import Forest, ForestInfo, describe, load
from naiad_backend_fil.instance import FilModelInstance
from naiad_backend_fil.parameters import MODEL_FILENAMES, FilParameters, parse

log = logging.getLogger("naiad.backend.fil")

INPUT_NAME = "input__0"
OUTPUT_NAME = "output__0"
#: FIL's optional SHAP output, computed on GPUs (and by its CPU TreeSHAP): not served here.
SHAP_OUTPUT_NAME = "treeshap_output"


class FilBackend(Backend):
    """Serves models whose config says ``backend: "fil"``."""

    name = "fil"
    # FIL's default file depends on model_type; see MODEL_FILENAMES.
    default_model_filename = MODEL_FILENAMES["xgboost"]

    def __init__(self, backend_config: dict[str, str] | None = None) -> None:
        if backend_config:
            log.warning("the fil backend has no --backend-config settings; ignoring %s",
                        ", ".join(sorted(backend_config)))
        log.info("fil backend: Treelite %s (GTIL) on CPU", treelite.__version__)

    def auto_complete_config(self, config: ModelConfig, model_dir: Path) -> list[str]:
        """FIL fills no tensors (its config says what the model file cannot); instance
        groups left to the server run on the CPU."""
        return run_auto_groups_on_cpu(config, config.name or model_dir.name)

    def create_instance(self, context: ModelContext, instance: InstanceInfo
                        ) -> FilModelInstance:
        config, name = context.config, context.name
        if instance.kind == "KIND_GPU":
            raise unsupported(f"model '{name}': instance group asks for KIND_GPU; naiad's fil "
                              f"backend predicts on the CPU only (use KIND_CPU)")
        # FIL has no sequence batching at all (Triton's FIL backend refuses it too).
        refuse_unsupported_features(config, name, self.name, {
            "sequence_batching": config.HasField("sequence_batching")})
        parameters = parse(config, name)
        filename = config.default_model_filename or MODEL_FILENAMES[parameters.model_type]
        path = model_file_path(context.version_dir, filename, name)
        model = load(path, parameters, name)
        info = describe(model, name)
        output_dims = check_tensors(config, info, parameters, name)
        nthread = thread_count(config, parameters)
        log.info("model '%s' instance '%s': %s from '%s' (%d features, %d class%s, %s), "
                 "%d prediction thread%s", name, instance.name, parameters.model_type, path,
                 info.num_feature, info.num_class, "" if info.num_class == 1 else "es",
                 "predict_proba" if parameters.predict_proba else
                 "classes" if parameters.output_class else "regression",
                 nthread, "" if nthread == 1 else "s")
        return FilModelInstance(Forest(model, info, parameters, nthread), context,
                                instance, output_dims)


def check_tensors(config: ModelConfig, info: ForestInfo, parameters: FilParameters,
                  model_name: str) -> tuple[int, ...]:
    """Check ``input__0`` and ``output__0`` against the model; return the output's dims as
    FIL answers them: the configured dims (or ``reshape``) without the dimensions of size 1
    (RAPIDS-Triton's ``squeeze_output``, which FIL uses: ``dims: [ 1 ]`` gives ``[batch]``)."""
    inputs = {t.name: t for t in config.input}
    outputs = {t.name: t for t in config.output}
    if list(inputs) != [INPUT_NAME]:
        raise invalid_arg(f"model '{model_name}': the FIL backend takes one input named "
                          f"'{INPUT_NAME}', got {sorted(inputs) or 'none'}")
    if SHAP_OUTPUT_NAME in outputs:
        raise unsupported(f"model '{model_name}': output '{SHAP_OUTPUT_NAME}' (SHAP values) "
                          f"is not supported by naiad's fil backend yet")
    if list(outputs) != [OUTPUT_NAME]:
        raise invalid_arg(f"model '{model_name}': the FIL backend gives one output named "
                          f"'{OUTPUT_NAME}', got {sorted(outputs) or 'none'}")
    tensor = inputs[INPUT_NAME]
    if tensor.data_type != DataType.TYPE_FP32:
        raise invalid_arg(f"model '{model_name}': input '{INPUT_NAME}' must be TYPE_FP32 (FIL "
                          f"predicts in 32-bit floats), got {DataType.Name(tensor.data_type)}")
    dims = list(tensor.dims)
    want_rank = 1 if config.max_batch_size > 0 else 2
    if len(dims) != want_rank or dims[-1] not in (-1, info.num_feature):
        form = (f"[ {info.num_feature} ]" if want_rank == 1 else
                f"[ -1, {info.num_feature} ] (rows, features: the model does not batch)")
        raise invalid_arg(f"model '{model_name}': input '{INPUT_NAME}' has dims {dims}; the "
                          f"model file has {info.num_feature} features, so dims must be {form}")
    output = outputs[OUTPUT_NAME]
    if output.data_type != DataType.TYPE_FP32:
        raise invalid_arg(f"model '{model_name}': output '{OUTPUT_NAME}' must be TYPE_FP32, "
                          f"got {DataType.Name(output.data_type)}")
    shape = list(output.reshape.shape) if output.HasField("reshape") else list(output.dims)
    if config.max_batch_size == 0 and shape:
        shape = shape[1:]  # the rows dimension
    squeezed = tuple(d for d in shape if d != 1)
    columns = info.output_columns(parameters)
    size = 1
    for d in squeezed:
        size *= d
    if any(d < 0 for d in squeezed) or size != columns:
        what = ("one probability per class" if parameters.predict_proba else
                "the class" if parameters.output_class else "the prediction")
        raise invalid_arg(f"model '{model_name}': output '{OUTPUT_NAME}' has dims "
                          f"{list(output.dims)}, but the model gives {what}: {columns} value"
                          f"{'' if columns == 1 else 's'} per row, so dims must be "
                          f"[ {columns} ]")
    return squeezed


def thread_count(config: ModelConfig, parameters: FilParameters) -> int:
    """GTIL's threads for one instance: ``cpu_nthread`` when set (-1: every core), else the
    cores shared out between the model's CPU instances, so that instances running at once
    do not oversubscribe the machine."""
    cores = available_cpus()
    if parameters.cpu_nthread is not None:
        return cores if parameters.cpu_nthread == -1 else parameters.cpu_nthread
    instances = sum(max(g.count, 1) for g in config.instance_group
                    if g.kind != ModelInstanceGroup.KIND_GPU) or 1
    return max(1, cores // instances)


def available_cpus() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1

"""Paths a model's configuration names, kept inside the model's folder.

A configuration names files: the model file (``default_model_filename``, TensorRT's
``cc_model_filenames``), warmup data (``model_warmup ... input_data_file``, in ``warmup/``),
a sequence state's first value (``initial_state ... data_file``, in ``initial_state/``), and
the Python backend's ``EXECUTION_ENV_PATH`` parameter. Loading the model opens them, and
for a Python model, imports or runs them. A load request may carry a configuration of its
own (the ``config`` parameter of ``POST /v2/repository/models/M/load``, gRPC
``RepositoryModelLoad``), so without a check a client could make the server import any
``.py`` file on the machine.

Two rules, one function (:func:`inside_folder`) applying them:

- every name, whoever wrote it, is a relative path that stays in its folder by its spelling:
  not empty, not absolute, no ``..`` component, no NUL. This alone closes
  ``/some/where/evil.py`` and ``../../x/evil.py``.
- a name a load *request* gives (its configuration override) must also stay inside the model
  folder once every symbolic link is resolved (``os.path.realpath``).

A configuration read from the repository (``config.pbtxt``, ``configs/NAME.pbtxt``) is the
operator's: its names may lead through symbolic links the operator made (a model file linked
to shared weights, a version folder on another volume), and its ``EXECUTION_ENV_PATH`` may
be any absolute path, as Triton documents (a shared conda-pack tarball). Nobody but the
operator can make those links: the load API writes the files it is given as regular files
only (:mod:`naiad.models.staging`). A request's names get no such trust.

A violation fails the load with INVALID_ARG (HTTP 400) naming the model, the field, the
value and the rule; what served keeps serving.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import InferenceServerError, invalid_arg

#: The folder of a model holding ``model_warmup`` input files, as in Triton.
WARMUP_FOLDER = "warmup"
#: The folder of a model holding sequence states' ``initial_state`` data files, as in Triton.
INITIAL_STATE_FOLDER = "initial_state"
#: The Python backend's parameter naming the model's environment (Triton's spelling).
EXECUTION_ENV_PATH = "EXECUTION_ENV_PATH"
#: Stands for the model folder in ``EXECUTION_ENV_PATH`` (Triton's spelling).
MODEL_DIRECTORY_KEYWORD = "$$TRITON_MODEL_DIRECTORY"

RULE = ("a path a model configuration names must stay inside the model folder (relative, "
        "no '..'), and one a load request names must stay inside it with symbolic links "
        "resolved")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a path inside a folder by its spelling, or None."""
    if not name:
        return "is empty"
    if "\0" in name:
        return "contains a NUL character"
    if os.path.isabs(name):
        return "is an absolute path"
    if ".." in PurePosixPath(name).parts:
        return "leaves the model folder ('..')"
    return None


def escape_problem(path: str | Path, model_dir: Path) -> str | None:
    """Why ``path`` is not inside ``model_dir`` once symbolic links are resolved, or None."""
    root = os.path.realpath(model_dir)
    target = os.path.realpath(path)
    if os.path.commonpath([root, target]) == root:
        return None
    return f"resolves to '{target}', outside the model folder '{root}'"


def inside_folder(folder: Path, name: str, *, model: str, field: str,
                  model_dir: Path | None = None) -> Path:
    """``folder / name`` when ``name`` stays in ``folder`` by its spelling; with
    ``model_dir``, also when it stays inside ``model_dir`` once symbolic links are resolved
    (the rule for names a load request gives). Raises INVALID_ARG naming ``model``,
    ``field``, the value and the rule otherwise."""
    problem = name_problem(name)
    if problem is None and model_dir is not None:
        problem = escape_problem(folder / name, model_dir)
    if problem is not None:
        raise _refused(model, field, name, problem)
    return folder / name


def check_config_paths(model: str, model_dir: Path, config: ModelConfig, *,
                       from_request: bool) -> None:
    """Apply the rules to every path ``config`` names. ``from_request``: the configuration
    came with a load request (links must not lead out either); otherwise it is the
    repository's own (the operator's). Raises INVALID_ARG at the first violation."""
    resolve_in = model_dir if from_request else None
    version_dirs = _version_dirs(model_dir) if from_request else [model_dir]
    model_files = [("default_model_filename", config.default_model_filename)] * bool(
        config.default_model_filename)
    model_files += [(f"cc_model_filenames['{key}']", value)
                    for key, value in sorted(config.cc_model_filenames.items())]
    for field, name in model_files:
        for version_dir in version_dirs:  # the file lies in each version folder
            inside_folder(version_dir, name, model=model, field=field, model_dir=resolve_in)
    for index, warmup in enumerate(config.model_warmup):
        for input_name, spec in sorted(warmup.inputs.items()):
            if spec.WhichOneof("input_data_type") == "input_data_file":
                inside_folder(model_dir / WARMUP_FOLDER, spec.input_data_file, model=model,
                              field=f"model_warmup[{index}] input '{input_name}' "
                                    f"input_data_file", model_dir=resolve_in)
    for state in config.sequence_batching.state:
        for initial in state.initial_state:
            if initial.WhichOneof("state_data") == "data_file":
                inside_folder(model_dir / INITIAL_STATE_FOLDER, initial.data_file, model=model,
                              field=f"sequence_batching state '{state.input_name}' "
                                    f"initial_state data_file", model_dir=resolve_in)
    if from_request:
        _check_request_locations(model, model_dir, config)


def _check_request_locations(model: str, model_dir: Path, config: ModelConfig) -> None:
    """Absolute locations a configuration may name (Triton's python backend environment,
    custom operator libraries): from a request, only inside the model folder."""
    locations = []
    if EXECUTION_ENV_PATH in config.parameters:  # indexing a protobuf map adds the key
        value = config.parameters[EXECUTION_ENV_PATH].string_value
        if value:
            locations.append((f"parameters['{EXECUTION_ENV_PATH}']", value,
                              value.replace(MODEL_DIRECTORY_KEYWORD, str(model_dir))))
    for index, library in enumerate(config.model_operations.op_library_filename):
        locations.append((f"model_operations op_library_filename[{index}]", library, library))
    for field, value, path in locations:
        problem = "contains a NUL character" if "\0" in path else escape_problem(
            os.path.join(model_dir, path), model_dir)
        if problem is not None:
            raise _refused(model, field, value, problem + f" (write "
                           f"'{MODEL_DIRECTORY_KEYWORD}/...' for a file of the model folder)")


def repository_problems(repositories: list[str]) -> list[str]:
    """Why each local ``--model-repository`` cannot be served (missing, not a folder,
    unreadable), one line each: a command-line error found before anything starts. Remote
    ones (``s3://`` ...) are their source's to check."""
    problems = []
    for uri in repositories:
        if "://" in uri:
            continue
        try:
            os.listdir(uri)
        except FileNotFoundError:
            problems.append(f"--model-repository {uri}: no such directory")
        except NotADirectoryError:
            problems.append(f"--model-repository {uri}: not a directory")
        except OSError as exc:
            problems.append(f"--model-repository {uri}: cannot be read: "
                            f"{exc.strerror or exc}")
    return problems


def _version_dirs(model_dir: Path) -> list[Path]:
    """The folders a model file name is looked up in: each numeric version folder (the
    model folder itself when it has none yet: the name is then checked by its spelling and
    against the model folder's own links)."""
    try:
        found = [entry for entry in model_dir.iterdir()
                 if entry.name.isascii() and entry.name.isdigit() and entry.is_dir()]
    except OSError:
        found = []
    return found or [model_dir]


def _refused(model: str, field: str, value: str, problem: str) -> InferenceServerError:
    shown = f"'{value}'" if value.isprintable() else ascii(value)
    return invalid_arg(f"model '{model}': {field} {shown} {problem}; {RULE}")

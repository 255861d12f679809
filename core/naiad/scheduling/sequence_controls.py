"""What the sequence batcher adds to each request of a sequence: control tensors and state.

``control_input`` names tensors the model reads but the client never sends: START, END and
READY flags (as INT32, FP32 or BOOL false/true pairs) and the correlation ID (CORRID). The
``state`` section declares implicit state: the batcher feeds the state a sequence's previous
request produced (``output_name``) back as an input (``input_name``), starting from
``initial_state`` (zeros, or raw bytes from the model's ``initial_state/`` folder).

Everything is decided once, at load time; per request this builds a few one-element arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelSequenceBatching

from naiad.datatypes import NUMPY_DTYPES, config_to_datatype, deserialize_bytes, element_count
from naiad.errors import InferenceServerError, invalid_arg, unavailable
from naiad.types import Tensor

Control = ModelSequenceBatching.Control
INITIAL_STATE_FOLDER = "initial_state"

SequenceId = int | str


@dataclass(slots=True, frozen=True)
class ControlTensor:
    """One control the model reads: which tensor, which kind, and its false/true values."""

    name: str
    kind: int  # Control.CONTROL_SEQUENCE_START, ...
    datatype: str
    false_true: tuple[object, object]  # unused for CORRID


@dataclass(slots=True, frozen=True)
class StateTensor:
    """One implicit state: fed to ``input_name``, read back from ``output_name``."""

    input_name: str
    output_name: str
    datatype: str
    initial: np.ndarray  # without the batch dimension


class SequenceControls:
    """The control and state tensors of one model, and the correlation ID type it takes."""

    def __init__(self, name: str, config: ModelConfig, model_dir: Path | None) -> None:
        self.name = name
        self.batching = config.max_batch_size > 0
        sequence = config.sequence_batching
        self.controls = tuple(_controls(sequence))
        corrid = [c for c in self.controls if c.kind == Control.CONTROL_SEQUENCE_CORRID]
        # With a CORRID control the model says which ID type it takes; without, either.
        self.id_type: type | None = None
        if corrid:
            self.id_type = str if corrid[0].datatype == "BYTES" else int
        self.states = tuple(_state(name, state, model_dir) for state in sequence.state)
        self.state_outputs = frozenset(s.output_name for s in self.states)
        # A state output the config also lists as an output may be requested by the client
        # (for debugging, as in Triton); any other never leaves the server.
        self.hidden_outputs = self.state_outputs - {output.name for output in config.output}

    def sequence_id(self, parameters: dict[str, object]) -> SequenceId:
        """The request's correlation ID; INVALID_ARG when it is missing, zero, empty or of the
        wrong type for the model."""
        value = parameters.get("sequence_id")
        if isinstance(value, bool) or not isinstance(value, int | str) or value in (0, ""):
            raise invalid_arg(f"inference request to model '{self.name}' must specify a "
                              f"non-zero or non-empty correlation ID (the 'sequence_id' "
                              f"parameter): the model uses the sequence batcher")
        if self.id_type is not None and not isinstance(value, self.id_type):
            want = "a string" if self.id_type is str else "an unsigned integer"
            raise invalid_arg(f"inference request to model '{self.name}' has correlation ID "
                              f"{value!r}, but the model's CORRID control takes {want}")
        return value

    def control_inputs(self, sequence_id: SequenceId, start: bool, end: bool
                       ) -> dict[str, Tensor]:
        """The control tensors for one request of a sequence (READY is always true: naiad
        sends no empty slots)."""
        tensors = {}
        shape = (1, 1) if self.batching else (1,)
        for control in self.controls:
            if control.kind == Control.CONTROL_SEQUENCE_CORRID:
                value: object = sequence_id
                if control.datatype == "BYTES":
                    value = str(sequence_id).encode()
                    data = np.array([value], dtype=np.object_).reshape(shape)
                else:
                    data = np.array([value], dtype=NUMPY_DTYPES[control.datatype]).reshape(shape)
            else:
                flag = {Control.CONTROL_SEQUENCE_START: start,
                        Control.CONTROL_SEQUENCE_END: end,
                        Control.CONTROL_SEQUENCE_READY: True}[control.kind]
                value = control.false_true[1 if flag else 0]
                data = np.array([value], dtype=NUMPY_DTYPES[control.datatype]).reshape(shape)
            tensors[control.name] = Tensor(control.name, control.datatype, shape, data)
        return tensors

    def initial_state(self) -> dict[str, np.ndarray]:
        """A new sequence's state: input name -> array (with the batch dimension)."""
        return {s.input_name: (s.initial[np.newaxis] if self.batching else s.initial)
                for s in self.states}

    def state_inputs(self, state: dict[str, np.ndarray]) -> dict[str, Tensor]:
        return {s.input_name: Tensor(s.input_name, s.datatype, state[s.input_name].shape,
                                     state[s.input_name]) for s in self.states}

    def take_state(self, outputs: list[Tensor], state: dict[str, np.ndarray]) -> list[Tensor]:
        """Store the state outputs of a response in ``state``; return the outputs the client
        may see (not the state outputs the config does not list). A state the model did not
        produce keeps its previous value."""
        if not self.states:
            return outputs
        by_output = {s.output_name: s for s in self.states}
        kept = []
        for tensor in outputs:
            spec = by_output.get(tensor.name)
            if spec is not None:
                state[spec.input_name] = np.asarray(tensor.data)
            if tensor.name not in self.hidden_outputs:
                kept.append(tensor)
        return kept


def _controls(sequence: ModelSequenceBatching) -> list[ControlTensor]:
    found = []
    for control_input in sequence.control_input:
        for control in control_input.control:
            if control.kind == Control.CONTROL_SEQUENCE_CORRID:
                datatype = config_to_datatype(DataType.Name(control.data_type))
                found.append(ControlTensor(control_input.name, control.kind, datatype, (0, 0)))
            elif len(control.int32_false_true):
                found.append(ControlTensor(control_input.name, control.kind, "INT32",
                                           tuple(control.int32_false_true)))
            elif len(control.fp32_false_true):
                found.append(ControlTensor(control_input.name, control.kind, "FP32",
                                           tuple(control.fp32_false_true)))
            else:
                found.append(ControlTensor(control_input.name, control.kind, "BOOL",
                                           tuple(control.bool_false_true)))
    return found


def _state(name: str, state: ModelSequenceBatching.State, model_dir: Path | None
           ) -> StateTensor:
    datatype = config_to_datatype(DataType.Name(state.data_type))
    where = f"model '{name}' state '{state.input_name}'"
    if state.initial_state:  # a repeated field; Triton reads its first entry
        initial = state.initial_state[0]
        dims = tuple(initial.dims)
        if any(d < 0 for d in dims):
            raise invalid_arg(f"{where}: initial_state dims {list(dims)} must be fixed")
        initial_data = _initial_data(where, datatype, dims, initial, model_dir)
    else:
        # No initial_state: Triton leaves the first state uninitialised, with 1 for every
        # variable dimension; naiad gives zeros of that shape.
        dims = tuple(d if d >= 0 else 1 for d in state.dims)
        initial_data = _zeros(datatype, dims)
    return StateTensor(state.input_name, state.output_name, datatype, initial_data)


def _initial_data(where: str, datatype: str, dims: tuple[int, ...],
                  initial: ModelSequenceBatching.InitialState, model_dir: Path | None
                  ) -> np.ndarray:
    if initial.WhichOneof("state_data") != "data_file":
        return _zeros(datatype, dims)
    if model_dir is None:
        raise unavailable(f"{where}: initial_state data_file needs the model folder")
    path = model_dir / INITIAL_STATE_FOLDER / initial.data_file
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InferenceServerError(f"{where}: cannot read initial state {path}: "
                                   f"{exc.strerror}") from None
    count = element_count(dims)
    dtype = NUMPY_DTYPES[datatype]
    if dtype is None:
        return deserialize_bytes(raw, count, where).reshape(dims)
    if len(raw) < count * dtype.itemsize:
        raise invalid_arg(f"{where}: {path.name} holds {len(raw)} bytes; dims {list(dims)} "
                          f"of {datatype} need {count * dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(dims).copy()


def _zeros(datatype: str, dims: tuple[int, ...]) -> np.ndarray:
    dtype = NUMPY_DTYPES[datatype]
    if dtype is None:
        return np.full(dims, b"", dtype=np.object_)
    return np.zeros(dims, dtype)

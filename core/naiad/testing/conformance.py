"""The backend conformance kit: one pytest class a backend author subclasses.

It checks a backend plugin end to end, through a real ``naiad serve`` process and the
official ``tritonclient.http`` and ``tritonclient.grpc``: every model loads and is READY,
metadata and config match, auto-complete fills a config-less model, batches of 1 and N echo
exactly over HTTP JSON, HTTP binary and gRPC for every datatype the backend claims, bad
inputs get HTTP 400 / INVALID_ARGUMENT naming model and tensor, and explicit unload and
load work. Use it in a test module of your plugin::

    from pathlib import Path
    from naiad.testing.conformance import BackendConformance, IdentityModel

    class TestEchoConformance(BackendConformance):
        backend = "echo"
        datatypes = ("FP32", "INT64")

        def write_identity_model(self, version_dir: Path, datatype: str,
                                 max_batch_size: int) -> IdentityModel:
            ...  # write version_dir / "model.echo": output = input, dims [-1] past the batch
            return IdentityModel("INPUT0", "OUTPUT0")

The kit writes each model's config.pbtxt itself, serves one repository per subclass from a
class-scoped fixture, and parametrizes its tests with ``pytest_generate_tests`` (a subclass
that defines its own must call ``super().pytest_generate_tests(metafunc)``). BF16 is not
sent as HTTP JSON: tritonclient only sends BF16 as binary data. This module imports pytest;
``naiad.testing`` itself does not import it, so serving never needs pytest.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc.model_config_pb2 import DataType
from tritonclient.utils import InferenceServerException

from naiad.datatypes import DATATYPES, datatype_to_config
from naiad.testing.conformance_data import (
    ELEMENTS_PER_ROW,
    IdentityModel,
    identity_config,
    mismatch,
    sample,
)
from naiad.testing.server import ServerProcess, naiad_server

__all__ = ["BackendConformance", "IdentityModel"]

TRANSPORTS = ("http-json", "http-binary", "grpc")
MAX_BATCH_SIZE = 8
BATCH_OF_N = 5
# The merge test: requests of MERGED_ROWS rows each, MAX_BATCH_SIZE // MERGED_ROWS to a
# batch. The batcher sends a batch the moment it is full (the preferred size defaults to
# max_batch_size), so its long delay is only ever waited out when a request went missing.
CONCURRENT_REQUESTS = 8
MERGED_ROWS = 2
MERGE_DELAY_MICROSECONDS = 5 * 1_000_000
NON_BATCHING = "conformance_nobatch"
AUTO_COMPLETE = "conformance_autocomplete"
LIFECYCLE = "conformance_lifecycle"
UNKNOWN_INPUT = "NOT_AN_INPUT_OF_THE_MODEL"
RESULT_WAIT_SECONDS = 60.0
BAD_INPUTS = ("wrong_datatype", "wrong_rank", "batch_too_large", "missing_input",
              "unknown_input")

# A request the server refuses: what the client sees over each protocol.
REJECTED = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}
# A request for an unloaded model: not found / unavailable, never a server error.
NOT_SERVED = {"http": {"400", "404", "503"},
              "grpc": {"StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE",
                       "StatusCode.INVALID_ARGUMENT"}}

Clients = dict[str, Any]


def batching_model(datatype: str) -> str:
    """The repository name of the batching identity model of ``datatype``."""
    return f"conformance_{datatype.lower()}"


def merging_model(datatype: str) -> str:
    """The repository name of the dynamically batched identity model of ``datatype``."""
    return f"conformance_merge_{datatype.lower()}"


class ConformanceRepository:
    """The repository the kit built: its folder and each model's datatype and tensor names."""

    def __init__(self, path: Path, primary: str) -> None:
        self.path = path
        self.primary = primary  # the datatype of the non-batching and lifecycle models
        self.models: dict[str, tuple[str, int, IdentityModel]] = {}

    def add(self, name: str, datatype: str, max_batch_size: int, model: IdentityModel) -> None:
        self.models[name] = (datatype, max_batch_size, model)

    def identity(self, name: str) -> IdentityModel:
        return self.models[name][2]


class BackendConformance:
    """Subclass in a test module: ``class TestOnnxConformance(BackendConformance): ...``.
    pytest collects the inherited test_* methods."""

    backend: str = ""  # the `backend:` name in config.pbtxt, e.g. "onnxruntime"
    datatypes: tuple[str, ...] = ()  # V2 datatypes the backend claims, e.g. ("FP32","BYTES")
    auto_complete: bool = True  # the backend fills inputs/outputs/max_batch_size itself
    server_args: tuple[str, ...] = ()  # extra `naiad serve` arguments
    # BYTES elements must be UTF-8 text (ONNX string tensors, for one): the kit then sends
    # no raw bytes that are not valid UTF-8.
    bytes_are_text: bool = False

    def write_identity_model(self, version_dir: Path, datatype: str,
                             max_batch_size: int) -> IdentityModel:
        """Write the model file(s) into ``version_dir`` (e.g. <repo>/<model>/1/) for a model
        whose one output equals its one input, of ``datatype``, dims [-1] past the batch
        dimension (so with max_batch_size > 0 the full shape is [-1, -1]; with 0 it is
        [-1]). Return the tensor names."""
        raise NotImplementedError

    # --- parametrization ----------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize ``datatype`` (and ``transport``) from the subclass's claims."""
        names = metafunc.fixturenames
        if "datatype" in names and "transport" in names:
            pairs = [(d, t) for d in self.datatypes for t in TRANSPORTS
                     if not (d == "BF16" and t == "http-json")]
            metafunc.parametrize(("datatype", "transport"), pairs,
                                 ids=[f"{d}-{t}" for d, t in pairs])
        elif "datatype" in names:
            metafunc.parametrize("datatype", list(self.datatypes))

    # --- fixtures -----------------------------------------------------------------------

    # Class-scoped fixtures are classmethods: pytest gives each test a new instance.
    @pytest.fixture(scope="class")
    @classmethod
    def conformance_repo(cls, tmp_path_factory: pytest.TempPathFactory
                         ) -> ConformanceRepository:
        """One repository: per claimed datatype a batching identity model and one behind the
        dynamic batcher; a non-batching one, one to unload and load, and (with
        ``auto_complete``) one without config.pbtxt."""
        return cls()._build_repository(tmp_path_factory.mktemp(f"{cls.backend}-conformance"))

    @pytest.fixture(scope="class")
    @classmethod
    def conformance_server(cls, conformance_repo: ConformanceRepository
                           ) -> Iterator[ServerProcess]:
        """``naiad serve`` on the repository, every model loaded at start."""
        with naiad_server("--model-repository", str(conformance_repo.path),
                          "--model-control-mode", "explicit", "--load-model", "*",
                          *cls.server_args) as server:
            yield server

    @pytest.fixture(scope="class")
    @classmethod
    def clients(cls, conformance_server: ServerProcess) -> Iterator[Clients]:
        """``{"http": tritonclient.http client, "grpc": tritonclient.grpc client}``."""
        http = httpclient.InferenceServerClient(conformance_server.http_url)
        grpc = grpcclient.InferenceServerClient(conformance_server.grpc_url)
        yield {"http": http, "grpc": grpc}
        http.close()
        grpc.close()

    # --- load and metadata --------------------------------------------------------------

    def test_server_is_live_and_ready(self, clients: Clients) -> None:
        for protocol, client in clients.items():
            assert client.is_server_live(), protocol
            assert client.is_server_ready(), protocol

    def test_every_model_is_ready(self, clients: Clients,
                                  conformance_repo: ConformanceRepository) -> None:
        for name in conformance_repo.models:
            for protocol, client in clients.items():
                assert client.is_model_ready(name), f"{name} not ready over {protocol}"

    def test_repository_index_lists_every_model_ready(
            self, clients: Clients, conformance_repo: ConformanceRepository) -> None:
        http_index = clients["http"].get_model_repository_index()
        grpc_index = clients["grpc"].get_model_repository_index(as_json=True)["models"]
        for protocol, index in (("http", http_index), ("grpc", grpc_index)):
            states = {entry["name"]: entry.get("state") for entry in index}
            for name in conformance_repo.models:
                assert states.get(name) == "READY", (protocol, name, index)

    def test_batching_model_metadata(self, clients: Clients,
                                     conformance_repo: ConformanceRepository,
                                     datatype: str) -> None:
        self._check_metadata(clients, conformance_repo, batching_model(datatype))

    def test_non_batching_model_metadata(self, clients: Clients,
                                         conformance_repo: ConformanceRepository) -> None:
        self._check_metadata(clients, conformance_repo, NON_BATCHING)

    def test_config_endpoint_names_the_backend(self, clients: Clients,
                                               conformance_repo: ConformanceRepository
                                               ) -> None:
        for name, (datatype, max_batch_size, model) in conformance_repo.models.items():
            http = clients["http"].get_model_config(name)
            grpc = clients["grpc"].get_model_config(name).config
            assert http["backend"] == grpc.backend == self.backend, (name, http, grpc)
            assert http["max_batch_size"] == grpc.max_batch_size, name
            if name == AUTO_COMPLETE:  # the backend chose it (onnxruntime's default is 4)
                assert grpc.max_batch_size > 0, (name, grpc)
            else:
                assert grpc.max_batch_size == max_batch_size, (name, grpc)
            assert [i["name"] for i in http["input"]] == [model.input_name], (name, http)
            assert http["input"][0]["data_type"] == datatype_to_config(datatype), (name, http)
            assert [o["name"] for o in http["output"]] == [model.output_name], (name, http)

    # --- auto-complete ------------------------------------------------------------------

    def test_auto_complete_fills_the_config(self, clients: Clients,
                                            conformance_repo: ConformanceRepository) -> None:
        self._require_auto_complete()
        model = conformance_repo.identity(AUTO_COMPLETE)
        data_type = datatype_to_config(conformance_repo.primary)
        config = clients["grpc"].get_model_config(AUTO_COMPLETE).config
        assert config.backend == self.backend, config
        # A batching model file: the backend must see the batch dimension (Triton's
        # backends choose the size themselves, e.g. onnxruntime's default of 4).
        assert config.max_batch_size > 0, config
        for tensors, name in ((config.input, model.input_name),
                              (config.output, model.output_name)):
            assert [(t.name, t.data_type, list(t.dims)) for t in tensors] == [
                (name, DataType.Value(data_type), [-1])], config
        http = clients["http"].get_model_metadata(AUTO_COMPLETE)
        assert [(i["name"], i["shape"]) for i in http["inputs"]] == [
            (model.input_name, [-1, -1])], http

    def test_auto_completed_model_serves(self, clients: Clients,
                                         conformance_repo: ConformanceRepository) -> None:
        self._require_auto_complete()
        config = clients["grpc"].get_model_config(AUTO_COMPLETE).config
        for rows in sorted({1, min(BATCH_OF_N, config.max_batch_size)}):
            self._echo(clients, conformance_repo, AUTO_COMPLETE, "grpc",
                       (rows, ELEMENTS_PER_ROW))

    # --- inference ----------------------------------------------------------------------

    @pytest.mark.parametrize("rows", [1, BATCH_OF_N], ids=["batch1", f"batch{BATCH_OF_N}"])
    def test_identity(self, clients: Clients, conformance_repo: ConformanceRepository,
                      datatype: str, transport: str, rows: int) -> None:
        self._echo(clients, conformance_repo, batching_model(datatype), transport,
                   (rows, ELEMENTS_PER_ROW))

    @pytest.mark.parametrize("transport", TRANSPORTS)
    def test_non_batching_identity(self, clients: Clients,
                                   conformance_repo: ConformanceRepository,
                                   transport: str) -> None:
        if conformance_repo.primary == "BF16" and transport == "http-json":
            pytest.skip("tritonclient.http sends BF16 only as binary data")
        self._echo(clients, conformance_repo, NON_BATCHING, transport, (ELEMENTS_PER_ROW,))

    def test_merged_requests_get_their_own_rows(
            self, clients: Clients, conformance_repo: ConformanceRepository,
            datatype: str) -> None:
        """Requests sent together reach the backend merged into full batches (the dynamic
        batcher); each must get back exactly its own rows."""
        name = merging_model(datatype)
        model = conformance_repo.identity(name)
        results: queue.Queue[tuple[int, Any, Any]] = queue.Queue()
        sent = {}
        for i in range(CONCURRENT_REQUESTS):
            array = self._sample(datatype, (MERGED_ROWS, ELEMENTS_PER_ROW),
                                 offset=1 + 100 * i)
            sent[i] = array
            clients["grpc"].async_infer(
                name, [_grpc_input(model.input_name, datatype, array)],
                callback=lambda result, error, i=i: results.put((i, result, error)),
                outputs=[grpcclient.InferRequestedOutput(model.output_name)])
        for _ in range(CONCURRENT_REQUESTS):
            i, result, error = results.get(timeout=RESULT_WAIT_SECONDS)
            assert error is None, (name, i, error)
            problem = mismatch(datatype, sent[i], result.as_numpy(model.output_name))
            assert problem is None, f"model '{name}' request {i}: output has {problem}"
        [stats] = clients["grpc"].get_inference_statistics(name).model_stats
        rows = CONCURRENT_REQUESTS * MERGED_ROWS
        assert (stats.inference_count, stats.execution_count) == (
            rows, rows // MAX_BATCH_SIZE), stats

    # --- bad inputs ---------------------------------------------------------------------

    @pytest.mark.parametrize("protocol", ["http", "grpc"])
    @pytest.mark.parametrize("case", BAD_INPUTS)
    def test_bad_input_is_rejected(self, clients: Clients,
                                   conformance_repo: ConformanceRepository, case: str,
                                   protocol: str) -> None:
        datatype = conformance_repo.primary
        name = batching_model(datatype)
        model = conformance_repo.identity(name)
        good = self._sample(datatype, (1, ELEMENTS_PER_ROW))
        other = "INT32" if datatype != "INT32" else "FP32"
        inputs, named = {
            "wrong_datatype": ([(model.input_name, other, self._sample(other, good.shape))],
                               [model.input_name, datatype]),
            "wrong_rank": ([(model.input_name, datatype,
                             self._sample(datatype, (1, ELEMENTS_PER_ROW, 2)))],
                           [model.input_name]),
            "batch_too_large": ([(model.input_name, datatype,
                                  self._sample(datatype,
                                               (MAX_BATCH_SIZE + 1, ELEMENTS_PER_ROW)))],
                                [model.input_name, str(MAX_BATCH_SIZE)]),
            "missing_input": ([], [model.input_name]),
            "unknown_input": ([(model.input_name, datatype, good),
                               (UNKNOWN_INPUT, datatype, good)], [UNKNOWN_INPUT]),
        }[case]
        self._expect_rejected(clients, protocol, name, model, inputs, named)
        self._echo(clients, conformance_repo, name, _transport(protocol), good.shape)

    @pytest.mark.parametrize("protocol", ["http", "grpc"])
    def test_non_batching_model_rejects_a_batch_dimension(
            self, clients: Clients, conformance_repo: ConformanceRepository,
            protocol: str) -> None:
        datatype = conformance_repo.primary
        model = conformance_repo.identity(NON_BATCHING)
        batched = self._sample(datatype, (2, ELEMENTS_PER_ROW))
        self._expect_rejected(clients, protocol, NON_BATCHING, model,
                              [(model.input_name, datatype, batched)], [model.input_name])
        self._echo(clients, conformance_repo, NON_BATCHING, _transport(protocol),
                   (ELEMENTS_PER_ROW,))

    # --- unload and load ----------------------------------------------------------------

    def test_unload_then_load(self, clients: Clients,
                              conformance_repo: ConformanceRepository) -> None:
        model = conformance_repo.identity(LIFECYCLE)
        datatype = conformance_repo.primary
        array = self._sample(datatype, (1, ELEMENTS_PER_ROW))
        clients["http"].unload_model(LIFECYCLE)
        try:
            for protocol, client in clients.items():
                assert not client.is_model_ready(LIFECYCLE), protocol
                with pytest.raises(InferenceServerException) as info:
                    _infer(client, protocol, LIFECYCLE, model,
                           [(model.input_name, datatype, array)])
                assert info.value.status() in NOT_SERVED[protocol], (protocol, info.value)
                assert LIFECYCLE in info.value.message(), (protocol, info.value)
            index = {e["name"]: e for e in clients["http"].get_model_repository_index()}
            assert index[LIFECYCLE].get("state") != "READY", index[LIFECYCLE]
        finally:
            clients["grpc"].load_model(LIFECYCLE)
        for protocol, client in clients.items():
            assert client.is_model_ready(LIFECYCLE), protocol
        for transport in ("http-binary", "grpc"):
            self._echo(clients, conformance_repo, LIFECYCLE, transport,
                       (BATCH_OF_N, ELEMENTS_PER_ROW))

    # --- helpers ------------------------------------------------------------------------

    def _build_repository(self, path: Path) -> ConformanceRepository:
        self._check_claims()
        primary = "FP32" if "FP32" in self.datatypes else self.datatypes[0]
        repo = ConformanceRepository(path, primary)
        for datatype in self.datatypes:
            self._write(repo, batching_model(datatype), datatype, MAX_BATCH_SIZE)
            self._write(repo, merging_model(datatype), datatype, MAX_BATCH_SIZE,
                        batch_delay_us=MERGE_DELAY_MICROSECONDS)
        self._write(repo, NON_BATCHING, primary, 0)
        self._write(repo, LIFECYCLE, primary, MAX_BATCH_SIZE)
        if self.auto_complete:
            self._write(repo, AUTO_COMPLETE, primary, MAX_BATCH_SIZE, config=False)
        return repo

    def _check_claims(self) -> None:
        unknown = [d for d in self.datatypes if d not in DATATYPES]
        if not self.backend or not self.datatypes or unknown or \
                len(set(self.datatypes)) != len(self.datatypes):
            raise TypeError(
                f"{type(self).__name__}: set `backend` (the config.pbtxt backend name) and "
                f"`datatypes` (distinct V2 datatypes from {sorted(DATATYPES)}); got backend "
                f"{self.backend!r}, datatypes {self.datatypes!r}")

    def _write(self, repo: ConformanceRepository, name: str, datatype: str,
               max_batch_size: int, config: bool = True,
               batch_delay_us: int | None = None) -> None:
        version_dir = repo.path / name / "1"
        version_dir.mkdir(parents=True)
        model = self.write_identity_model(version_dir, datatype, max_batch_size)
        if not isinstance(model, IdentityModel):
            raise TypeError(f"{type(self).__name__}.write_identity_model must return an "
                            f"IdentityModel, got {model!r}")
        if config:
            (repo.path / name / "config.pbtxt").write_text(
                identity_config(name, self.backend, model, datatype, max_batch_size,
                                batch_delay_us))
        repo.add(name, datatype, max_batch_size, model)

    def _sample(self, datatype: str, shape: tuple[int, ...], *, offset: int = 0,
                utf8_only: bool = False) -> np.ndarray:
        return sample(datatype, shape, offset=offset,
                      utf8_only=utf8_only or self.bytes_are_text)

    def _require_auto_complete(self) -> None:
        if not self.auto_complete:
            pytest.skip(f"{type(self).__name__}.auto_complete is False: the backend does not "
                        f"fill a config from the model file")

    def _check_metadata(self, clients: Clients, repo: ConformanceRepository,
                        name: str) -> None:
        datatype, max_batch_size, model = repo.models[name]
        shape = [-1, -1] if max_batch_size > 0 else [-1]
        want = {"inputs": [(model.input_name, datatype, shape)],
                "outputs": [(model.output_name, datatype, shape)]}
        http = clients["http"].get_model_metadata(name)
        grpc = clients["grpc"].get_model_metadata(name)
        assert http["name"] == grpc.name == name
        for key in want:
            got_http = [(t["name"], t["datatype"], t["shape"]) for t in http[key]]
            got_grpc = [(t.name, t.datatype, list(t.shape)) for t in getattr(grpc, key)]
            assert got_http == want[key], (name, key, http)
            assert got_grpc == want[key], (name, key, grpc)

    def _echo(self, clients: Clients, repo: ConformanceRepository, name: str,
              transport: str, shape: tuple[int, ...]) -> None:
        """Send a sample of ``shape`` to identity model ``name``; the output must equal it."""
        datatype = repo.models[name][0]
        model = repo.identity(name)
        array = self._sample(datatype, shape, utf8_only=transport == "http-json")
        protocol = "grpc" if transport == "grpc" else "http"
        result = _infer(clients[protocol], protocol, name, model,
                        [(model.input_name, datatype, array)],
                        binary=transport != "http-json")
        output = result.get_output(model.output_name)
        assert output is not None, (name, transport, result.get_response())
        if protocol == "http":
            got_datatype, got_shape = output["datatype"], list(output["shape"])
        else:
            got_datatype, got_shape = output.datatype, list(output.shape)
        assert (got_datatype, got_shape) == (datatype, list(shape)), (name, transport, output)
        problem = mismatch(datatype, array, result.as_numpy(model.output_name))
        assert problem is None, f"model '{name}' over {transport}: output has {problem}"

    def _expect_rejected(self, clients: Clients, protocol: str, name: str,
                         model: IdentityModel, inputs: Sequence[tuple[str, str, np.ndarray]],
                         named: Sequence[str]) -> None:
        """The request must fail as a bad request whose message names the model and
        ``named`` (the tensor and what was expected)."""
        with pytest.raises(InferenceServerException) as info:
            _infer(clients[protocol], protocol, name, model, inputs)
        message = info.value.message() or ""
        assert info.value.status() == REJECTED[protocol], (protocol, info.value)
        for fragment in (name, *named):
            assert fragment in message, (fragment, message)


def _transport(protocol: str) -> str:
    return "http-binary" if protocol == "http" else "grpc"


def _grpc_input(name: str, datatype: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _infer(client: Any, protocol: str, name: str, model: IdentityModel,
           inputs: Sequence[tuple[str, str, np.ndarray]], binary: bool = True) -> Any:
    """One request to ``name`` with ``inputs`` (name, datatype, array), asking for the
    model's output (as binary data unless ``binary`` is False, HTTP only)."""
    if protocol == "grpc":
        tensors = [_grpc_input(n, d, a) for n, d, a in inputs]
        outputs = [grpcclient.InferRequestedOutput(model.output_name)]
        return client.infer(name, tensors, outputs=outputs)
    tensors = []
    for tensor_name, datatype, array in inputs:
        tensor = httpclient.InferInput(tensor_name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=binary)
        tensors.append(tensor)
    outputs = [httpclient.InferRequestedOutput(model.output_name, binary_data=binary)]
    return client.infer(name, tensors, outputs=outputs)

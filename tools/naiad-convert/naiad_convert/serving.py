"""Timing formats as naiad serves them: every correct format written into one repository
(a model per format), one ``naiad serve`` on free loopback ports, and ``naiad perf``'s load
generator at each batch size and concurrency, sending the samples themselves (as
perf_analyzer's JSON input file) rather than random values a model may not accept."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from naiad_convert.check import Tolerance, compare
from naiad_convert.errors import ConvertError, first_line
from naiad_convert.samples import Samples

SECONDS = 1.0
DEFAULT_READY_TIMEOUT_S = 180 * SECONDS  # naiad serve loading every format's model
DEFAULT_INTERVAL_MS = 1000                # naiad perf's measurement window
DEFAULT_CONCURRENCY = (1, 4)
SAMPLES_FILE = "samples.json"


@dataclass(frozen=True)
class ServeSettings:
    batch_sizes: tuple[int, ...]
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    interval_ms: int = DEFAULT_INTERVAL_MS
    stability_percent: float = 10.0
    max_trials: int = 10
    protocol: str = "grpc"
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    serve_args: tuple[str, ...] = ()


def write_perf_json(samples: Samples, path: Path) -> None:
    """The samples as perf_analyzer's ``--input-data`` file: one step per sample row (the
    row without its batch axis; the load generator adds the batch)."""
    steps = []
    rows = samples.rows if samples.batched else 1
    for i in range(rows):
        step = {}
        for name, array in samples.arrays.items():
            row = array[i] if samples.batched else array
            step[name] = {"content": row.reshape(-1).tolist(), "shape": list(row.shape)}
        steps.append(step)
    path.write_text(json.dumps({"data": steps}))


@dataclass(frozen=True)
class ServedCheck:
    """What a served model must answer: ``want`` for ``inputs``, within ``tolerance``."""

    inputs: dict[str, np.ndarray]
    want: dict[str, np.ndarray]
    tolerance: Tolerance


def measure_served(repository: Path, models: dict[str, str], samples: Samples,
                   settings: ServeSettings, log_copy: Path,
                   progress: Callable[[str], None],
                   check: ServedCheck | None = None) -> dict[str, Any]:
    """Serve ``repository`` (``models``: format name -> model name in it), check each
    model's answers (``check``: tritonclient against the original's outputs) and measure
    it. Returns format name -> list of measurement dicts, or an error string when that
    model could not be loaded, answered wrong or could not be measured. The server's log is
    copied to ``log_copy``."""
    try:
        from naiad.testing import naiad_server
    except ImportError:
        raise ConvertError("--serve-timing starts naiad serve: install the server "
                           "(pip install 'naiad-convert[serve]')") from None
    from naiad_perf import LoadSpec, PerfError, measure

    data_file = repository.parent / SAMPLES_FILE
    write_perf_json(samples, data_file)
    results: dict[str, Any] = {}
    try:
        server_cm = naiad_server("--model-repository", str(repository),
                                 "--model-control-mode", "explicit",
                                 # only the KServe endpoints: the OpenAI API's fixed port
                                 # (9000) may be taken on a shared machine
                                 "--allow-openai", "false", *settings.serve_args,
                                 ready_timeout=settings.ready_timeout_s)
        server = server_cm.__enter__()
    except RuntimeError as exc:
        tail = " | ".join(line.strip() for line in str(exc).splitlines()[-4:] if line.strip())
        raise ConvertError(f"naiad serve did not get ready on the formats' repository "
                           f"({repository}): {tail}") from None
    try:
        url = server.grpc_url if settings.protocol == "grpc" else server.http_url
        for fmt, model in models.items():
            rows: list[dict[str, Any]] = []
            loaded = _load(server.http_url, model, settings.ready_timeout_s)
            if loaded:
                results[fmt] = f"naiad serve did not load it: {loaded}"
                progress(f"[{fmt}] served: {results[fmt]}")
                continue
            wrong = (_served_answers(server.http_url, model, check, settings.ready_timeout_s)
                     if check else "")
            if wrong:
                results[fmt] = f"naiad serve answers differ from the original: {wrong}"
                progress(f"[{fmt}] served: {results[fmt]}")
                _unload(server.http_url, model)
                continue
            try:
                for batch in settings.batch_sizes:
                    spec = LoadSpec(url=url, model=model, protocol=settings.protocol,
                                    batch_size=batch if samples.batched else 1,
                                    input_data=str(data_file),
                                    measurement_interval_ms=settings.interval_ms,
                                    stability_percentage=settings.stability_percent,
                                    max_trials=settings.max_trials)
                    for m in measure(spec, concurrency=settings.concurrency):
                        rows.append({"batch_size": spec.batch_size,
                                     "concurrency": m.concurrency,
                                     "throughput": m.throughput,
                                     "p50_ms": m.latency_us["p50"] / 1000,
                                     "p99_ms": m.latency_us["p99"] / 1000,
                                     "stable": m.stable, "errors": m.errors})
                        progress(f"[{fmt}] served: batch {spec.batch_size}, concurrency "
                                 f"{m.concurrency}: {m.throughput:.1f} infer/s, p99 "
                                 f"{m.latency_us['p99'] / 1000:.2f} ms")
                results[fmt] = rows
            except PerfError as exc:
                results[fmt] = f"naiad perf: {first_line(exc)}"
            finally:
                _unload(server.http_url, model)
    finally:
        server_cm.__exit__(None, None, None)
        shutil.copyfile(server.log_path, log_copy)
        server.log_path.unlink(missing_ok=True)
    return results


def served_models(formats: Sequence[str], model_name: str) -> dict[str, str]:
    """Each format's model name in the served repository."""
    return {fmt: f"{model_name}_{fmt.replace('-', '_')}" for fmt in formats}




def _load(url: str, model: str, timeout_s: float) -> str:
    """Load ``model`` through the repository API; the server's message when it fails."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(url, connection_timeout=timeout_s,
                                              network_timeout=timeout_s)
    try:
        client.load_model(model)
        return ""
    except InferenceServerException as exc:
        return exc.message() or str(exc)
    finally:
        client.close()


def _unload(url: str, model: str) -> None:
    """Unload it, so the next format is measured without this one's threads and memory."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(url)
    try:
        client.unload_model(model, unload_dependents=True)
    except InferenceServerException:
        pass  # measured already; a failed unload costs memory, not figures
    finally:
        client.close()


def _served_answers(url: str, model: str, check: ServedCheck, timeout_s: float) -> str:
    """One request with the check inputs through tritonclient (bounded by ``timeout_s``,
    --serve-ready-timeout: a first request may still initialise the model); what differs,
    or ''."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    client = httpclient.InferenceServerClient(url, connection_timeout=timeout_s,
                                              network_timeout=timeout_s)
    try:
        given = []
        for name, array in check.inputs.items():
            tensor = httpclient.InferInput(name, list(array.shape),
                                           np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(np.ascontiguousarray(array))
            given.append(tensor)
        result = client.infer(model, given)
        got = {name: result.as_numpy(name) for name in check.want}
    except InferenceServerException as exc:
        return f"the request failed: {exc.message() or exc}"
    finally:
        client.close()
    got = {name: value for name, value in got.items() if value is not None}
    failing = [c for c in compare(check.want, got, check.tolerance) if not c.passed]
    if not failing:
        return ""
    worst = failing[0]
    return f"output '{worst.name}': " + (worst.problem or f"max abs error "
                                          f"{worst.max_abs_error:.3g}")

"""Each subtest of Triton 2.51's qa/L0_backend_python as its test.sh runs it: which models from
qa/python_models go into which repository, with which flags, and which upstream test runs.

A function per subtest returns its phases (harness.Phase), in test.sh's order. Where test.sh
uses something that cannot exist on a CPU machine without Triton's QA data (a GPU, the
``/data/inferenceserver`` model sets, a conda download), the phase or case is reported as a
skipped row saying why; the reason holds for Triton as much as for naiad.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from harness import (
    L0,
    PYTHON_MODELS,
    UPSTREAM,
    Phase,
    Run,
    Step,
    copy_model,
    copy_tree,
    edit_config,
    http_post,
    kill_children,
    log_contains,
    log_count,
    pytest_step,
    sleep,
)

PYTHON_SHM = ["--log-verbose=1", "--backend-config=python,shm-default-byte-size=5242880"]
VERBOSE = ["--log-verbose=1"]
NO_GPU = "needs a CUDA GPU (CUDA shared memory / GPU tensors); this machine has none"
#: test_growth_error builds its 1 GiB UINT8 input as np.random.randn(2**30) (8 GiB of float64)
#: in the client, plus the 512 MiB case: too much for a shared 2-core CI machine
GROWTH = os.environ.get("NAIAD_L0_GROWTH") == "1"
GROWTH_WHY = ("the client allocates 8 GiB (np.random.randn of 2**30 elements) for its 1 GiB "
              "request; run with NAIAD_L0_GROWTH=1 on a machine with 16 GiB to spare")
PYTHON_BACKEND_BUNDLE = UPSTREAM.parent / "python_backend-r24.10.bundle"
DYNAMIC_8 = "dynamic_batching { preferred_batch_size: [8], max_queue_delay_microseconds: %d }"



def python_backend_checkout(dest: Path) -> Path:
    """``git clone python_backend -b r24.10`` from the bundle in ../shared/upstream."""
    if not (dest / "examples").exists():
        subprocess.run(["git", "clone", "-q", str(PYTHON_BACKEND_BUNDLE), str(dest)], check=True,
                       capture_output=True)
        subprocess.run(["git", "-C", str(dest), "checkout", "-q", "r24.10"], check=True,
                       capture_output=True)
    return dest


# --- L0_backend_python/test.sh itself (python_test.py and the phases around it) --------------


def _main_models(repo: Path) -> None:
    fp32 = copy_model(repo, "identity_fp32")
    copy_model(repo, "identity_bf16")
    for name, dtype, extra in (
        ("identity_uint8", "TYPE_UINT8", "batch"),
        ("identity_uint8_nobatch", "TYPE_UINT8", "nobatch"),
        ("identity_uint32", "TYPE_UINT32", ""),
        ("identity_bool", "TYPE_BOOL", ""),
    ):
        folder = repo / name
        subprocess.run(["cp", "-r", str(fp32), str(folder)], check=True)
        if extra == "batch":
            edit_config(folder, name=name, replace={"TYPE_FP32": dtype}, max_batch_size=8,
                        append=DYNAMIC_8 % 12000000)
        elif extra == "nobatch":
            edit_config(folder, name=name, replace={"TYPE_FP32": dtype},
                        drop_max_batch_size=True)
        else:
            edit_config(folder, name=name, replace={"TYPE_FP32": dtype})
    dmn = repo / "default_model_name"
    subprocess.run(["cp", "-r", str(fp32), str(dmn)], check=True)
    (dmn / "1" / "model.py").rename(dmn / "1" / "mymodel.py")
    edit_config(dmn, name="default_model_name", append='default_model_filename: "mymodel.py"')
    edit_config(copy_model(repo, "pytorch_fp32_fp32"), name="pytorch_fp32_fp32")
    copy_model(repo, "delayed_model")
    init_args = copy_model(repo, "init_args")
    # sed "s|TRITON_DIR_PATH|${TRITON_DIR}|" (the harness sets TRITON_DIR to the phase folder)
    edit_config(init_args, replace={"TRITON_DIR_PATH": os.environ["TRITON_DIR"]})
    for m in ("optional", "non_contiguous", "string", "string_fixed", "dlpack_identity"):
        copy_model(repo, m)


def _multi_file(repo: Path) -> None:
    folder = repo / "multi_file"
    (folder / "1").mkdir(parents=True)
    for f in (PYTHON_MODELS / "multi_file").glob("*.py"):
        (folder / "1" / f.name).write_bytes(f.read_bytes())
    (folder / "config.pbtxt").write_bytes((PYTHON_MODELS / "identity_fp32/config.pbtxt")
                                          .read_bytes())
    edit_config(folder, name="multi_file")


#: naiad's request for the shm_default_byte_size check: fp32 elements (128 KiB), above the
#: Python backend's shm-inline-max-byte-size (64 KiB), so the batch goes through a region
REGION_REQUEST_ELEMENTS = 32 * 1024


def _shm_region_size(size: int) -> Callable[..., None]:
    """test.sh: every ``/dev/shm/triton_python_backend_shm*`` region has the default size.

    On Triton, test.sh's own check (and at least one region must be there: a check that
    measured nothing would pass on any server). naiad's workers unlink their regions' files
    at once and make a region at the first batch that needs one (regions.py), so on naiad
    one 128 KiB request goes to identity_fp32 first and the regions its server and worker
    map are measured; each must be ``size`` bytes."""
    from harness import Case
    from regions import region_sizes

    def step(run) -> None:  # type: ignore[no-untyped-def]
        if run.server == "triton":
            pages = [p for p in os.listdir("/dev/shm")
                     if p.startswith("triton_python_backend_shm")]
            sizes = [os.path.getsize(f"/dev/shm/{p}") for p in pages]
            name = "shm-default-byte-size regions"
        else:
            _infer_identity_fp32(REGION_REQUEST_ELEMENTS)
            sizes = region_sizes(run.process.pid, "naiad-")
            name = ("shm-default-byte-size regions (naiad: the regions mapped after a "
                    "128 KiB request)")
        wrong = [s for s in sizes if s != size]
        run.cases.append(Case(name, "passed" if sizes and not wrong else "failed",
                              f"expected {size} bytes each, found {sizes}"))

    return step


def _infer_identity_fp32(elements: int) -> None:
    import http.client
    import json

    from harness import HTTP_PORT

    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32",
                                   "shape": [1, elements], "data": [0.5] * elements}]})
    conn = http.client.HTTPConnection("127.0.0.1", HTTP_PORT, timeout=60)
    conn.request("POST", "/v2/models/identity_fp32/infer", body,
                 {"Content-Type": "application/json"})
    res = conn.getresponse()
    text = res.read()
    conn.close()
    if res.status != 200:
        raise RuntimeError(f"identity_fp32 answered {res.status}: {text[:500]!r}")


def main() -> list[Phase]:
    return [
        Phase("add_sub_gpu (KIND_GPU)", lambda r: None, skip=NO_GPU),
        Phase("python_test", _main_models, PYTHON_SHM,
              steps=[pytest_step(L0 / "python_test.py", not_run={
                  "PythonTest::test_gpu_tensor_error": NO_GPU,
                  "PythonTest::test_dlpack_tensor_error": NO_GPU,
                  **({} if GROWTH else {"PythonTest::test_growth_error": GROWTH_WHY})})]),
        Phase("non_graceful_exit", _main_models, PYTHON_SHM,
              steps=[sleep(5), _kill_server_check_children()], check_shm_pages=False),
        Phase("multi_file", _multi_file, PYTHON_SHM),
        Phase("model_env", lambda r: copy_model(r, "model_env"), PYTHON_SHM,
              env={"MY_ENV": "MY_ENV"}),
        Phase("shm_default_byte_size", lambda r: copy_model(r, "identity_fp32"),
              ["--log-verbose=1", f"--backend-config=python,shm-default-byte-size={4 << 20}"],
              steps=[_shm_region_size(4 << 20)]),
        Phase("init_exit", lambda r: copy_model(r, "init_exit"), PYTHON_SHM, expect_start=False,
              after=[log_contains("Stub process 'init_exit_0_0' is not healthy.")]),
    ]


def _kill_server_check_children() -> Callable[..., None]:
    """test.sh's non-graceful exit: kill -9 the server, wait 10 s, no child may be left."""
    from harness import Case

    def step(run) -> None:  # type: ignore[no-untyped-def]
        import os
        import signal
        import time

        pid = run.process.pid
        children = subprocess.run(["pgrep", "--parent", str(pid)], capture_output=True,
                                  text=True).stdout.split()
        os.kill(pid, signal.SIGKILL)
        run.process.wait()
        time.sleep(10)
        alive = []
        for child in children:
            try:
                os.kill(int(child), 0)
                alive.append(child)
            except ProcessLookupError:
                pass
        run.cases.append(Case(f"no child left 10 s after kill -9 ({len(children)} children)",
                              "failed" if alive or not children else "passed",
                              f"alive: {alive}" if alive else
                              ("no child process to watch" if not children else "")))
        for child in alive:
            os.kill(int(child), signal.SIGKILL)

    return step


# --- lifecycle ----------------------------------------------------------------------------------


def _lifecycle_models(repo: Path) -> None:
    copy_model(repo, "error_code")
    copy_model(repo, "execute_cancel")
    f = copy_model(repo, "execute_error")
    edit_config(f, name="execute_error", max_batch_size=8, append=DYNAMIC_8 % 12000000)
    f = copy_model(repo, "execute_grpc_error")
    edit_config(f, name="execute_grpc_error", max_batch_size=8, append=DYNAMIC_8 % 1200000)
    copy_model(repo, "execute_return_error")
    f = copy_model(repo, "wrong_model")
    edit_config(f, name="wrong_model", replace={"TYPE_FP32": "TYPE_UINT32"})


def lifecycle() -> list[Phase]:
    test = L0 / "lifecycle" / "lifecycle_test.py"
    return [
        Phase("lifecycle", _lifecycle_models, VERBOSE, server_log="lifecycle_server.log",
              steps=[pytest_step(test, repeat=5)]),
        Phase("init_error", lambda r: copy_model(r, "init_error"), VERBOSE, expect_start=False,
              after=[log_contains("name 'lorem_ipsum' is not defined")]),
        Phase("fini_error", lambda r: copy_model(r, "fini_error"), VERBOSE,
              after=[log_contains("name 'undefined_variable' is not defined")]),
        Phase("auto_complete_error",
              lambda r: copy_model(r, "auto_complete_error", config=False),
              [*VERBOSE, "--strict-model-config=false"], expect_start=False,
              after=[log_contains("name 'undefined_variable' is not defined")]),
    ]


# --- restart ------------------------------------------------------------------------------------


def restart() -> list[Phase]:
    test = L0 / "restart" / "restart_test.py"

    def models(repo: Path) -> None:
        subprocess.run(["cp", "-r", str(L0 / "restart" / "models" / "restart"), str(repo)],
                       check=True)

    return [
        Phase("restart", models, VERBOSE, steps=[
            pytest_step(test, "::RestartTest::test_infer", label="test_infer"),
            kill_children,
            pytest_step(test, "::RestartTest::test_restart", label="test_restart"),
        ]),
        # the server exits by itself after its workers were killed
        Phase("stop_after_kill", models, VERBOSE, steps=[kill_children]),
    ]


# --- model_control ------------------------------------------------------------------------------


def model_control() -> list[Phase]:
    def models(repo: Path) -> None:
        copy_model(repo, "identity_fp32")
        copy_model(repo, "simple_identity_fp32", files=())

    return [Phase("model_control", models, ["--model-control-mode=explicit", *VERBOSE],
                  steps=[pytest_step(L0 / "model_control" / "model_control_test.py")])]


SUBTESTS: dict[str, Callable[[], list[Phase]]] = {
    "python_test": main,
    "lifecycle": lifecycle,
    "restart": restart,
    "model_control": model_control,
}


# --- decoupled ----------------------------------------------------------------------------------


def decoupled() -> list[Phase]:
    def models(repo: Path) -> None:
        subprocess.run(["cp", "-r", *map(str, (L0 / "decoupled" / "models").iterdir()),
                        str(repo)], check=True)
        copy_model(repo, "identity_fp32")
        copy_model(repo, "execute_cancel")
        pb = python_backend_checkout(repo.parents[2] / "python_backend")
        square = repo / "square_int32"
        (square / "1").mkdir(parents=True)
        shutil.copy(pb / "examples/decoupled/square_model.py", square / "1" / "model.py")
        shutil.copy(pb / "examples/decoupled/square_config.pbtxt", square / "config.pbtxt")
        copy_model(repo, "dlpack_add_sub")

    counts = [log_count(m, ">=", 1) for m in
              ("Specific Msg!", "Info Msg!", "Warning Msg!", "Error Msg!")]
    counts += [log_count("Finalize invoked", "==", 3), log_count("Finalize complete...", "==", 3)]
    gpu_bls = NO_GPU + " (decoupled_bls's response thread moves its inputs to CUDA)"
    return [Phase("decoupled", models, VERBOSE, server_log="decoupled_server.log",
                  steps=[pytest_step(L0 / "decoupled" / "decoupled_test.py", not_run={
                      "DecoupledTest::test_decoupled_bls": gpu_bls})],
                  after=counts)]


# --- ensemble -----------------------------------------------------------------------------------


def ensemble() -> list[Phase]:
    def models(repo: Path) -> None:
        copy_model(repo, "ensemble", files=())
        copy_model(repo, "add_sub", "add_sub_1")
        copy_model(repo, "add_sub", "add_sub_2")

    return [Phase("ensemble", models, VERBOSE, steps=[pytest_step(
        L0 / "ensemble" / "ensemble_test.py",
        not_run={"EnsembleTest::test_ensemble_gpu":
                 NO_GPU + " (and Triton's QA libtorch model set from /data/inferenceserver)"},
    )])]


# --- io -----------------------------------------------------------------------------------------


def io() -> list[Phase]:
    test = L0 / "io" / "io_test.py"
    phases = []
    gpu_flags = NO_GPU + " (test_ensemble_io sends GPU_OUTPUT flags that move tensors to CUDA)"
    for trial in ("default", "decoupled"):
        source = "dlpack_io_identity" if trial == "default" else "dlpack_io_identity_decoupled"

        def models(repo: Path, source: str = source) -> None:
            for i in (1, 2, 3):
                edit_config(copy_model(repo, source, f"dlpack_io_identity_{i}"),
                            name=f"dlpack_io_identity_{i}")
            copy_model(repo, "ensemble_io", files=())

        phases.append(Phase(f"ensemble_io_{trial}", models, VERBOSE, env={"TRIAL": trial},
                            check_shm_pages=False, skip=gpu_flags,
                            steps=[pytest_step(test, "::IOTest::test_ensemble_io",
                                               label=f"test_ensemble_io.{trial}",
                                               env={"TRIAL": trial})]))
    phases += [Phase(name, lambda r: None, skip=NO_GPU)
               for name in ("test_empty_gpu_output", "test_variable_gpu_output")]

    def requested(repo: Path) -> None:
        copy_model(repo, "add_sub")
        copy_model(repo, "dlpack_io_identity_decoupled")

    phases.append(Phase("requested_output", requested, VERBOSE, check_shm_pages=False, steps=[
        pytest_step(test, "::IOTest::test_requested_output_default",
                    label="test_requested_output_default"),
    ]))
    phases.append(Phase("test_requested_output_decoupled", requested, skip=NO_GPU + (
        " (dlpack_io_identity_decoupled moves its output to CUDA: .cuda())")))
    return phases


# --- response_sender ----------------------------------------------------------------------------


def response_sender() -> list[Phase]:
    decoupled_policy = "model_transaction_policy { decoupled: True }"
    batching = "dynamic_batching { max_queue_delay_microseconds: 500000 }"

    def models(repo: Path) -> None:
        for name in ("response_sender", "response_sender_decoupled", "response_sender_async",
                     "response_sender_decoupled_async", "response_sender_batching",
                     "response_sender_decoupled_batching", "response_sender_async_batching",
                     "response_sender_decoupled_async_batching"):
            folder = copy_model(repo, "response_sender", name, files=("model_common.py",))
            src = "model_async.py" if "async" in name else "model.py"
            shutil.copy(PYTHON_MODELS / "response_sender" / src, folder / "1" / "model.py")
            extra = []
            if "decoupled" in name:
                extra.append(decoupled_policy)
            if "batching" in name:
                extra.append(batching)
            if extra:
                edit_config(folder, append="\n".join(extra))

    def complete_final(repo: Path) -> None:
        copy_model(repo, "response_sender_complete_final")

    def with_log(test: str) -> Step:
        def step(run: Run) -> None:
            pytest_step(L0 / "response_sender" / test,
                        env={"SERVER_LOG": str(run.log_path)})(run)

        return step

    return [
        Phase("response_sender", models, VERBOSE, check_shm_pages=False,
              steps=[with_log("response_sender_test.py")]),
        Phase("complete_final", complete_final, VERBOSE, check_shm_pages=False,
              steps=[with_log("response_sender_complete_final_test.py")]),
    ]


# --- argument_validation, custom_metrics (test_infer_shm_leak.py with MODEL_NAME) --------------


def argument_validation() -> list[Phase]:
    def models(repo: Path) -> None:
        copy_tree(L0 / "argument_validation" / "models", repo)

    return [Phase("argument_validation", models, VERBOSE, steps=[pytest_step(
        L0 / "test_infer_shm_leak.py", env={"MODEL_NAME": "argument_validation"})])]


def custom_metrics() -> list[Phase]:
    return [Phase("custom_metrics", lambda r: copy_model(r, "custom_metrics"), VERBOSE,
                  steps=[pytest_step(L0 / "test_infer_shm_leak.py",
                                     env={"MODEL_NAME": "custom_metrics"})])]


# --- logging ------------------------------------------------------------------------------------


def logging() -> list[Phase]:
    test = L0 / "logging" / "logging_test.py"

    def models(repo: Path) -> None:
        copy_model(repo, "identity_fp32_logging")

    def counts(non_verbose: int, verbose: int) -> list[Step]:
        steps = [log_count(m, "==", non_verbose)
                 for m in ("Specific Msg!", "Info Msg!", "Warning Msg!", "Error Msg!")]
        return [*steps, log_count("Verbose Msg!", "==", verbose)]

    bools = [http_post("/v2/logging", {p: False}) for p in
             ("log_info", "log_warning", "log_error")]
    return [
        Phase("default", models, [], check_shm_pages=False,
              steps=[pytest_step(test, label="log_test.default")], after=counts(4, 0)),
        Phase("verbose", models, [], check_shm_pages=False,
              steps=[http_post("/v2/logging", {"log_verbose_level": 1}),
                     pytest_step(test, label="log_test.verbose")], after=counts(4, 3)),
        Phase("disabled", models, [], check_shm_pages=False,
              steps=[*bools, pytest_step(test, label="log_test.disabled")],
              after=counts(1, 0)),
    ]


# --- async_execute ------------------------------------------------------------------------------


def async_execute() -> list[Phase]:
    def models(repo: Path) -> None:
        copy_model(repo, "async_execute_decouple")
        copy_model(repo, "async_execute_decouple_bls")

    def step(run: Run) -> None:
        pytest_step(L0 / "async_execute" / "concurrency_test.py",
                    env={"SERVER_LOG": str(run.log_path)})(run)

    return [Phase("async_execute", models, VERBOSE, check_shm_pages=False, steps=[step])]


# --- request_rescheduling -----------------------------------------------------------------------


def request_rescheduling() -> list[Phase]:
    def models(repo: Path) -> None:
        for m in ("bls_request_rescheduling", "request_rescheduling_addsub",
                  "iterative_sequence", "wrong_return_type"):
            copy_model(repo, m)

    return [Phase("request_rescheduling", models,
                  ["--model-control-mode=explicit", "--load-model=*", *VERBOSE], steps=[
                      pytest_step(L0 / "test_infer_shm_leak.py",
                                  env={"MODEL_NAME": "bls_request_rescheduling"}),
                      pytest_step(L0 / "request_rescheduling" / "grpc_endpoint_test.py"),
                  ])]


SUBTESTS.update({
    "decoupled": decoupled,
    "ensemble": ensemble,
    "io": io,
    "response_sender": response_sender,
    "argument_validation": argument_validation,
    "logging": logging,
    "custom_metrics": custom_metrics,
    "async_execute": async_execute,
    "request_rescheduling": request_rescheduling,
})


# --- bls ----------------------------------------------------------------------------------------


def bls() -> list[Phase]:
    qa_models = ("needs Triton's QA model sets from /data/inferenceserver (onnx and libtorch "
                 "models built by gen_qa_model_repository)")
    suite = ("the bls models run a unittest suite inside execute whose cases include GPU ones "
             "(test_gpu_bls, test_bls_tensor_lifecycle, test_preferred_memory: CUDA tensors) "
             "and " + qa_models)
    message = "BLS is only supported during the 'execute' function."
    return [
        Phase("bls (bls, bls_memory, bls_memory_async, bls_async)", lambda r: None, skip=suite),
        Phase("bls_init_error", lambda r: copy_model(r, "bls_init_error"), VERBOSE,
              expect_start=False, after=[log_contains(message)]),
        Phase("bls_finalize_error", lambda r: copy_model(r, "bls_finalize_error"), VERBOSE,
              after=[log_contains(message)]),
        Phase("bls_model_loading", lambda r: None, skip=qa_models),
        Phase("bls_parameters", lambda r: copy_model(r, "bls_parameters"), VERBOSE,
              steps=[pytest_step(L0 / "bls" / "bls_parameters_test.py")]),
    ]


SUBTESTS["bls"] = bls


# --- python_based_backends ----------------------------------------------------------------------


def python_based_backends() -> list[Phase]:
    def models(repo: Path) -> None:
        backends = repo.parents[2] / "backends"
        (backends / "add_sub").mkdir(parents=True, exist_ok=True)
        shutil.copy(PYTHON_MODELS / "python_based_backends" / "add_sub_backend" / "model.py",
                    backends / "add_sub" / "model.py")
        # the real Triton finds its python backend in the same directory (test.sh copies
        # add_sub into Triton's own backends folder)
        peer = Path(os.environ.get("TRITON_PEER_DIR", "/tmp/naiad-triton-reference"))
        triton_python = peer / "wheel/pytriton/tritonserver/backends/python"
        if triton_python.exists() and not (backends / "python").exists():
            (backends / "python").symlink_to(triton_python)
        for name, operation in (("add", "add"), ("sub", "sub")):
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "1" / "model.json").write_text(f'{{ "operation": "{operation}" }}\n')
            (repo / name / "config.pbtxt").write_text('backend: "add_sub"\n')
        shutil.copytree(repo / "add" / "1", repo / "add" / "2")
        copy_model(repo, "add_sub")
        shutil.copytree(repo / "add_sub" / "1", repo / "add_sub" / "2")
        # test.sh: python3 gen_qa_pytorch_model.py -m MODEL_REPOSITORY (needs torch: the
        # server's interpreter has it)
        subprocess.run([sys.executable, str(UPSTREAM / "qa/common/gen_qa_pytorch_model.py"),
                        "-m", str(repo)], check=True, capture_output=True)

    return [Phase("python_based_backends", models,
                  ["--model-control-mode=explicit", *VERBOSE,
                   "--backend-directory={phase_dir}/backends"],
                  steps=[pytest_step(L0 / "python_based_backends" /
                                     "python_based_backends_test.py")])]


SUBTESTS["python_based_backends"] = python_based_backends


# --- subtests that cannot run on this machine, for Triton as for naiad ---------------------------


def variants() -> list[Phase]:
    return [Phase("variants", lambda r: None, skip=(
        "builds Triton's python_backend stub from its C++ sources (apt, cmake) in build "
        "variants; it runs no server"))]


def env() -> list[Phase]:
    return [Phase("env", lambda r: None, skip=(
        "downloads Miniconda and builds conda-pack environments (Python 3.6/3.7/3.10 with "
        "TensorFlow) and Triton's stub for each, then an S3 bucket (AWS credentials); conda "
        "and S3 are out of this machine's reach. naiad's EXECUTION_ENV_PATH support is tested "
        "in tests/plugins/backend_python/test_backend_python_environments_e2e.py"))]


def examples() -> list[Phase]:
    return [Phase("examples", lambda r: None, skip=(
        "installs torch 2.0+cu117, torchvision and jax[cuda12] and downloads images and "
        "weights for python_backend's examples; the CPU examples run against naiad in "
        "tests/plugins/backend_python/test_triton_examples.py"))]


SUBTESTS.update({"variants": variants, "env": env, "examples": examples})

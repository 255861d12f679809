"""Run one subtest of Triton 2.51's ``qa/L0_backend_python`` against one server, the way its
``test.sh`` does, inside a private network namespace.

The upstream test files talk to ``localhost:8000`` / ``8001`` / ``8002`` and may not be edited,
so each run gets a network namespace of its own (``unshare -n``, loopback up): the fixed
ports cannot collide with anything else on the machine, and two runs can go side by side.
The pytest module (test_l0_backend_python.py) starts this file as

    unshare -n sh -c 'ip link set lo up && exec python harness.py SUBTEST SERVER OUT_DIR'

and reads ``OUT_DIR/result.json``: one row per case, ``passed`` / ``failed`` / ``skipped``
with the detail, and whether the case asserts on the server's exact log text.

A subtest (recipes.py) is a list of phases; a phase builds a model repository from
``qa/python_models`` as test.sh does, starts the server with test.sh's flags, runs steps
(the upstream pytest files, unmodified, or a test.sh action such as killing the server's
child processes), stops the server and checks what test.sh checks afterwards (its log, the
number of /dev/shm entries).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SECONDS = 1.0
HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]
UPSTREAM = Path(
    os.environ.get(
        "NAIAD_TRITON_UPSTREAM",
        REPO_ROOT.parent / "shared" / "upstream" / "triton-server-v2.51.0",
    )
)
QA = UPSTREAM / "qa"
L0 = QA / "L0_backend_python"
PYTHON_MODELS = QA / "python_models"
TRITON_SCRIPTS = Path(
    os.environ.get("NAIAD_TRITON_SCRIPTS", REPO_ROOT.parent / "shared" / "triton")
)
SHIMS = HERE / "shims"
#: the upstream test files are run by the client of their release (tritonclient 2.51: the
#: BF16 and other client APIs changed later); scripts/test installs it into this venv
CLIENT_PYTHON = Path(
    os.environ.get("NAIAD_L0_CLIENT_PYTHON", REPO_ROOT / ".venv" / "l0-client" / "bin" / "python")
)
#: Triton's CI runs L0_backend_python in a container with --shm-size=1g; test_growth_error
#: counts on that limit, so each run gets a private /dev/shm of this size
SHM_SIZE = "1g"

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
START_TIMEOUT = 120 * SECONDS
STOP_TIMEOUT = 30 * SECONDS
CLIENT_TIMEOUT = 300 * SECONDS


# --- what a recipe is made of -----------------------------------------------------------------


@dataclass
class Case:
    """One result row."""

    name: str
    outcome: str  # passed | failed | skipped
    detail: str = ""
    log_text: bool = False  # asserts on the server's exact log text (a Triton message)


@dataclass
class Run:
    """What a step sees: the server, its log, the working folder, and the rows so far."""

    server: str  # naiad | triton
    workdir: Path
    process: subprocess.Popen[bytes] | None
    log_path: Path
    cases: list[Case] = field(default_factory=list)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


Step = Callable[[Run], None]


@dataclass
class Phase:
    """One ``run_server`` of test.sh: a repository, flags (``{phase_dir}`` stands for the
    phase's folder), the steps while it runs, the checks after it stopped.
    ``expect_start=False``: test.sh expects the server to fail to start
    (``run_server_nowait; wait``) and checks its log."""

    name: str
    build: Callable[[Path], None]
    args: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    after: list[Step] = field(default_factory=list)
    expect_start: bool = True
    env: dict[str, str] = field(default_factory=dict)
    check_shm_pages: bool = True
    # test.sh's MODELDIR is ${TRITON_DIR}/qa/L0_backend_python (models such as init_args
    # check the repository path they are given against it)
    repository: str = "qa/L0_backend_python/models"
    # test.sh's SERVER_LOG, in the folder the client runs in (lifecycle_test.py reads it)
    server_log: str = "server.log"
    # why this phase of test.sh cannot run here (a GPU...): reported as one skipped row
    skip: str = ""


# --- building repositories the way test.sh does -------------------------------------------------


def copy_model(repo: Path, source: str, name: str | None = None, *, version: str = "1",
               files: tuple[str, ...] = ("model.py",), config: bool = True,
               base: Path = PYTHON_MODELS) -> Path:
    """``mkdir -p models/NAME/1; cp python_models/SOURCE/model.py ...; cp config.pbtxt``."""
    name = name or source
    folder = repo / name
    (folder / version).mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy(base / source / f, folder / version / Path(f).name)
    if config:
        shutil.copy(base / source / "config.pbtxt", folder / "config.pbtxt")
    return folder


def edit_config(folder: Path, *, name: str | None = None, replace: dict[str, str] | None = None,
                max_batch_size: int | None = None, drop_max_batch_size: bool = False,
                append: str = "") -> None:
    """The ``sed -i`` / ``echo >>`` edits test.sh makes to a copied config.pbtxt."""
    path = folder / "config.pbtxt"
    lines = path.read_text().splitlines()
    out = []
    for line in lines:
        if name is not None and line.startswith("name:"):
            line = f'name: "{name}"'
        if line.startswith("max_batch_size:"):
            if drop_max_batch_size:
                line = ""
            elif max_batch_size is not None:
                line = f"max_batch_size: {max_batch_size}"
        for old, new in (replace or {}).items():
            line = line.replace(old, new)
        out.append(line)
    text = "\n".join(out) + "\n"
    if append:
        text += append + "\n"
    path.write_text(text)


def copy_tree(source: Path, dest: Path) -> None:
    shutil.copytree(source, dest, dirs_exist_ok=True)


# --- steps ----------------------------------------------------------------------------------------


def pytest_step(test_file: Path, *selectors: str, label: str | None = None,
                env: dict[str, str] | None = None, repeat: int = 1,
                not_run: dict[str, str] | None = None) -> Step:
    """``python3 -m pytest --junitxml=... FILE[::Class::test]``: the upstream file, unmodified,
    run from the working folder with qa/common on the path; one row per test case.
    ``not_run``: ``Class::test`` -> why it cannot run here (a GPU, ...): deselected, and
    reported as a skipped row with that reason."""

    def step(run: Run) -> None:
        for case, reason in (not_run or {}).items():
            run.cases.append(Case(f"{case} (not run)", "skipped", reason))
        # by name (-k): outside the rootdir, pytest's node ids have no file part
        names = [case.rsplit("::", 1)[-1] for case in (not_run or {})]
        deselect = ["-k", " and ".join(f"not {n}" for n in names)] if names else []
        for i in range(repeat):
            targets = [f"{test_file}{s}" for s in selectors] or [str(test_file)]
            tag = label or test_file.stem
            if repeat > 1:
                tag = f"{tag}.iter{i}"
            report = run.workdir / f"{tag}.report.xml"
            cmd = [str(CLIENT_PYTHON), "-m", "pytest", "-p", "no:cacheprovider", "-c",
                   os.devnull, "--rootdir", str(run.workdir), f"--junitxml={report}", "-q",
                   *deselect, *targets]
            child_env = client_env(run, env)
            try:
                proc = subprocess.run(cmd, cwd=run.workdir, env=child_env, capture_output=True,
                                      text=True, timeout=CLIENT_TIMEOUT)
                output = proc.stdout + proc.stderr
            except subprocess.TimeoutExpired as exc:
                output = f"client timed out after {CLIENT_TIMEOUT} s: {exc}"
            (run.workdir / f"{tag}.client.log").write_text(output)
            rows = junit_cases(report, prefix="" if repeat == 1 else f"[iter{i}] ")
            if not rows:
                rows = [Case(tag, "failed", "no junit report: " + output[-3000:])]
            run.cases.extend(rows)

    return step


def client_env(run: Run, extra: dict[str, str] | None = None) -> dict[str, str]:
    path = [str(SHIMS), str(QA / "common")]
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join([*path, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("TRITONSERVER_IPADDR", "localhost")
    env["NAIAD_L0_SERVER"] = run.server
    return env


def junit_cases(report: Path, prefix: str = "") -> list[Case]:
    if not report.exists():
        return []
    rows = []
    for tc in ET.parse(report).getroot().iter("testcase"):
        name = prefix + f"{tc.get('classname', '').rsplit('.', 1)[-1]}::{tc.get('name')}"
        outcome, detail = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                detail = (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped":
                outcome, detail = "skipped", child.get("message") or ""
        rows.append(Case(name, outcome, detail.strip()[-4000:]))
    return rows


def log_contains(text: str, name: str | None = None) -> Step:
    """test.sh's ``grep TEXT $SERVER_LOG``: a check on the server's exact log text."""

    def step(run: Run) -> None:
        found = text in run.log()
        run.cases.append(Case(name or f"log contains {text!r}", "passed" if found else "failed",
                              "" if found else run.log()[-3000:], log_text=True))

    return step


def log_count(text: str, op: str, n: int) -> Step:
    """test.sh's ``grep -c TEXT $SERVER_LOG`` compared with ``n`` (``==`` or ``>=``): a check
    on lines the models log through pb_utils.Logger, and on the server's exact log text."""

    def step(run: Run) -> None:
        count = sum(1 for line in run.log().splitlines() if text in line)
        ok = count == n if op == "==" else count >= n
        run.cases.append(Case(f"log lines with {text!r} {op} {n}", "passed" if ok else "failed",
                              "" if ok else f"{count} lines", log_text=True))

    return step


def http_post(path: str, body: dict[str, object]) -> Step:
    """test.sh's ``curl -d BODY localhost:8000PATH``: must answer 200."""

    def step(run: Run) -> None:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", HTTP_PORT, timeout=30)
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        res = conn.getresponse()
        text = res.read().decode(errors="replace")
        conn.close()
        run.cases.append(Case(f"POST {path} {json.dumps(body)}",
                              "passed" if res.status == 200 else "failed",
                              "" if res.status == 200 else f"{res.status} {text}"))

    return step


def kill_children(run: Run) -> None:
    """``kill -9 $(pgrep --parent $SERVER_PID)``: every direct child of the server."""
    assert run.process is not None
    out = subprocess.run(["pgrep", "--parent", str(run.process.pid)], capture_output=True,
                         text=True).stdout.split()
    for pid in out:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def sleep(seconds: float) -> Step:
    def step(run: Run) -> None:
        time.sleep(seconds)

    return step


# --- servers -------------------------------------------------------------------------------------


def server_cmd(server: str, repository: Path, args: list[str]) -> list[str]:
    ports = ["--http-port", str(HTTP_PORT), "--grpc-port", str(GRPC_PORT),
             "--metrics-port", str(METRICS_PORT)]
    if server == "triton":
        return ["bash", str(TRITON_SCRIPTS / "serve.sh"), f"--model-repository={repository}",
                *ports, *args]
    return [sys.executable, "-m", "naiad", "serve", "--http-address", "127.0.0.1",
            "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
            f"--model-repository={repository}", *ports, *args]


def shm_pages() -> int:
    return len(os.listdir("/dev/shm"))


def ready() -> bool:
    import http.client

    try:
        conn = http.client.HTTPConnection("127.0.0.1", HTTP_PORT, timeout=2)
        conn.request("GET", "/v2/health/ready")
        status = conn.getresponse().status
        conn.close()
    except OSError:
        return False
    return status == 200


def stop(process: subprocess.Popen[bytes]) -> None:
    """``kill $SERVER_PID; wait``: SIGTERM, SIGKILL after STOP_TIMEOUT."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT)


def run_phase(server: str, phase: Phase, workdir: Path) -> list[Case]:
    if phase.skip:
        return prefixed(phase, [Case("not run", "skipped", phase.skip)])
    phase_dir = workdir / phase.name
    phase_dir.mkdir(parents=True, exist_ok=True)
    repository = phase_dir / phase.repository
    os.environ["TRITON_DIR"] = str(phase_dir)
    shutil.rmtree(repository, ignore_errors=True)
    repository.mkdir(parents=True)
    phase.build(repository)
    log_path = phase_dir / phase.server_log
    before = shm_pages()
    env = {**os.environ, **phase.env}
    with open(log_path, "wb") as log:
        args = [a.format(phase_dir=phase_dir) for a in phase.args]
        process = subprocess.Popen(server_cmd(server, repository, args), stdout=log,
                                   stderr=subprocess.STDOUT, cwd=phase_dir, env=env)
    run = Run(server, phase_dir, process, log_path)
    deadline = time.monotonic() + START_TIMEOUT
    started = False
    while time.monotonic() < deadline and process.poll() is None:
        if ready():
            started = True
            break
        time.sleep(0.1)
    if phase.expect_start:
        if not started:
            stop(process)
            run.cases.append(Case(f"{phase.name}: server starts", "failed", run.log()[-4000:]))
            return prefixed(phase, run.cases)
        for step in phase.steps:
            step(run)
        stop(process)
    else:
        # test.sh: run_server_nowait; wait $SERVER_PID (the server must give up by itself)
        try:
            process.wait(START_TIMEOUT)
        except subprocess.TimeoutExpired:
            stop(process)
        ok = not started and process.returncode not in (None, 0)
        run.cases.append(Case(f"server refuses to start (exit {process.returncode})",
                              "passed" if ok else "failed", "" if ok else run.log()[-3000:]))
    for step in phase.after:
        step(run)
    if phase.check_shm_pages:
        time.sleep(1.0)  # the stubs' regions go with the stubs
        after = shm_pages()
        run.cases.append(Case("/dev/shm cleaned after the server stopped",
                              "passed" if after == before else "failed",
                              f"{before} entries before, {after} after: "
                              f"{sorted(os.listdir('/dev/shm'))}"))
    return prefixed(phase, run.cases)


def prefixed(phase: Phase, cases: list[Case]) -> list[Case]:
    for c in cases:
        c.name = f"{phase.name}: {c.name}"
    return cases


def namespace_cmd(subtest: str, server: str, out: Path) -> list[str]:
    """The command that runs ``main`` in a network namespace of its own (loopback up) with
    a private /dev/shm of SHM_SIZE (a mount namespace); needs root (or user namespaces)."""
    inner = (f"ip link set lo up && mount -t tmpfs -o size={SHM_SIZE} tmpfs /dev/shm && "
             f'exec "$0" "$1" "$2" "$3" "$4"')
    return ["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c", inner,
            sys.executable, str(Path(__file__).resolve()), subtest, server, str(out)]


def main(argv: list[str]) -> int:
    subtest, server, out = argv[1], argv[2], Path(argv[3])
    sys.path.insert(0, str(HERE))
    from recipes import SUBTESTS

    out.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []
    for phase in SUBTESTS[subtest]():
        try:
            cases.extend(run_phase(server, phase, out))
        except Exception as exc:  # a harness fault is a failed row, not a lost report
            cases.append(Case(f"{phase.name}: harness", "failed", repr(exc)))
    (out / "result.json").write_text(json.dumps([c.__dict__ for c in cases], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

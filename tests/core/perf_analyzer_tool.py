"""The real perf_analyzer for the tests: found or set up, run, and its output judged.

perf_analyzer is the binary that the ``tritonclient==2.51.0`` wheel carries; the shared
``setup.sh`` (``../shared/perf_analyzer/``, or ``NAIAD_PERF_ANALYZER_SCRIPTS``) builds a
virtual environment holding it (``PA_VENV``, default ``<tempdir>/naiad-perf-analyzer-venv``)
and prints that environment's path. The binary links ``libcudart.so.12``, which comes from
PyPI's ``nvidia-cuda-runtime-cu12`` in the same environment: no GPU is needed for HTTP, gRPC
and system shared memory.

Environment:
  NAIAD_PERF_ANALYZER_SCRIPTS   folder of setup.sh (default <repo>/../shared/perf_analyzer)
  PA_VENV                       where setup.sh puts the environment
  NAIAD_REQUIRE_PERF_ANALYZER=1 fail instead of skipping when it cannot be set up
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
from perf_analyzer_hang import Hang, ServerAccount, snapshot

SECONDS = 1.0
REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(os.environ.get("NAIAD_PERF_ANALYZER_SCRIPTS",
                              REPO_ROOT.parent / "shared" / "perf_analyzer"))
DEFAULT_VENV = Path(tempfile.gettempdir()) / "naiad-perf-analyzer-venv"
# A first setup downloads two wheels; later ones only check the binary runs.
SETUP_TIMEOUT = 900 * SECONDS
# A guard against a run that hangs, not a measurement: a run takes a second or two.
RUN_TIMEOUT = 120 * SECONDS
# Between the two looks at a run that hung (perf_analyzer_hang.Hang): long enough for a
# server that is still working to answer something.
LOOK_APART = 1 * SECONDS

# A line of perf_analyzer's output that reports a problem ("Thread [0] had error: ...",
# "Failed to ...", "Unable to unregister all shared memory regions", "WARNING: ...").
PROBLEM = re.compile(r"error|fail|unable|warn", re.IGNORECASE)
# "Request count: N" of the client section of each measurement.
CLIENT_REQUESTS = re.compile(r"^\s*Client:\s*\n\s*Request count: (\d+)", re.MULTILINE)


@dataclass(frozen=True)
class PerfAnalyzer:
    """The binary and the environment it runs in."""

    binary: Path
    env: dict[str, str]
    # A command that runs the binary with the arguments after it (``gdb -batch -x SCRIPT
    # --args``); a hang is then looked for in the wrapper's child, perf_analyzer itself.
    wrapper: tuple[str, ...] = ()

    def run(self, *args: str, timeout: float = RUN_TIMEOUT, server_port: int | None = None,
            server_account: Callable[[], ServerAccount] | None = None,
            answered_before: int = 0) -> Run:
        """Run perf_analyzer ARGS. A run still going after ``timeout`` seconds is looked at
        twice (what its threads wait in, its connections to ``server_port``, and
        ``server_account()``, whose ``answered`` was ``answered_before`` when the run began:
        see perf_analyzer_hang) before it is killed, and comes back with ``hang`` set;
        without ``server_port`` and ``server_account`` it raises
        ``subprocess.TimeoutExpired``."""
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen([*self.wrapper, str(self.binary), *args], env=self.env,
                                    stdout=out, stderr=err, text=True)
            try:
                hang = self._watch(proc, args, timeout, server_port, server_account,
                                   answered_before)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            out.seek(0)
            err.seek(0)
            output = out.read() + err.read()
        return Run(list(args), None if hang else proc.returncode, output, hang)

    def _watch(self, proc: subprocess.Popen[str], args: tuple[str, ...], timeout: float,
               server_port: int | None, server_account: Callable[[], ServerAccount] | None,
               answered_before: int) -> Hang | None:
        """Wait for the run; past ``timeout``, look at it (None: it ended). A run the server
        is still answering is slow, not stuck: it gets until RUN_TIMEOUT from its start."""
        started = time.monotonic()
        deadline = started + timeout
        while True:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
                return None
            except subprocess.TimeoutExpired:
                if server_port is None or server_account is None:
                    raise
            pid = self._perf_analyzer_pid(proc.pid)
            first = (snapshot(pid, server_port), server_account())
            time.sleep(LOOK_APART)
            second = (snapshot(pid, server_port), server_account())
            if proc.poll() is not None:
                return None
            hang = Hang(time.monotonic() - started, answered_before, _request_count(args),
                        first, second)
            still_answering = second[1].answered != first[1].answered
            if not still_answering or deadline >= started + RUN_TIMEOUT:
                return hang
            deadline = started + RUN_TIMEOUT

    def _perf_analyzer_pid(self, pid: int) -> int:
        """perf_analyzer's process: ``pid``, or its child when a wrapper runs it."""
        if not self.wrapper:
            return pid
        for entry in Path("/proc").iterdir():
            try:
                # the parent's pid is the 2nd field after the command's closing parenthesis
                if entry.name.isdigit() and int(
                        (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    return int(entry.name)
            except (OSError, IndexError, ValueError):
                continue
        return pid


CLIENT_BEHIND = "Perf Analyzer was not able to keep up with the desired request rate"


@dataclass(frozen=True)
class Run:
    args: list[str]
    returncode: int | None  # None: it hung and was killed (see ``hang``)
    output: str
    hang: Hang | None = None

    @property
    def problems(self) -> list[str]:
        """The lines that report an error, a failure or a warning; not perf_analyzer's own
        note that its client fell behind a request schedule (a busy machine, not the
        server: it sends the next request late whatever the server answers)."""
        return [line for line in self.output.splitlines()
                if PROBLEM.search(line) and CLIENT_BEHIND not in line]

    @property
    def client_requests(self) -> int:
        """Requests perf_analyzer counted in its measurements (every level together)."""
        return sum(int(n) for n in CLIENT_REQUESTS.findall(self.output))

    def explain(self) -> str:
        ending = f"exit {self.returncode}" if self.hang is None else self.hang.explain()
        return f"perf_analyzer {' '.join(self.args)}\n{ending}\n{self.output}"


def _request_count(args: tuple[str, ...]) -> int | None:
    """The ``--request-count`` a run was given (the requests it is to send), if any."""
    for flag, value in pairwise(args):
        if flag == "--request-count":
            return int(value)
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("NAIAD_REQUIRE_PERF_ANALYZER") == "1":
        pytest.fail(f"perf_analyzer required (NAIAD_REQUIRE_PERF_ANALYZER=1) but unavailable: "
                    f"{reason}", pytrace=False)
    pytest.skip(f"the real perf_analyzer is unavailable: {reason}")


def _environment(venv: Path) -> PerfAnalyzer | None:
    binary = venv / "bin" / "perf_analyzer"
    cudart = sorted(venv.glob("lib/python3*/site-packages/nvidia/cuda_runtime/lib"))
    if not binary.exists() or not cudart:
        return None
    library_path = os.pathsep.join(filter(None, [str(cudart[0]),
                                                 os.environ.get("LD_LIBRARY_PATH")]))
    tool = PerfAnalyzer(binary, {**os.environ, "LD_LIBRARY_PATH": library_path})
    try:
        works = tool.run("--version").returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        works = False
    return tool if works else None


def find_or_set_up() -> PerfAnalyzer:
    """The working perf_analyzer; runs setup.sh when there is none yet (skips, with the
    reason, when it cannot be had)."""
    venv = Path(os.environ.get("PA_VENV", DEFAULT_VENV))
    tool = _environment(venv)
    if tool is not None:
        return tool
    setup = SCRIPTS / "setup.sh"
    if not setup.exists():
        _unavailable(f"no {setup} (set NAIAD_PERF_ANALYZER_SCRIPTS)")
    try:
        proc = subprocess.run(["bash", str(setup)], env={**os.environ, "PA_VENV": str(venv)},
                              capture_output=True, text=True, timeout=SETUP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"{setup} did not finish: {exc}")
    printed = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and printed:
        tool = _environment(Path(printed[-1]))
        if tool is not None:
            return tool
    _unavailable(f"{setup} failed (exit {proc.returncode}):\n"
                 f"{(proc.stdout + proc.stderr)[-1500:]}")
    raise AssertionError("unreachable: _unavailable skips or fails")

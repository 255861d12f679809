"""naiad.testing's servers end with the process that started them, however it ends.

A runner process starts two servers the way tests do (one from its main thread serving the
examples' Python models, so workers run too; one from a thread that has returned before the
kill, the Linux PR_SET_PDEATHSIG caveat), is killed with SIGKILL, and no server or worker is
left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "model_repository"
RUNNER_READY_TIMEOUT_S = 60.0
GONE_TIMEOUT_S = 20.0

RUNNER = """
import json, sys, threading, time
from pathlib import Path
from naiad.testing import naiad_server

def descendants(pid):
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):  # a process that ended meanwhile
            pass
    found, todo = [], [pid]
    while todo:
        pid = todo.pop()
        children = [child for child, parent in parents.items() if parent == pid]
        found += children
        todo += children
    return found

started, keep = {}, []
def start(name, repo, *flags):
    keep.append(naiad_server("--model-repository", repo, *flags))  # stops when collected
    started[name] = keep[-1].__enter__()

thread = threading.Thread(target=start, args=("thread", sys.argv[2]))
thread.start()
start("main", sys.argv[1])
thread.join()  # the thread that started this server has ended
pids = [p for s in started.values() for p in (s.process.pid, *descendants(s.process.pid))]
print(json.dumps({"servers": [s.process.pid for s in started.values()], "all": pids}),
      flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_servers_end_when_the_runner_is_killed(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    runner = subprocess.Popen(
        [sys.executable, str(script), str(EXAMPLES), str(empty)],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = runner.stdout.readline() if runner.stdout else ""
        assert line, (f"the runner ended with {runner.wait(RUNNER_READY_TIMEOUT_S)} "
                      "before it started its servers")
        pids = json.loads(line)
        assert len(pids["all"]) > len(pids["servers"]), "the Python models' workers are missing"
        time.sleep(0.5)  # the thread-started server must not have been signalled already
        assert all(_alive(pid) for pid in pids["all"]), pids
        runner.send_signal(signal.SIGKILL)
        runner.wait(RUNNER_READY_TIMEOUT_S)
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids["all"]):
            time.sleep(0.1)
        left = [pid for pid in pids["all"] if _alive(pid)]
        assert not left, f"still running {GONE_TIMEOUT_S} s after the runner was killed: {left}"
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        if runner.stdout:
            runner.stdout.close()

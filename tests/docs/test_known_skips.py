"""The suite's root conftest.py says, before the first test runs, which groups will skip and
why (issue 33: 330 compat tests printed ``s`` for the whole run, the reason only at the end).

A real pytest process runs a throwaway suite that has the root conftest.py and one group of
each kind: a ``skipif`` mark, a module skipped while collected, and a folder whose conftest
declares a fixture's run-time skip through ``pytest_naiad_skip_reasons``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTEST_TIMEOUT_S = 120.0

MARKED = '''
import pytest

@pytest.mark.skipif(True, reason="the marked reason")
def test_marked():
    pass

def test_runs():
    pass
'''
MODULE = '''
import pytest

pytest.importorskip("no_such_module_for_naiad", reason="the module's reason")

def test_never_collected():
    pass
'''
PEER_CONFTEST = '''
import pytest

@pytest.hookimpl(optionalhook=True)
def pytest_naiad_skip_reasons(config):
    return [("peer", "the peer is not set up")]  # the tests that use the fixture peer

@pytest.fixture
def peer():
    pytest.skip("the peer is not set up")
'''
PEER_TESTS = '''
def test_one(peer):
    pass

def test_two(peer):
    pass
'''


def test_known_skips_are_listed_before_the_first_test_runs(tmp_path: Path) -> None:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_marked.py").write_text(MARKED)
    (tmp_path / "test_module.py").write_text(MODULE)
    (tmp_path / "peer").mkdir()
    (tmp_path / "peer" / "conftest.py").write_text(PEER_CONFTEST)
    (tmp_path / "peer" / "test_peer.py").write_text(PEER_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=PYTEST_TIMEOUT_S,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})  # a faster start
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    [title] = [n for n, line in enumerate(lines) if "known before the run: these skip" in line]
    first_result = next(n for n, line in enumerate(lines)
                        if line.endswith(("PASSED", "SKIPPED")) or " PASSED " in line
                        or " SKIPPED " in line)
    assert title < first_result, done.stdout
    listed = lines[title + 1:title + 4]
    assert listed[0] == "2 tests in peer: the peer is not set up", listed
    assert sorted(listed[1:]) == ["1 test in .: the marked reason",
                                  "1 whole module in .: the module's reason"], listed

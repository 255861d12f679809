"""Issue 32, item 8: ``--cache-config local,size=...`` beyond the machine's memory is refused
at start-up, naming the setting, instead of being taken as a budget the cache (filled
lazily) could never honour: before the fix ``size=10**26`` started a server whose response
cache had no bound at all."""

from __future__ import annotations

import subprocess
import sys

import pytest

from naiad.errors import InferenceServerError

lru = pytest.importorskip("naiad_cache_local.lru", reason="naiad-cache-local is not installed")


def test_a_cache_larger_than_the_machine_is_refused():
    memory = lru.physical_memory()
    assert memory
    with pytest.raises(InferenceServerError, match="more than this machine's memory"):
        lru.LocalCache.from_settings({"size": str(10**26)})
    assert lru.LocalCache.from_settings({"size": str(memory // 2)}).size == memory // 2


def test_the_server_does_not_start_with_it(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--model-repository", str(tmp_path),
         "--cache-config", f"local,size={10**26}", "--http-port", "0", "--grpc-port", "0",
         "--allow-metrics=false"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"size={10**26} bytes is more than this machine's memory" in done.stderr + done.stdout

"""scripts/test says what it will install, and which groups will skip and why, before it
installs anything (``scripts/test --plan`` prints that and stops)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAN_TIMEOUT_S = 30.0


def _plan(script: Path) -> str:
    done = subprocess.run(["bash", str(script), "--plan"], capture_output=True, text=True,
                          timeout=PLAN_TIMEOUT_S, check=True)
    return done.stdout


def test_the_plan_names_what_is_installed_from_where() -> None:
    plan = _plan(REPO_ROOT / "scripts" / "test")
    assert plan.startswith("scripts/test installs, before it runs pytest:")
    assert "PyPI into .venv:" in plan and "torch==2.13.0 CPU build" in plan


def test_a_checkout_without_the_triton_peer_hears_that_compat_will_skip(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "scripts" / "test", checkout / "scripts" / "test")
    plan = _plan(checkout / "scripts" / "test")
    assert "no ../shared/triton/setup.sh: tests/compat" in plan
    assert "will skip" in plan
    assert not (checkout / ".venv").exists(), "--plan installed something"

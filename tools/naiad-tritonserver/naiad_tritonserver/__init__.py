"""``tritonserver ARGS...`` runs ``naiad serve ARGS...``, for scripts written for Triton.

naiad takes every ``tritonserver`` 2.51 flag (docs/compatibility.md), so a launch script,
systemd unit or test harness that calls ``tritonserver --model-repository=...`` serves with
naiad once this distribution is installed, outside the container image too (the image has
its own ``tritonserver`` script, deploy/docker/tritonserver). It is opt-in, because the
command shadows a real Triton: when another ``tritonserver`` is on ``PATH`` as well, the
command says which one this is before it starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

COMMAND = "tritonserver"


def other_tritonservers(path: str | None = None, this: str | None = None) -> list[Path]:
    """Every executable ``tritonserver`` on ``path`` (default ``$PATH``) that is not the
    command ``this`` (default: the running one)."""
    me = Path(this if this is not None else sys.argv[0]).resolve()
    found: list[Path] = []
    for folder in (os.environ.get("PATH", "") if path is None else path).split(os.pathsep):
        candidate = Path(folder or ".") / COMMAND
        if (candidate.is_file() and os.access(candidate, os.X_OK)
                and candidate.resolve() != me and candidate.resolve() not in found):
            found.append(candidate.resolve())
    return found


def shadow_notice(others: Sequence[Path]) -> str | None:
    """The line said at start when a real Triton is on PATH too, or None."""
    if not others:
        return None
    return (f"{COMMAND}: this is naiad's (naiad-tritonserver: it runs 'naiad serve' with the "
            f"same arguments); another {COMMAND} is at {', '.join(map(str, others))}: call "
            f"that one by its path, or 'pip uninstall naiad-tritonserver'")


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: ``naiad serve`` with this command's arguments, started as the
    ``naiad`` command starts it (its gRPC settings first)."""
    notice = shadow_notice(other_tritonservers())
    if notice:
        print(notice, file=sys.stderr, flush=True)
    from naiad.__main__ import GRPC_EXPERIMENTS

    os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)
    from naiad.cli import main as naiad_main

    return naiad_main(["serve", *(sys.argv[1:] if argv is None else argv)])

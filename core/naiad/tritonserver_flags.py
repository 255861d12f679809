"""The tritonserver flags that change nothing in naiad, and those naiad refuses.

A Triton command line must start naiad unchanged, so every flag of ``tritonserver`` 2.51
is known here or in :mod:`naiad.cli`. Two kinds live here:

- **inert**: settings of parts naiad does not have (Triton's pinned and CUDA memory pools,
  its C++ thread pools, the directories of its shared libraries). Any value is accepted,
  and ``naiad serve`` logs once that it has no effect.
- **refused**: features naiad does not implement (SageMaker and Vertex AI endpoints,
  model namespacing). Their default (off) is accepted; any other
  value stops start-up with the reason, rather than serving without a feature the operator
  asked for. A repeatable flag may have values naiad implements
  (``Refused.implemented``): those are accepted.

docs/compatibility.md lists both.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NamedTuple

NO_GPU = "naiad manages no GPU memory of its own (backends use their framework's allocator)"
PLUGINS = "naiad's backends and caches are installed Python packages (naiad plugins)"


class Inert(NamedTuple):
    flag: str
    metavar: str
    reason: str
    repeatable: bool = False


class Refused(NamedTuple):
    flag: str
    metavar: str
    default: Any  # accepted: what tritonserver does by default
    reason: str
    parse: Callable[[str], Any] = str
    repeatable: bool = False
    #: for a repeatable flag: which of its values naiad implements (those are accepted;
    #: None: none is)
    implemented: Callable[[str], bool] | None = None


INERT = (
    Inert("--http-thread-count", "N", "naiad's HTTP endpoint runs on its event loop"),
    Inert("--grpc-infer-allocation-pool-size", "N",
          "naiad keeps no pool of gRPC request objects"),
    Inert("--enable-peer-access", "BOOL", "naiad sets up no GPU peer access itself"),
    Inert("--pinned-memory-pool-byte-size", "BYTES", NO_GPU),
    Inert("--cuda-memory-pool-byte-size", "GPU:BYTES", NO_GPU, repeatable=True),
    Inert("--cuda-virtual-address-size", "GPU:BYTES", NO_GPU, repeatable=True),
    Inert("--min-supported-compute-capability", "FLOAT",
          "naiad selects no GPUs itself; a KIND_GPU instance group names its devices"),
    Inert("--model-load-gpu-limit", "GPU:FRACTION", NO_GPU, repeatable=True),
    Inert("--buffer-manager-thread-count", "N",
          "naiad copies tensors on the thread that handles the request"),
    Inert("--host-policy", "NAME,KEY=VALUE",
          "naiad does not pin memory or threads to NUMA nodes", repeatable=True),
    Inert("--repoagent-directory", "PATH", "naiad has no repository agents"),
    Inert("--cache-directory", "PATH", PLUGINS),
    Inert("--metrics-interval-ms", "MS", "naiad computes its metrics when they are scraped"),
    Inert("--sagemaker-port", "PORT", "there is no SageMaker endpoint (--allow-sagemaker)"),
    Inert("--sagemaker-safe-port-range", "FROM-TO",
          "there is no SageMaker endpoint (--allow-sagemaker)"),
    Inert("--sagemaker-thread-count", "N",
          "there is no SageMaker endpoint (--allow-sagemaker)"),
    Inert("--vertex-ai-port", "PORT", "there is no Vertex AI endpoint (--allow-vertex-ai)"),
    Inert("--vertex-ai-thread-count", "N",
          "there is no Vertex AI endpoint (--allow-vertex-ai)"),
    Inert("--vertex-ai-default-model", "NAME",
          "there is no Vertex AI endpoint (--allow-vertex-ai)"),
)


def parse_bool(value: str) -> bool:
    """tritonserver's boolean values: true/false, 1/0, on/off, yes/no."""
    lowered = value.strip().lower()
    if lowered in ("true", "1", "on", "yes"):
        return True
    if lowered in ("false", "0", "off", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


REFUSED = (
    Refused("--allow-sagemaker", "BOOL", False, "naiad has no SageMaker endpoint", parse_bool),
    Refused("--allow-vertex-ai", "BOOL", False, "naiad has no Vertex AI endpoint", parse_bool),
    Refused("--model-namespacing", "BOOL", False,
            "naiad does not implement model namespacing; a model name must be unique "
            "across the repositories", parse_bool),
)



def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Register every inert and refused flag (hidden from ``--help``'s main groups)."""
    inert = parser.add_argument_group(
        "accepted for tritonserver command lines, no effect in naiad")
    for flag in INERT:
        inert.add_argument(flag.flag, dest=_dest(flag.flag), metavar=flag.metavar,
                           action="append" if flag.repeatable else "store",
                           help=flag.reason)
    refused = parser.add_argument_group(
        "not implemented: accepted only at tritonserver's default")
    for rule in REFUSED:
        refused.add_argument(rule.flag, dest=_dest(rule.flag), metavar=rule.metavar,
                             type=rule.parse, action="append" if rule.repeatable else "store",
                             help=f"{rule.reason} (default {rule.default})")


def refusals(args: argparse.Namespace) -> list[str]:
    """One message per refused flag given a value other than tritonserver's default."""
    messages = []
    for rule in REFUSED:
        value = getattr(args, _dest(rule.flag))
        if value is not None and rule.implemented is not None:
            value = [item for item in value if not rule.implemented(item)] or None
        if value is None or value == rule.default:
            continue
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        messages.append(f"{rule.flag}={shown}: {rule.reason}")
    return messages


def inert_given(args: argparse.Namespace) -> list[str]:
    """One line per inert flag on the command line: what it would set, and why it does not."""
    return [f"{flag.flag} has no effect: {flag.reason}" for flag in INERT
            if getattr(args, _dest(flag.flag)) is not None]

"""docs/not-supported.md stays true: every refused tritonserver flag, every Triton 2.51
extension naiad leaves out of GET /v2 and every Triton backend naiad has no plugin for is
listed, and everything listed is still refused, left out or missing."""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path

import pytest

from naiad import tritonserver_flags
from naiad.cli import build_parser
from naiad.errors import InferenceServerError, Status
from naiad.metadata import EXTENSIONS
from naiad.plugins import BACKENDS_WITHOUT_PLUGIN, ENTRY_POINT_GROUPS, KNOWN_PLUGINS, PluginManager

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "not-supported.md").read_text()
# What the real tritonserver 2.51 answered to GET /v2 (recorded by the differential suite).
OBSERVED = (ROOT / "tests" / "compat" / "TRITON_OBSERVED.md").read_text()


def section(title: str) -> str:
    """The text of the page's ``## title`` section."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC, re.M | re.S)
    assert match, f"docs/not-supported.md has no section '## {title}'"
    return match.group(1)


def listed(title: str) -> set[str]:
    """The names in the first column of the section's table (a backticked name per row)."""
    rows = re.findall(r"^\| `([^`]+)` \|", section(title), re.M)
    assert rows, f"no table rows in '## {title}'"
    return set(rows)


def triton_extensions() -> list[str]:
    match = re.search(r'"extensions":(\[[^\]]*\])', OBSERVED)
    assert match, "TRITON_OBSERVED.md records no GET /v2 answer"
    return json.loads(match.group(1))


def test_every_extension_naiad_leaves_out_is_listed_and_only_those():
    triton = triton_extensions()
    assert "classification" in triton  # the record is Triton's full list
    assert listed("Protocol extensions") == set(triton) - set(EXTENSIONS)


def test_every_refused_flag_is_listed_and_only_those():
    assert listed("tritonserver flags") == {rule.flag for rule in tritonserver_flags.REFUSED}


# A value other than tritonserver's default, by the flag's metavar.
NON_DEFAULT = {"BOOL": "true", "MODE": "execution_count"}


@pytest.mark.parametrize("flag", sorted(listed("tritonserver flags")))
def test_every_listed_flag_is_really_refused(flag):
    rule = next(r for r in tritonserver_flags.REFUSED if r.flag == flag)
    value = NON_DEFAULT.get(rule.metavar, "R1:4")
    args = build_parser().parse_args(["serve", "--model-repository", "m", f"{flag}={value}"])
    assert any(line.startswith(f"{flag}=") for line in tritonserver_flags.refusals(args))


def test_every_backend_without_a_plugin_is_listed_and_only_those():
    assert listed("Backends") == set(BACKENDS_WITHOUT_PLUGIN)


@pytest.mark.parametrize("backend", sorted(listed("Backends")))
def test_every_listed_backend_is_really_missing(backend):
    assert ("backend", backend) not in KNOWN_PLUGINS
    group = ENTRY_POINT_GROUPS["backend"]
    assert not importlib.metadata.entry_points(group=group, name=backend)
    with pytest.raises(InferenceServerError) as info:
        PluginManager().backend(backend, {})
    assert info.value.status is Status.UNAVAILABLE
    assert f"naiad has no '{backend}' backend yet (docs/not-supported.md)" in info.value.message


def test_azure_credentials_still_read_keys_only():
    credentials = pytest.importorskip("naiad_source_azure.credentials")
    assert credentials.AUTH_TYPE_VAR in section("Elsewhere")
    assert set(credentials.KEY_AUTH_TYPES) == {"", "key"}

"""naiad.serve_flags: the one table of ``naiad serve``'s flags, and what is made from it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from naiad.cli import _options, build_parser
from naiad.frontends.grpc.options import GRPCOptions
from naiad.frontends.http.limits import HTTPLimits
from naiad.repository.mirror import MirrorSettings
from naiad.serve import Listeners
from naiad.serve_flags import FLAGS, TARGETS, markdown_table, option_values
from naiad.server_options import ServerOptions

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "user-guide.md"
DATACLASSES = {"server": ServerOptions, "listeners": Listeners, "http_limits": HTTPLimits,
               "grpc": GRPCOptions, "mirror": MirrorSettings}


def serve_actions() -> dict[str, object]:
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    return {name: (group.title, action) for group in serve._action_groups
            for action in group._group_actions for name in action.option_strings}


def test_the_user_guide_shows_the_table():
    text = GUIDE.read_text(encoding="utf-8")
    found = re.search(r"<!-- serve flags: begin -->\n(.*?)<!-- serve flags: end -->", text,
                      re.S)
    assert found, "docs/user-guide.md lost its serve flags markers"
    assert found.group(1) == markdown_table(), (
        "docs/user-guide.md's flag table differs from naiad/serve_flags.py: replace it with "
        "the output of 'python -m naiad.serve_flags'")


def test_every_row_is_a_flag_of_naiad_serve_in_its_group():
    actions = serve_actions()
    names = [name for flag in FLAGS for name in flag.names]
    assert len(names) == len(set(names)), "a flag name is in the table twice"
    for flag in FLAGS:
        for name in flag.names:
            group, action = actions[name]
            assert group == flag.group and action.dest == flag.key, name  # type: ignore[attr-defined]


@pytest.mark.parametrize("flag", [f for f in FLAGS if f.option], ids=lambda f: f.names[0])
def test_an_option_names_a_field_whose_default_is_the_flags(flag):
    target, _, name = flag.option.partition(".")
    assert target in TARGETS
    fields = {f.name: f for f in dataclasses.fields(DATACLASSES[target])}
    assert name in fields, f"{flag.names[0]}: {target} has no field {name}"
    field = fields[name]
    default = (field.default_factory() if field.default_factory is not dataclasses.MISSING
               else field.default)
    expected = False if flag.kind == "true" else flag.default
    assert default == expected, f"{flag.names[0]}: the table says {expected!r}, {target}.{name} " \
                                f"{default!r}"


def test_parsed_flags_reach_the_options_they_name():
    args = build_parser().parse_args([
        "serve", "--model-repository", "/r", "--http-port", "9000", "--exit-timeout-secs", "7",
        "--http-header-timeout", "3", "--grpc-idle-timeout", "5", "--repository-download-threads",
        "2", "--load-model", "a", "--load-model", "b"])
    values = option_values(args)
    assert values["listeners"]["http_port"] == 9000
    assert values["server"]["load_models"] == ["a", "b"]
    options, listeners = _options(args)
    assert options.exit_timeout_secs == 7 and options.model_repositories == ["/r"]
    assert listeners.http_port == 9000 and listeners.http_limits.header_timeout == 3
    assert listeners.grpc.idle_timeout_ms == 5
    assert options.repository_mirror.download_threads == 2

"""naiad.serve_flags: the one table of ``naiad serve``'s flags, and what is made from it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from naiad.cli import _options, build_parser
from naiad.frontends.grpc.options import GRPCOptions
from naiad.frontends.http.limits import HTTPLimits
from naiad.models.limits import ConfigLimits
from naiad.models.records import LoadOptions
from naiad.repository.mirror import MirrorSettings
from naiad.serve import Listeners
from naiad.serve_flags import FLAGS, TARGETS, help_text, markdown_table, option_values
from naiad.server_options import ServerOptions

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "user-guide.md"
DATACLASSES = {"server": ServerOptions, "load": LoadOptions, "limits": ConfigLimits,
               "listeners": Listeners, "http_limits": HTTPLimits, "grpc": GRPCOptions,
               "mirror": MirrorSettings}


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


# ---- naiad serve --help (the common rows) and --help-all (every flag) ----

SHORT_HELP_MAX_LINES = 70


def _help(capsys: pytest.CaptureFixture[str], flag: str) -> str:
    with pytest.raises(SystemExit) as ended:
        build_parser().parse_args(["serve", flag])
    assert ended.value.code == 0
    captured = capsys.readouterr()
    assert not captured.err
    return captured.out


def _words(text: str) -> str:
    """The help with argparse's line wrapping undone (it also breaks after hyphens)."""
    return " ".join(text.split()).replace("- ", "-")


def test_help_shows_the_common_flags_by_group_with_their_defaults(capsys):
    text = _help(capsys, "--help")
    assert len(text.splitlines()) <= SHORT_HELP_MAX_LINES, text
    assert text.startswith("usage: naiad serve --model-repository PATH [FLAG ...]\n")
    words = _words(text)
    for flag in FLAGS:
        shown = bool(re.search(rf"^  {re.escape(flag.names[0])}\b", text, re.M))
        assert shown is flag.common, f"{flag.names[0]}: common={flag.common}, shown={shown}"
        if flag.common:
            assert f"\n{flag.group}:\n" in text, flag.group
    for name, default in (("--http-port PORT", "8000"), ("--grpc-port PORT", "8001"),
                          ("--metrics-port PORT", "8002"), ("--log-verbose LEVEL", "0")):
        assert f"{name} default {default}" in words or f"(default {default})" in \
            words.split(name, 1)[1].split(" --", 1)[0], name
    assert "repositories' changes (default none)" in words  # --model-control-mode
    assert "'naiad serve --help-all' lists every flag" in words


def test_help_all_lists_every_flag_and_every_default(capsys):
    text = _help(capsys, "--help-all")
    words = _words(text)
    for name in serve_actions():
        assert re.search(rf"^  {re.escape(name)}\b", text, re.M) or f", {name}" in text, name
    for flag in FLAGS:
        if help_text(flag) != (flag.help or ""):  # the default was added to the text
            assert help_text(flag) in words, flag.names[0]
        if flag.kind != "true" and flag.default not in (None, "", []):
            assert "default" in help_text(flag), f"{flag.names[0]} shows no default"


def test_help_text_adds_a_default_the_text_does_not_give():
    port = next(flag for flag in FLAGS if flag.names == ("--http-port",))
    assert help_text(port) == "default 8000"
    verbose = next(flag for flag in FLAGS if flag.names == ("--log-verbose",))
    assert help_text(verbose).endswith("(default 0)")
    poll = next(flag for flag in FLAGS if flag.names == ("--repository-poll-secs",))
    assert help_text(poll) == poll.help  # it says "(default 15)" itself

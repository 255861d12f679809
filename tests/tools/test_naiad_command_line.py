"""The ``naiad`` command line as a newcomer meets it: ``naiad --help`` and ``naiad plugins``
list every installed command, an error comes first, a misspelled flag gets a suggestion."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

from naiad import cli
from naiad.flag_suggestions import suggestions

HELP_TIMEOUT_S = 60.0


def _naiad(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "naiad", *args], capture_output=True,
                          text=True, timeout=HELP_TIMEOUT_S)


def test_help_lists_every_installed_command() -> None:
    installed = cli.installed_commands()
    if not installed:
        pytest.skip("no naiad.commands entry point is installed (naiad-perf, naiad-convert)")
    done = _naiad("--help")
    assert done.returncode == 0, done.stderr
    for name in ("serve", "plugins", *installed):
        assert f"\n    {name} " in done.stdout, (name, done.stdout)
    for name in set(cli.KNOWN_COMMANDS) & set(installed):
        assert cli.KNOWN_COMMANDS[name][2].split()[0] in done.stdout


def test_help_names_the_known_commands_that_are_not_installed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [] if group == cli.COMMANDS_GROUP else real(group=group))
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = "".join(capsys.readouterr().out.split())  # argparse wraps the epilog anywhere
    expected = ("Not installed: perf (naiad-perf), analyze (naiad-perf), convert "
                "(naiad-convert); 'naiad NAME' says how to install it.")
    assert expected.replace(" ", "") in out


def test_plugins_lists_the_commands_with_their_distribution(
        capsys: pytest.CaptureFixture[str]) -> None:
    installed = cli.installed_commands()
    if not installed:
        pytest.skip("no naiad.commands entry point is installed (naiad-perf, naiad-convert)")
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert f"{cli.COMMANDS_GROUP}:\n" in out
    for name, distribution in installed.items():
        assert any(line.split()[:2] == [name, distribution] for line in out.splitlines())


def test_a_misspelled_serve_flag_gets_a_suggestion_after_the_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(["serve", "--http-prot", "8000", "--model-repository", "/nonexistent"])
    assert ended.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "naiad: error: unrecognized arguments: --http-prot 8000"
    assert lines[1].startswith("--http-prot: did you mean --http-port")
    assert len(lines) == 3, lines


def test_a_bad_value_prints_its_error_first_and_no_usage_block(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--http-port", "abc"])
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["naiad serve: error: argument --http-port: invalid int value: 'abc'",
                     "'naiad serve --help' lists the flags"]


def test_suggestions_skip_values_and_flags_with_nothing_close() -> None:
    options = ["--http-port", "--grpc-port", "--model-repository"]
    [line] = suggestions(["--grpc-prot=9", "8000", "--zzz"], options)
    assert line.startswith("--grpc-prot: did you mean --grpc-port")

"""Install hints say what works from where the user is: a checkout first (a real path), then
a folder of wheels from scripts/release, then the package index once naiad is published."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest
import tomllib

from naiad import cli, install_hints
from naiad.plugins import KNOWN_PLUGINS, install_hint

ROOT = Path(__file__).resolve().parents[2]


class _InstalledFrom:
    """A stand-in for importlib.metadata's Distribution: only direct_url.json is read."""

    def __init__(self, url: str) -> None:
        self.url = url

    def read_text(self, name: str) -> str | None:
        return json.dumps({"url": self.url, "archive_info": {}}) if name == "direct_url.json" \
            else None


def _order(hint: str, *parts: str) -> list[int]:
    return [hint.index(part) for part in parts]


def test_from_a_checkout_the_hint_leads_with_a_path_that_holds_the_distribution() -> None:
    assert install_hints.checkout_root() == ROOT
    for plugin in KNOWN_PLUGINS.values():
        hint = plugin.install_hint()
        path = ROOT / plugin.folder
        assert hint.startswith(f"install {plugin.distribution}: from this naiad checkout "
                               f"({ROOT}): pip install ./{plugin.folder};"), hint
        pyproject = tomllib.loads((path / "pyproject.toml").read_text())
        assert pyproject["project"]["name"] == plugin.distribution
        assert f"--find-links dist {plugin.distribution};" in hint
        assert hint.endswith(f"published there: pip install {plugin.distribution} "
                             f"(or pip install 'naiad[{plugin.extra}]')")
        assert _order(hint, "checkout", "--find-links", "published") == sorted(
            _order(hint, "checkout", "--find-links", "published"))


def test_installed_from_a_wheel_folder_the_hint_leads_with_that_folder(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    wheel = tmp_path / "my dist" / "naiad-1.0.0-py3-none-any.whl"
    monkeypatch.setattr(install_hints, "checkout_root", lambda: None)
    monkeypatch.setattr(importlib.metadata, "distribution",
                        lambda name: _InstalledFrom(wheel.as_uri()))
    hint = install_hint("backend", "onnxruntime")
    assert hint.startswith(f"install naiad-backend-onnx: from the wheels naiad was installed "
                           f"from: pip install --find-links {wheel.parent} naiad-backend-onnx;")
    assert "from a naiad checkout: pip install ./plugins/backend-onnx" in hint


def test_installed_from_the_index_the_checkout_path_is_relative(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install_hints, "checkout_root", lambda: None)
    monkeypatch.setattr(install_hints, "wheel_folder", lambda: None)
    hint = install_hint("cache", "redis")
    assert hint.startswith("install naiad-cache-redis: from a naiad checkout: pip install "
                           "./plugins/cache-redis; from wheels built by scripts/release")


def test_a_missing_command_gets_the_same_hint(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    for command, distribution in (("convert", "naiad-convert"), ("analyze", "naiad-perf")):
        assert cli.main([command]) == 2
        err: Any = capsys.readouterr().err
        folder = ROOT / "tools" / distribution
        assert f"'{command}' is provided by the {distribution} distribution" in err
        assert f"from this naiad checkout ({ROOT}): pip install ./tools/{distribution};" in err
        assert (folder / "pyproject.toml").is_file()

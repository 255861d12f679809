"""The install instructions a newcomer reads first: only what the repository needs, PyTorch's
CPU build where it installs torch, and the "not installed" example as the server prints it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from naiad import install_hints
from naiad.plugins import install_hint

ROOT = Path(__file__).resolve().parents[2]
FROM_TRITON = ROOT / "docs" / "from-triton.md"
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def _shell_lines(text: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    return [line for block in blocks for line in block.splitlines() if "pip install" in line]


def test_the_first_install_command_takes_no_framework_the_models_do_not_need() -> None:
    first = _shell_lines(FROM_TRITON.read_text())[0]
    assert "./plugins/backend-onnx" in first and "./plugins/backend-python" in first
    assert "torch" not in first, first


@pytest.mark.parametrize("page", [FROM_TRITON, ROOT / "README.md"])
def test_torch_is_installed_from_the_cpu_index_with_the_pinned_version(page: Path) -> None:
    text = page.read_text()
    pinned = re.search(r"^torch==([\d.]+)$", (ROOT / "requirements-test.txt").read_text(), re.M)
    assert pinned
    command = f"pip install torch=={pinned.group(1)} {CPU_INDEX}"
    assert command in " ".join(text.split()), f"{page.name} does not say: {command}"
    for line in _shell_lines(text):
        if "pip install torch" in line:
            assert command in line, line
    assert "5.6 GB" in text and "0.75 GB" in text  # the sizes, CUDA build and CPU build


def test_the_not_installed_example_is_what_the_server_says(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    example = "/home/me/naiad"
    monkeypatch.setattr(install_hints, "checkout_root", lambda: Path(example))
    monkeypatch.setattr(install_hints, "wheel_folder", lambda: None)
    expected = ("backend 'onnxruntime' is not installed or not permitted: "
                f"{install_hint('backend', 'onnxruntime')}")
    text = FROM_TRITON.read_text()
    shown = re.search(r"```\n(backend 'onnxruntime' is not installed.*?)```", text, re.S)
    assert shown and " ".join(shown.group(1).split()) == expected

"""How to install one of naiad's distributions, said for where the user is.

naiad's plugins and tools are separate distributions that are not on the package index yet, so
``pip install naiad-backend-onnx`` fails with "No matching distribution". What works is, in
order: a path in a naiad checkout (``pip install ./plugins/backend-onnx``), a folder of wheels
that ``scripts/release`` built (``pip install --find-links dist naiad-backend-onnx``), and the
index once naiad is published there. A hint names all three, the one that matches how this
core was installed first, with the checkout's and the wheel folder's real paths when known.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from urllib.parse import unquote, urlparse

CORE_DISTRIBUTION = "naiad"
RELEASE_FOLDER = "dist"  # where scripts/release writes its wheels by default


def checkout_root() -> Path | None:
    """The naiad checkout this core runs from (an editable or path install), else None."""
    root = Path(__file__).resolve().parents[2]
    if (root / "core" / "pyproject.toml").is_file() and (root / "plugins").is_dir():
        return root
    return None


def wheel_folder() -> Path | None:
    """The folder of the wheel this core was installed from (pip's direct_url.json), else
    None (installed from an index, or not a local wheel)."""
    try:
        text = importlib.metadata.distribution(CORE_DISTRIBUTION).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        url = urlparse(json.loads(text).get("url", ""))
    except (ValueError, AttributeError):
        return None
    path = Path(unquote(url.path))
    if url.scheme != "file" or path.suffix != ".whl":
        return None
    return path.parent


def install_hint(distribution: str, folder: str, extra: str | None = None) -> str:
    """``install DISTRIBUTION: ...`` with the commands that work from a checkout, a wheel
    folder and the index; ``folder`` is the distribution's folder in a checkout
    (``plugins/backend-onnx``), ``extra`` the core's extra that pulls it, if any."""
    root = checkout_root()
    wheels = wheel_folder()
    from_checkout = (f"from this naiad checkout ({root}): pip install ./{folder}" if root
                     else f"from a naiad checkout: pip install ./{folder}")
    from_wheels = (f"from the wheels naiad was installed from: pip install --find-links "
                   f"{wheels} {distribution}" if wheels
                   else f"from wheels built by scripts/release: pip install --find-links "
                        f"{RELEASE_FOLDER} {distribution}")
    from_index = f"from the package index once naiad is published there: pip install " \
                 f"{distribution}"
    if extra:
        from_index += f" (or pip install 'naiad[{extra}]')"
    ways = [from_wheels, from_checkout] if wheels and not root else [from_checkout, from_wheels]
    return f"install {distribution}: " + "; ".join([*ways, from_index])

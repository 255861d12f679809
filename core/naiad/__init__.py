"""naiad: a Triton-compatible inference server with a small core and pip-installable plugins."""

import pkgutil

# naiad.pytriton (and any other naiad.* subpackage) may come from a distribution of its own
# (tools/naiad-pytriton): extend the package path with every naiad/ folder on sys.path.
__path__ = pkgutil.extend_path(__path__, __name__)

from naiad.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl"]

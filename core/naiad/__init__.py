"""naiad: a Triton-compatible inference server with a small core and pip-installable plugins."""

from naiad.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl"]

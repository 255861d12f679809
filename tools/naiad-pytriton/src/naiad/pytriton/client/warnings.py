"""PyTriton's client warnings (``pytriton.client.warnings``), same names and bases."""

from __future__ import annotations


class PyTritonWarning(UserWarning):
    """Base of PyTriton's warnings."""


class NotSupportedTimeoutWarning(PyTritonWarning):
    """A timeout that the underlying tritonclient cannot apply (gRPC's, outside infer)."""

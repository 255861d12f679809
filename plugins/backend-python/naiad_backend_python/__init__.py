"""naiad-backend-python: runs Triton Python models (``model.py`` with ``TritonPythonModel``
and ``import triton_python_backend_utils as pb_utils``) unmodified, inside naiad."""

from naiad_backend_python.backend import PythonBackend, PythonModelInstance

__all__ = ["PythonBackend", "PythonModelInstance"]

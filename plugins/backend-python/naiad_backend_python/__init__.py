"""naiad-backend-python: runs Triton Python models (``model.py`` with ``TritonPythonModel``
and ``import triton_python_backend_utils as pb_utils``) unmodified, each instance in a worker
process of its own (``isolated``, the default) or inside the server (``in_process``)."""

from naiad_backend_python.backend import PythonBackend
from naiad_backend_python.inprocess import InProcessInstance
from naiad_backend_python.isolated.instance import IsolatedInstance

__all__ = ["InProcessInstance", "IsolatedInstance", "PythonBackend"]

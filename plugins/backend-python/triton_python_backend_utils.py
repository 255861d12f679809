"""``import triton_python_backend_utils`` inside the server (in-process Python models).

The module itself lives in ``naiad_backend_python/stub/``, where a model's worker process
finds it too; this name makes the server's interpreter use that same module object.
"""

import sys

from naiad_backend_python.stub import triton_python_backend_utils as _module

sys.modules[__name__] = _module

"""The ``naiad.backends`` entry point ``tensorflow``: claims models with ``backend:
"tensorflow"`` (``platform: "tensorflow_savedmodel"`` and ``"tensorflow_graphdef"`` map to
it)."""

from __future__ import annotations

from naiad.errors import unavailable
from naiad.hookspecs import hookimpl
from naiad.types import Backend


@hookimpl
def naiad_backend(name: str, backend_config: dict[str, str]) -> Backend | None:
    if name != "tensorflow":
        return None
    # Imported here: TensorFlow (seconds to import) loads only once a TensorFlow model does.
    try:
        import tensorflow  # noqa: F401
    except ImportError as exc:
        raise unavailable(f"backend 'tensorflow' needs TensorFlow, which is not installed "
                          f"({exc}): pip install 'naiad-backend-tensorflow[cpu]' "
                          f"(tensorflow-cpu), or tensorflow on a GPU machine") from None
    from naiad_backend_tensorflow.backend import TensorFlowBackend

    return TensorFlowBackend(backend_config)

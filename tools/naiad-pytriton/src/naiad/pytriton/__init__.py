"""PyTriton 0.7's public API on naiad.

A PyTriton program switches by changing ``from pytriton.`` to ``from naiad.pytriton.`` in
its imports: ``naiad.pytriton.triton`` (Triton, RemoteTriton, TritonConfig),
``.model_config``, ``.decorators``, ``.client`` and ``.exceptions`` mirror PyTriton's modules.
A bound callable becomes an ordinary naiad Python model (docs/pytriton.md).
"""

__version__ = "0.1.0"

"""Model configurations: parse ``config.pbtxt``, resolve the backend, fill Triton's
defaults, validate, and render the JSON that ``GET /v2/models/{m}/config`` returns.

The modules are imported one by one (``naiad.config.parse``, ``.platforms``, ``.defaults``,
``.validate``, ``.render``); this package imports none of them, so reading the platform table
does not pull in protobuf.
"""

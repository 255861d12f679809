"""naiad's OpenAI-compatible frontend: Triton's ``python/openai`` API on ``naiad serve``.

The package's modules, one job each: :mod:`.plugin` (flags and registration, imported at
start-up, so it imports nothing heavy), :mod:`.settings`, :mod:`.listener` (the socket and
uvicorn), :mod:`.app` (routes, limits, restrictions), :mod:`.engine` (requests to models),
:mod:`.formats` (Triton's vLLM and TensorRT-LLM tensor formats), :mod:`.chat`,
:mod:`.completions`, :mod:`.embeddings`, :mod:`.tokenizer`, :mod:`.tool_parsers`,
:mod:`.errors`.
"""

"""Triton's frontend's defaults the tests read: naiad's (--http-max-input-size)."""

HTTP_DEFAULT_MAX_INPUT_SIZE: int = 1 << 26

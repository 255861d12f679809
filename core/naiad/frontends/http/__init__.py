"""The HTTP/REST frontend (KServe V2 with Triton's extensions)."""

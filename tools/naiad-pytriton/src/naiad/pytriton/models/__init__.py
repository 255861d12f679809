"""PyTriton's ``pytriton.models``: a bound model."""

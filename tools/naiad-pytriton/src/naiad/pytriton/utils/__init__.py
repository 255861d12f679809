"""PyTriton's ``pytriton.utils`` modules naiad provides."""

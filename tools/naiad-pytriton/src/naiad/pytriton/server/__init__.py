"""PyTriton's ``pytriton.server``: the server process ``Triton`` starts (``naiad serve``)."""

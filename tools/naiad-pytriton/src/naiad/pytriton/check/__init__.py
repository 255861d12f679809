"""PyTriton's ``pytriton.check`` (its self-test and environment report for tritonserver
installs) has no counterpart on naiad: importing it says so, naming it, instead of a bare
"no module named"."""

raise ModuleNotFoundError(
    "pytriton.check is not supported by naiad.pytriton: it checks PyTriton's bundled "
    "tritonserver, which naiad does not use (docs/pytriton.md, Not supported)",
    name="naiad.pytriton.check")

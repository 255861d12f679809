"""``python -m naiad.pytriton``: PyTriton's command line (``pytriton check``) has no
counterpart on naiad; it says so, naming it, and exits with status 2."""

import sys

print("pytriton's command line (`pytriton check`) is not supported by naiad.pytriton: it "
      "checks PyTriton's bundled tritonserver, which naiad does not use "
      "(docs/pytriton.md, Not supported)", file=sys.stderr)
sys.exit(2)

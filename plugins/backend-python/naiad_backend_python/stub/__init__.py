"""The code that runs in a Python model's worker process (and, imported from here, in-process)."""

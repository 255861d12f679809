"""Config is valid, but initialize() raises: the model fails to load (UNAVAILABLE)."""


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("broken_init: deliberate failure in initialize")

    def execute(self, requests):  # pragma: no cover - never reached
        return []

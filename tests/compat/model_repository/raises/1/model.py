"""execute() raises an exception."""


class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("raises: deliberate failure in execute")

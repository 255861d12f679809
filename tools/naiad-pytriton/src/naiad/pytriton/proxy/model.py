"""The Triton Python model every callable bound through naiad.pytriton is served by: sent
with the load request as ``file:<version>/model.py`` next to ``callables.pkl``."""

import triton_python_backend_utils as pb_utils

from naiad.pytriton.proxy.runtime import CallableRunner


class TritonPythonModel:
    def initialize(self, args):
        self.runner = CallableRunner(args, pb_utils)

    def execute(self, requests):
        return self.runner.execute(requests)

    def finalize(self):
        self.runner.close()

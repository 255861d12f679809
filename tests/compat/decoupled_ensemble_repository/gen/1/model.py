"""The decoupled step: TIMES responses, "WORD-i" and i, 50 ms apart; a negative TIMES
streams until the request is cancelled (and notes it in cancelled.log)."""
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.log = Path(args["model_repository"]) / "cancelled.log"

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            word = pb_utils.get_input_tensor_by_name(request, "WORD").as_numpy()[0]
            times = int(pb_utils.get_input_tensor_by_name(request, "TIMES").as_numpy()[0])
            index = 0
            while times < 0 or index < times:
                if request.is_cancelled():
                    with open(self.log, "a") as log:
                        log.write(f"{index}\n")
                    break
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("PIECE", np.array([word + b"-%d" % index], dtype=object)),
                    pb_utils.Tensor("INDEX", np.array([index], dtype=np.int32))]))
                index += 1
                time.sleep(0.05)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

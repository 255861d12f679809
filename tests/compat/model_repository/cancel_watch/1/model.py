"""Decoupled. MODE 0: a response every 20 ms (OUT = its index) until the client cancels
(sender.is_cancelled()), then the final flag; it gives up after a minute. MODE 1: one
response, OUT = how many MODE 0 streams saw their cancellation so far."""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

PERIOD_S = 0.02
GIVE_UP_S = 60.0


class TritonPythonModel:
    def initialize(self, args):
        self.cancelled_seen = 0
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            sender = request.get_response_sender()
            if mode == 1:
                with self.lock:
                    seen = self.cancelled_seen
                sender.send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("OUT", np.array([seen], dtype=np.int32))]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                threading.Thread(target=self._stream, args=(request, sender),
                                 daemon=True).start()
        return None

    def _stream(self, request, sender):
        index = 0
        deadline = time.monotonic() + GIVE_UP_S
        while time.monotonic() < deadline:
            if sender.is_cancelled() or request.is_cancelled():
                with self.lock:
                    self.cancelled_seen += 1
                break
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array([index], dtype=np.int32))]))
            index += 1
            time.sleep(PERIOD_S)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

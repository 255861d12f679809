"""Verbose logging turned on at run time (``POST /v2/logging {"log_verbose_level": 1}``)
reaches a running worker: its model's ``log_verbose`` lines are sent from then on, and not
before (qa/L0_backend_python/logging counts them through a server)."""

from __future__ import annotations

import logging

import pytest
from backend_python_helpers import add_sub_request

from naiad import logs

VERBOSE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        pb_utils.Logger.log_verbose("Verbose Msg!")
        out = pb_utils.Tensor("OUTPUT0", np.ones(4, np.float32))
        return [pb_utils.InferenceResponse([out]) for r in requests]
"""


@pytest.mark.parametrize("execution_mode", ["isolated"])
def test_the_verbose_level_reaches_a_running_worker(load, caplog):
    root = logging.getLogger()
    level = root.level
    settings = logs.LogSettings()
    try:
        root.setLevel(logging.INFO)
        instance = load("verbose", VERBOSE_PY)
        caplog.handler.setLevel(logging.DEBUG)
        instance.execute([add_sub_request()])
        assert "Verbose Msg!" not in caplog.messages  # not made while verbose is off
        settings.update({"log_verbose_level": 1})  # what POST /v2/logging does
        instance.execute([add_sub_request()])
        assert caplog.messages.count("Verbose Msg!") == 1
        settings.update({"log_verbose_level": 0})
        instance.execute([add_sub_request()])
        assert caplog.messages.count("Verbose Msg!") == 1
    finally:
        root.setLevel(level)

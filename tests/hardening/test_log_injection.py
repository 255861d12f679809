"""Issue 32, item 8: a newline in a model's name (or any value a client sends) cannot forge
log lines. Before the fix, deploying a model named ``"x\\nE... forged"`` wrote a line of the
server's log that began with the forged prefix; now every value a line shows has its control
characters escaped (``\\n``), while the server's own multi-line output (tracebacks) stays."""

from __future__ import annotations

import json
import logging

import tritonclient.http as httpclient
from hardening_support import wait_until
from zoo import IDENTITY_PY

from naiad.logs import TritonLogFormatter
from naiad.testing import ServerProcess

FORGED = "E1331 00:00:00.000000 1 naiad] forged: every model failed"  # no such date
CONFIG = json.dumps({
    "backend": "python",
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]})


def test_a_model_name_cannot_forge_a_log_line(hardening_server: ServerProcess):
    name = "ok\n" + FORGED + "\r\x1b[2K"
    with httpclient.InferenceServerClient(hardening_server.http_url) as client:
        client.load_model(name, config=CONFIG,
                          files={"file:1/model.py": IDENTITY_PY.encode()})
        try:
            assert client.is_model_ready(name)
        finally:
            client.unload_model(name)
    wait_until(lambda: "forged: every model failed" in hardening_server.log(),
               "the server logs the model's name")
    lines = hardening_server.log().splitlines()
    assert not [line for line in lines if line.startswith(FORGED[:5])]
    assert any("ok\\nE1331 00:00:00.000000 1 naiad] forged" in line for line in lines)
    assert not any("\x1b" in line or "\r" in line for line in lines)


def test_values_are_escaped_and_the_format_is_not():
    record = logging.LogRecord("naiad.models", logging.INFO, __file__, 1,
                               "model '%s' configuration:\n%s", ("a\nb", "c\u2028d"), None)
    text = TritonLogFormatter().format(record)
    assert text.endswith("] model 'a\\nb' configuration:\nc\\u2028d")

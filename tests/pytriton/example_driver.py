"""Runs one PyTriton example as PyTriton's functional tests do (tests/functional/L0_example_*):
the server scripts, then the client; SIGINT to the servers once the client ends. Prints a
JSON report (each script's exit code and output) on its last line.

    python example_driver.py TIMEOUT_S CLIENT SERVER [SERVER...]

Run inside a private network namespace (the examples use PyTriton's fixed default ports):
tests/pytriton/upstream.py starts it under ``unshare -n``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

STOP_TIMEOUT_S = 30.0
# how long an aborted server gets to print its threads' stacks
STACKS_TIMEOUT_S = 10.0


def start(script: str) -> subprocess.Popen[str]:
    # -X faulthandler: SIGABRT (sent to a server that does not stop) prints every thread's
    # stack before it dies, so the report says where it hung
    return subprocess.Popen([sys.executable, "-X", "faulthandler", script],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main() -> None:
    timeout_s = float(sys.argv[1])
    client_script, server_scripts = sys.argv[2], sys.argv[3:]
    servers = [start(script) for script in server_scripts]
    client = start(client_script)
    try:
        client_output, _ = client.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        client.kill()
        client_output, _ = client.communicate()
    report = {"client": {"returncode": client.returncode, "output": client_output}}
    for script, server in reversed(list(zip(server_scripts, servers, strict=True))):
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        try:
            output, _ = server.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            server.send_signal(signal.SIGABRT)
            try:
                output, _ = server.communicate(timeout=STACKS_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                server.kill()
                output, _ = server.communicate()
            output += (f"\n[aborted: did not stop within {STOP_TIMEOUT_S} s after SIGINT;"
                       " the stacks above are where it was]")
        report[script] = {"returncode": server.returncode, "output": output}
    print(json.dumps(report))


if __name__ == "__main__":
    main()

"""Triton's ``tests/utils.py``, bound to naiad: each frontend the tests set up is a
``naiad serve`` process with the OpenAI API on a free port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import openai
import tritonserver

from naiad.testing import ServerProcess, free_port

SECONDS = 1.0


def _naiad(args: list[str], port: int) -> ServerProcess:
    cmd = [sys.executable, "-m", "naiad", "serve", "--http-address", "127.0.0.1",
           "--http-port", "{http_port}", "--grpc-address", "127.0.0.1", "--grpc-port",
           "{grpc_port}", "--metrics-address", "127.0.0.1", "--metrics-port",
           "{metrics_port}", "--allow-openai", "--openai-port", str(port), *args]
    return ServerProcess(cmd, ready_timeout=120 * SECONDS).start()


class _Server:
    """What ``setup_server`` gives: the repository and control settings; each
    ``setup_fastapi_app`` starts a naiad process with them."""

    def __init__(self, model_repository: str, control: tritonserver.ModelControlMode,
                 load_models: list[str] | None) -> None:
        self.args = ["--model-repository", str(model_repository), "--model-control-mode",
                     control.value]
        for name in load_models or []:
            self.args += ["--load-model", name]
        self.processes: list[ServerProcess] = []

    def stop(self) -> None:
        for process in self.processes:
            process.stop()


class _App:
    def __init__(self, url: str) -> None:
        self.url = url


def setup_server(model_repository: str,
                 model_control_mode: tritonserver.ModelControlMode =
                 tritonserver.ModelControlMode.NONE,
                 load_models: list[str] | None = None) -> _Server:
    return _Server(model_repository, model_control_mode, load_models)


def setup_fastapi_app(tokenizer: str, server: _Server, backend: str | None,
                      default_max_tokens: int = 16, tool_call_parser: str | None = None,
                      max_tool_call_parse_bytes: int | None = None) -> _App:
    args = [*list(server.args), "--default-max-tokens", str(default_max_tokens)]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    if backend:
        args += ["--openai-request-format", backend]
    if tool_call_parser:
        args += ["--tool-call-parser", tool_call_parser]
    if max_tool_call_parse_bytes is not None:
        args += ["--max-tool-call-parse-bytes", str(max_tool_call_parse_bytes)]
    port = free_port()
    server.processes.append(_naiad(args, port))
    return _App(f"http://127.0.0.1:{port}")


# Triton's main.py flags -> naiad serve's
_RENAMED = {"--backend": "--openai-request-format", "--host": "--openai-address",
            "--kserve-http-port": "--http-port", "--kserve-grpc-port": "--grpc-port",
            "--tritonserver-log-verbose-level": "--log-verbose"}
_DROPPED = {"--enable-kserve-frontends"}


def _as_triton_prints_it(output: str) -> str:
    """The output of a ``naiad serve`` that did not start, with each usage error also in the
    framing Triton's ``main.py`` and tritonserver print it in (``Error: MESSAGE`` where
    naiad prints ``naiad serve: error: MESSAGE``): the message itself is naiad's."""
    prefix = "naiad serve: error: "
    extra = [f"Error: {line[len(prefix):]}" for line in output.splitlines()
             if line.startswith(prefix)]
    return "\n".join([output, *extra])


class OpenAIServer:
    API_KEY = "EMPTY"

    def __init__(self, cli_args: list[str], *, env_dict: dict[str, str] | None = None) -> None:
        self.host = "127.0.0.1"
        self.port = free_port()
        args = [_RENAMED.get(arg, arg) for arg in cli_args if arg not in _DROPPED]
        env = {**os.environ, **(env_dict or {})}
        cmd = [sys.executable, "-m", "naiad", "serve", "--http-address", "127.0.0.1",
               "--http-port", "{http_port}", "--grpc-address", "127.0.0.1",
               "--grpc-port", "{grpc_port}", "--metrics-address", "127.0.0.1",
               "--metrics-port", "{metrics_port}", "--allow-openai", "--openai-port",
               str(self.port), *args]
        self.process = ServerProcess(cmd, env=env, ready_timeout=120 * SECONDS)
        try:
            self.process.start()  # a server that exits raises RuntimeError with its output
        except RuntimeError as exc:
            raise RuntimeError(_as_triton_prints_it(str(exc))) from None

    def __enter__(self) -> OpenAIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.stop()

    @property
    def url_root(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url_for(self, *parts: str) -> str:
        return self.url_root + "/" + "/".join(parts)

    def get_client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url_for("v1"), api_key=self.API_KEY)

    def get_async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url_for("v1"), api_key=self.API_KEY)


__all__ = ["OpenAIServer", "Path", "setup_fastapi_app", "setup_server", "subprocess"]

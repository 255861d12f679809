"""Fixtures: one ``naiad serve`` with the OpenAI frontend over Triton's test models and the
tiny LM, shared by the module tests (starting Python models that import transformers is the
slow part)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("naiad_frontend_openai", reason="naiad-frontend-openai is not installed")
pytest.importorskip("openai", reason="the openai client is not installed")

import openai

from naiad.testing import ServerProcess, naiad_server
from tests.plugins.frontend_openai.openai_models import (
    UPSTREAM,
    build_tokenizer,
    write_fake_vllm_backend,
    write_lm_repository,
    write_repository,
)


@dataclass
class OpenAIServer:
    process: ServerProcess
    port: int
    repository: Path
    #: the clients handed out, closed with the server (their connection pools)
    clients: list = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **kwargs: object) -> openai.OpenAI:
        client = openai.OpenAI(base_url=f"{self.base_url}/v1", api_key="EMPTY", **kwargs)
        self.clients.append(client)
        return client


def serve_openai(repository: Path, *args: str, env: dict[str, str] | None = None
                 ) -> Iterator[OpenAIServer]:
    """``naiad serve`` over ``repository`` with the OpenAI API on a free port (the one
    naiad.testing gives every test server)."""
    with naiad_server("--model-repository", str(repository), "--allow-openai", *args,
                      env=env, ready_timeout=120) as process:
        server = OpenAIServer(process, process.openai_port, repository)
        try:
            yield server
        finally:
            for client in server.clients:
                client.close()


@pytest.fixture(scope="session")
def upstream_tests() -> Path:
    if not UPSTREAM.is_dir():
        pytest.skip(f"Triton's OpenAI tests are not at {UPSTREAM}")
    return UPSTREAM


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tokenizer (chat template included), trained here."""
    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def openai_server(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path,
                  upstream_tests: Path) -> Iterator[OpenAIServer]:
    """Triton's CPU test models and scripted_llm; --tokenizer the one trained here, the
    llama3 tool-call parser."""
    repository = write_repository(tmp_path_factory.mktemp("openai_models"))
    backends = write_fake_vllm_backend(tmp_path_factory.mktemp("backends"))
    yield from serve_openai(repository, "--tokenizer", str(tokenizer_dir),
                            "--tool-call-parser", "llama3", "--backend-directory", str(backends))


@pytest.fixture(scope="session")
def lm_server(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path
              ) -> Iterator[OpenAIServer]:
    """The tiny Hugging Face LM (decoupled, token by token) and its embeddings; each model
    folder carries the tokenizer (no --tokenizer)."""
    pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("transformers", reason="transformers is not installed")
    repository = write_lm_repository(tmp_path_factory.mktemp("lm_models"), tokenizer_dir)
    yield from serve_openai(repository, env={"TINY_LM_STEP_DELAY": "0.02"})

"""Model management through the OpenAI API, answered as Triton's frontend answers it
(``python/openai/tests/test_model_management.py``; the whole file runs in
``test_upstream_openai.py -m long``): concurrent loads of one model, names that are no
model folder, a request for a model that is not loaded. Triton's ``mock_llm`` and
``identity_py`` under ``--model-control-mode=explicit``."""

from __future__ import annotations

import concurrent.futures
import http.client
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from naiad.testing import free_port
from tests.plugins.frontend_openai.conftest import OpenAIServer, serve_openai

SECONDS = 1.0


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory, upstream_tests: Path) -> Path:
    repository = tmp_path_factory.mktemp("management_models")
    for name in ("mock_llm", "identity_py"):
        shutil.copytree(upstream_tests / "test_models" / name, repository / name)
    return repository


@pytest.fixture(scope="module")
def explicit_server(repository: Path, tokenizer_dir: Path) -> Iterator[OpenAIServer]:
    yield from serve_openai(repository, "--model-control-mode", "explicit", "--tokenizer",
                            str(tokenizer_dir))


def post(server: OpenAIServer, path: str) -> requests.Response:
    return requests.post(f"{server.base_url}{path}", timeout=60 * SECONDS)


def test_of_concurrent_loads_of_one_model_one_loads_it(explicit_server: OpenAIServer) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: post(explicit_server, "/v1/models/mock_llm/load"),
                                range(4)))
    try:
        assert sorted(a.status_code for a in answers) == [200, 400, 400, 400]
        refused = [a.json()["detail"] for a in answers if a.status_code == 400]
        assert refused == ["Model 'mock_llm' is already loaded"] * 3
    finally:
        assert post(explicit_server, "/v1/models/mock_llm/unload").status_code == 200


def test_a_request_for_a_model_not_loaded_is_a_400_its_card_a_404(
        explicit_server: OpenAIServer) -> None:
    body = {"model": "identity_py", "prompt": "hi", "max_tokens": 2}
    answer = requests.post(f"{explicit_server.base_url}/v1/completions", json=body,
                           timeout=60 * SECONDS)
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"] == "Unknown model: identity_py"
    assert answer.json()["error"]["code"] == "model_not_found"
    assert requests.get(f"{explicit_server.base_url}/v1/models/identity_py",
                        timeout=10 * SECONDS).status_code == 404


@pytest.mark.parametrize(("path_name", "status"), [
    ("..", 400), ("%20%20", 400), ("%0A%09", 400), ("model/..", 404), ("model/", 404)])
def test_a_name_that_is_no_model_folder_is_refused(explicit_server: OpenAIServer,
                                                   path_name: str, status: int) -> None:
    for verb in ("load", "unload"):
        connection = http.client.HTTPConnection("127.0.0.1", explicit_server.port, timeout=30)
        try:
            connection.request("POST", f"/v1/models/{path_name}/{verb}")
            answer = connection.getresponse()
            text = answer.read().decode()
        finally:
            connection.close()
        assert answer.status == status, text
        if status == 400:
            assert "Invalid model name" in text, text


def test_a_start_up_model_outside_the_repository_is_not_found(repository: Path) -> None:
    """Triton follows ``--load-model ../../etc`` to /etc (and says what it found there);
    naiad looks only at the repository's folders."""
    done = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--model-repository", str(repository),
         "--model-control-mode=explicit", "--load-model", "../../../../../etc",
         "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
         f"--http-port={free_port()}", f"--grpc-port={free_port()}",
         f"--metrics-port={free_port()}", "--allow-openai=false"],
        capture_output=True, text=True, timeout=60 * SECONDS)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert ("failed to poll model '../../../../../etc': model not found in any model "
            "repository") in output, output

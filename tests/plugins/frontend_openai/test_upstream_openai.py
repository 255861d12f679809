"""Triton's own OpenAI frontend tests (``python/openai/tests``, ../shared/upstream), run
unmodified against naiad: the CPU-runnable ones, on Triton's ``mock_llm`` /
``tool_stream_py`` models. ``upstream_shims/`` binds what they import from Triton to naiad
(README there). Left out, with the reason: what needs a real LLM on vLLM or TensorRT-LLM
(sampling, logprobs, LoRA, embeddings, model answers), and the unit test of Triton's own
``FastApiFrontend`` class (naiad's start-up log names the restricted APIs and headers, never
the values: ``naiad_frontend_openai.frontend``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugins.frontend_openai.openai_models import UPSTREAM

SHIMS = Path(__file__).parent / "upstream_shims"

#: (test file, pytest -k expression: the cases that run on mock_llm without an LLM)
CASES = {
    "observability": ("test_observability.py", ""),
    "request_size": ("test_request_size.py", ""),
    "restricted_apis": ("test_openai_restricted_apis.py",
                        "not test_startup_log_does_not_leak"),
    "tool_parse_limit": ("test_tool_calling.py", "TestStreamingToolParseLimit"),
    "completions": ("test_completions.py",
                    "empty_request or no_model or no_prompt or empty_prompt or "
                    "multiple_choices or invalid_sampling or logprobs_validation"),
    "chat_completions": ("test_chat_completions.py",
                         "no_message or empty_message or multiple_choices or "
                         "invalid_sampling or no_tokenizer or top_logprobs_without"),
    # 24 of its 25 cases. Left out: test_explicit_mode_load_invalid_model_name_error, whose
    # texts describe what Triton finds when it follows `--load-model ../../../etc` out of
    # the repository ("at least one version must be available under the version policy"
    # of /etc, "Poll failed for model directory" of /etc/passwd); naiad reads no folder
    # outside its repositories, so such a name is "model not found" there
    # (test_openai_model_management.py checks that).
    "model_management": ("test_model_management.py",
                         "not test_explicit_mode_load_invalid_model_name_error"),
}
#: what needs more than the default run's time (several servers each; observability's
#: checks are in test_openai_frontend.py too)
LONG = {"restricted_apis", "completions", "chat_completions", "tool_parse_limit",
        "observability", "model_management"}


@pytest.fixture(scope="module")
def upstream_copy(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path,
                  upstream_tests: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("triton_openai")
    shutil.copytree(UPSTREAM, root / "tests")
    shutil.copy(SHIMS / "utils.py", root / "tests" / "utils.py")
    shutil.copytree(SHIMS / "openai_frontend", root / "openai_frontend")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SHIMS / "site"), str(root),
                                                   str(root / "openai_frontend")]),
           "TEST_BACKEND": "tensorrtllm", "TEST_MODEL": "mock_llm",
           "TEST_MODEL_REPOSITORY": str(root / "tests" / "test_models"),
           "TEST_TOKENIZER": str(tokenizer_dir), "TEST_TOOL_CALL_PARSER": "mistral"}
    return root, env


@pytest.mark.parametrize("case", [pytest.param(name, marks=pytest.mark.long)
                                  if name in LONG else name for name in CASES])
def test_triton_openai_tests_pass_on_naiad(case: str,
                                           upstream_copy: tuple[Path, dict[str, str]]) -> None:
    root, env = upstream_copy
    test_file, selection = CASES[case]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", "--rootdir", str(root), f"tests/{test_file}"]
    if selection:
        command += ["-k", selection]
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and " failed" not in result.stdout, result.stdout[-3000:]

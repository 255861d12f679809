"""What naiad convert does with a model that does not convert cleanly, and with inputs that
do not fit: a format that fails is reported with its reason and never chosen, a run with no
correct format writes no repository, each user error is one line with its exit status."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from convert_helpers import QUICK, convert, entry, report, statuses
from naiad_convert.cli import main
from naiad_convert.errors import EXIT_NO_FORMAT, EXIT_OK, EXIT_USAGE
from tiny_models import Branchy

BRANCHY_FORMATS = "torchscript-trace,torchscript-script,torch-export,onnx"


def branchy_samples(path: Path) -> Path:
    """Rows that take both branches: v and -v scaled until their sums differ in sign."""
    model = Branchy().eval()
    v = torch.linspace(-1.0, 2.0, 4)
    rows = torch.stack([100 * v, -100 * v])
    with torch.inference_mode():
        signs = [bool(model.linear(r).sum() > 0) for r in rows]
    assert signs[0] != signs[1], "the samples must take both branches"
    np.savez(path, x=rows.numpy())
    return path


@pytest.fixture(scope="module")
def branchy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], int]:
    folder = tmp_path_factory.mktemp("branchy")
    args = [entry("Branchy"), "--samples", str(branchy_samples(folder / "x.npz")),
            "--formats", BRANCHY_FORMATS, "-o", str(folder / "out"), *QUICK]
    return folder / "out", args, main(args)


def test_a_broken_export_is_reported_and_another_format_chosen(branchy_run, capsys):
    out, _, status = branchy_run
    assert status == EXIT_OK
    data = report(out)
    found = statuses(data)
    assert found["torchscript-trace"] == "check-failed"   # one branch recorded
    assert found["torch-export"] == "export-failed"       # the data-dependent branch
    assert found["onnx"] in ("check-failed", "export-failed")
    assert found["torchscript-script"] == "passed"
    assert data["winner"] == "torchscript-script"
    reasons = {f["name"]: f["reason"] for f in data["formats"]}
    assert "output 'OUTPUT__0'" in reasons["torchscript-trace"]
    assert "atol" in reasons["torchscript-trace"]
    assert reasons["torch-export"] and "\n" not in reasons["torch-export"]
    trace = next(f for f in data["formats"] if f["name"] == "torchscript-trace")
    assert trace["warnings"], "tracing warns that the branch was recorded"
    assert trace["checks"][0]["max_abs_error"] > 1.0 and not trace["checks"][0]["passed"]
    assert (out / "repository" / "Branchy" / "1" / "model.pt").is_file()


def test_an_op_the_onnx_exporter_cannot_handle_fails_that_format_only(no_onnx_run):
    data = report(no_onnx_run)
    assert statuses(data) == {"torchscript-script": "passed", "onnx": "export-failed"}
    onnx = next(f for f in data["formats"] if f["name"] == "onnx")
    assert "linalg_eigvals" in onnx["reason"] and "\n" not in onnx["reason"]
    assert data["winner"] == "torchscript-script"
    assert (no_onnx_run / "repository" / "no_onnx" / "1" / "model.pt").is_file()


def test_a_second_run_resumes_from_the_progress_file(branchy_run, capsys):
    out, args, _ = branchy_run
    before = (out / "formats" / "torchscript-script" / "model.pt").stat().st_mtime_ns
    capsys.readouterr()
    assert main(args) == EXIT_OK
    printed = capsys.readouterr().out
    assert printed.count("(kept from the previous run)") == 4
    assert "exporting" not in printed and "timing" not in printed
    assert (out / "formats" / "torchscript-script" / "model.pt").stat().st_mtime_ns == before


def test_a_folder_of_another_run_is_refused(branchy_run, capsys):
    _, args, _ = branchy_run
    assert main([*args, "--atol", "0.5"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "holds a run of another command (it differs in tolerance)" in err


def test_a_chosen_format_that_failed_ends_the_run(branchy_run, capsys):
    _, args, _ = branchy_run
    assert main([*args, "--format", "torchscript-trace"]) == EXIT_NO_FORMAT
    err = capsys.readouterr().err.strip()
    assert err.startswith("naiad convert: --format torchscript-trace: check-failed: output")


def test_no_format_within_the_tolerance_writes_no_repository(tmp_path, capsys):
    args = [entry("Branchy"), "--samples", str(branchy_samples(tmp_path / "x.npz")),
            "--formats", "torchscript-trace", "-o", str(tmp_path / "out"), *QUICK]
    assert main(args) == EXIT_NO_FORMAT
    assert "no format passed" in capsys.readouterr().err
    assert not (tmp_path / "out" / "repository").exists()
    assert report(tmp_path / "out")["winner"] is None


@pytest.mark.parametrize(("extra", "expected"), [
    (["--input", "x:FP32:batch,15"], "does not run on the sample inputs (x float32 [1, 15])"),
    (["--input", "x:FP32:16"], "input 'x' has no batch axis"),
    (["--input", "x:FP32:batch,16", "--input", "y:FP32:batch,2"],
     "forward() takes 1 input(s) (x), the samples give 2 (x, y)"),
    (["--input", "x:FP99:batch,16"], "datatype 'FP99' is not one of"),
    ([], "no sample inputs"),
])
def test_inputs_that_do_not_fit_the_model_are_one_line(tmp_path, capsys, extra, expected):
    status = main([entry("MLP"), "-o", str(tmp_path / "out"), *extra, *QUICK])
    err = capsys.readouterr().err.strip()
    assert status == EXIT_USAGE, err
    assert err.count("\n") == 0 and expected in err, err


def test_a_model_that_cannot_be_imported_is_one_line(tmp_path, capsys):
    status = main([f"{entry('MLP')}_missing", "--input", "x:FP32:batch,16",
                   "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert status == 1 and err.count("\n") == 0 and "has no attribute 'MLP_missing'" in err


def test_naiad_convert_is_a_naiad_command():
    """The naiad.commands entry point: ``naiad convert`` is this tool."""
    done = convert("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: naiad convert")
    assert "3 no format passed" in " ".join(done.stdout.split())

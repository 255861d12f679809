"""naiad.models.staging: the private folders of models deployed through the load API, and
the checks that keep a request's file names inside them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from naiad.errors import InferenceServerError, Status
from naiad.models.staging import ModelStaging, _write, checked_files, relative_path


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> content)."""
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("key, parts", [
    ("file:1/model.onnx", ("1", "model.onnx")),
    ("file:config.pbtxt", ("config.pbtxt",)),
    ("file:1/sub/dir/weights.bin", ("1", "sub", "dir", "weights.bin")),
    ("file:1/..data", ("1", "..data")),  # a name that starts with dots is still a name
    # Empty and "." components are dropped, as Triton normalizes them.
    ("file:./1/model.onnx", ("1", "model.onnx")),
    ("file:1//./model.onnx", ("1", "model.onnx")),
])
def test_names_inside_the_model_folder_are_accepted(key: str, parts: tuple[str, ...]) -> None:
    assert relative_path("m", key) == parts


@pytest.mark.parametrize("key, problem", [
    ("file:", "names no file"),
    ("file:../escape", "leaves the model folder"),
    ("file:1/../../escape", "leaves the model folder"),
    ("file:1/..", "leaves the model folder"),
    ("file:/etc/passwd", "is an absolute path"),
    ("file://host/x", "is an absolute path"),
    ("file:1/a\0b", "contains a NUL character"),
    ("file:1\\model.onnx", "contains a backslash"),
    ("file:1/", "names a folder, not a file"),
    ("file:1/.", "names a folder, not a file"),
    ("file:./", "names no file"),
    ("file:./..", "leaves the model folder"),
])
def test_names_that_leave_the_folder_or_name_nothing_are_refused(key: str,
                                                                  problem: str) -> None:
    with pytest.raises(InferenceServerError) as caught:
        relative_path("mymodel", key)
    assert caught.value.status is Status.INVALID_ARG
    message = caught.value.message
    assert "mymodel" in message and problem in message, message
    assert ascii(key)[1:-1] in message or key in message, message


def test_a_file_used_as_a_folder_by_another_is_refused() -> None:
    with pytest.raises(InferenceServerError, match="use as a folder"):
        checked_files("m", {"file:1/model.py": b"a", "file:1/model.py/x": b"b"}, 100)


def test_two_names_for_the_same_file_are_refused() -> None:
    with pytest.raises(InferenceServerError, match="name the same file"):
        checked_files("m", {"file:1/model.py": b"a", "file:./1//model.py": b"b"}, 100)


def test_the_total_size_is_bounded() -> None:
    files = {"file:1/a": b"x" * 60, "file:1/b": b"y" * 41}
    assert len(checked_files("m", files, 101)) == 2
    with pytest.raises(InferenceServerError) as caught:
        checked_files("m", files, 100)
    assert caught.value.status is Status.RESOURCE_EXHAUSTED
    assert "101 bytes" in caught.value.message
    assert "--load-files-max-size" in caught.value.message
    with pytest.raises(InferenceServerError, match="does not accept model files"):
        checked_files("m", {"file:1/empty": b""}, 0)


def test_stage_writes_the_files_into_a_private_model_folder(tmp_path: Path) -> None:
    staging = ModelStaging(str(tmp_path / "staging"), max_bytes=1000)
    folder = staging.stage("mymodel", {"file:1/model.py": b"print()",
                                       "file:config.pbtxt": b"name: 'x'"})
    assert folder.name == "mymodel"
    root = staging.root
    assert root is not None and folder.parent.parent == root
    assert root.parent == tmp_path / "staging"
    assert _tree(folder) == {"1/model.py": b"print()", "config.pbtxt": b"name: 'x'"}
    assert os.stat(root).st_mode & 0o777 == 0o700
    # Each load gets a folder of its own.
    second = staging.stage("mymodel", {"file:1/model.py": b"other"})
    assert second != folder and _tree(folder)["1/model.py"] == b"print()"


def test_nothing_is_written_when_one_name_is_bad(tmp_path: Path) -> None:
    staging = ModelStaging(str(tmp_path / "staging"))
    with pytest.raises(InferenceServerError, match="leaves the model folder"):
        staging.stage("m", {"file:1/model.py": b"ok", "file:../../../escape": b"bad"})
    assert _tree(tmp_path) == {}


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\\b", "a\0b"])
def test_a_model_name_that_cannot_name_a_folder_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(InferenceServerError, match="can name a folder"):
        ModelStaging(str(tmp_path)).stage(name, {"file:1/model.py": b"x"})
    assert _tree(tmp_path) == {}


def test_a_symbolic_link_in_the_folder_does_not_redirect_a_write(tmp_path: Path) -> None:
    """The folder is the server's own, so no link is ever there; if one were (another process
    of the same user), the write fails instead of following it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "1").symlink_to(outside)
    (folder / "config.pbtxt").symlink_to(outside / "target")
    with pytest.raises(OSError):
        _write(folder, ("1", "model.py"), b"x")
    with pytest.raises(OSError):
        _write(folder, ("config.pbtxt",), b"x")
    assert list(outside.iterdir()) == []


def test_folders_are_removed_once_no_load_and_no_version_uses_them(tmp_path: Path) -> None:
    staging = ModelStaging(str(tmp_path))
    serving = staging.stage("a", {"file:1/model.py": b"a"})
    loading = staging.stage("b", {"file:1/model.py": b"b"})
    failed = staging.stage("c", {"file:1/model.py": b"c"})
    staging.done(serving)
    staging.done(failed)
    # "b" still loads: kept whatever serves.
    unused = staging.unused([serving])
    assert unused == [failed]
    staging.remove(unused)
    assert not failed.parent.exists() and serving.exists() and loading.exists()
    staging.done(loading)
    assert sorted(staging.unused([])) == sorted([serving, loading])


def test_close_removes_the_staging_folder(tmp_path: Path) -> None:
    staging = ModelStaging(str(tmp_path / "nested" / "dir"))
    assert staging.root is None  # nothing made before a load needs it
    staging.stage("a", {"file:1/model.py": b"a"})
    root = staging.root
    assert root is not None and root.exists()
    staging.close()
    assert not root.exists() and (tmp_path / "nested" / "dir").exists()


def test_a_file_name_too_long_to_write_is_refused_naming_its_parameter(tmp_path: Path
                                                                       ) -> None:
    # Refused before anything is written (issue 32 item 8), with the limit and no path.
    staging = ModelStaging(str(tmp_path))
    with pytest.raises(InferenceServerError) as caught:
        staging.stage("m", {"file:1/" + "x" * 300: b"a"})
    assert caught.value.status is Status.INVALID_ARG
    assert "'file:1/xxx" in caught.value.message
    assert "longer than 255 bytes" in caught.value.message
    assert staging.root is None


def test_the_flags_reach_the_server_options() -> None:
    from naiad.cli import _check, _options, build_parser
    from naiad.models.staging import DEFAULT_MAX_BYTES

    parse = build_parser().parse_args
    options, _ = _options(parse(["serve", "--model-repository", "a"]))
    assert (options.load_files_directory, options.load_files_max_size) == ("",
                                                                           DEFAULT_MAX_BYTES)
    args = parse(["serve", "--model-repository", "a", "--load-files-directory", "/srv/x",
                  "--load-files-max-size", "0"])
    options, _ = _options(args)
    assert (options.load_files_directory, options.load_files_max_size) == ("/srv/x", 0)
    assert _check(args) == []
    bad = parse(["serve", "--model-repository", "a", "--load-files-max-size", "-1"])
    assert "--load-files-max-size must not be negative" in _check(bad)

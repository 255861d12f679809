"""Unit tests of poll mode's change detection (naiad.repository.fingerprint) and of the
poller that applies the changes (naiad.models.poller), without a server."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from naiad.models.manager import ModelManager
from naiad.models.poller import RepositoryPoller
from naiad.models.records import LoadOptions
from naiad.plugins import PluginManager
from naiad.repository.fingerprint import compare, model_fingerprint, scan_repositories


def write(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def touch_later(path: Path) -> None:
    """Give ``path`` a modification time surely different from the one it has."""
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "repo" / "m"
    write(folder / "config.pbtxt", 'name: "m"')
    write(folder / "1" / "model.py", "one")
    write(folder / "labels.txt", "a\nb\n")
    return folder


def test_a_scan_of_an_unchanged_folder_is_equal(model):
    assert model_fingerprint(model) == model_fingerprint(model)


@pytest.mark.parametrize("change", [
    "rewrite_same_size", "resize", "add_file", "remove_file", "add_empty_version_folder",
    "rename_file",
])
def test_every_kind_of_change_alters_the_fingerprint(model, change):
    before = model_fingerprint(model)
    target = model / "1" / "model.py"
    if change == "rewrite_same_size":
        target.write_text("two")
        touch_later(target)  # same size: only the mtime tells
    elif change == "resize":
        target.write_text("a longer body")
    elif change == "add_file":
        write(model / "1" / "weights.bin")
    elif change == "remove_file":
        (model / "labels.txt").unlink()
    elif change == "add_empty_version_folder":
        (model / "2").mkdir()
    elif change == "rename_file":
        target.rename(model / "1" / "other.py")
    assert model_fingerprint(model) != before


def test_bytecode_and_hidden_files_are_not_changes(model):
    """A Python model's import writes __pycache__ into its folder: counting it would reload
    the model at every poll. Editor swap files are ignored too."""
    before = model_fingerprint(model)
    write(model / "1" / "__pycache__" / "model.cpython-311.pyc", "bytecode")
    write(model / ".config.pbtxt.swp", "swap")
    write(model / "1" / ".hidden", "h")
    assert model_fingerprint(model) == before


def test_a_vanished_folder_has_an_empty_fingerprint(tmp_path):
    assert model_fingerprint(tmp_path / "missing").parts == {}


def test_same_version_files_looks_at_that_version_and_shared_files_only(model):
    write(model / "2" / "model.py", "two")
    before = model_fingerprint(model)

    write(model / "2" / "model.py", "version two, rewritten")
    after = model_fingerprint(model)
    assert before.same_version_files(after, 1)
    assert not before.same_version_files(after, 2)

    # the configuration files are judged by the configuration they hold, not by the files
    write(model / "config.pbtxt", 'name: "m"  # a comment')
    write(model / "configs" / "fast.pbtxt", 'name: "m"')
    assert before.same_version_files(model_fingerprint(model), 1)

    # a file every version shares (labels) touches every version
    write(model / "labels.txt", "a\nb\nc\n")
    assert not before.same_version_files(model_fingerprint(model), 1)


def test_a_version_that_appears_or_disappears_is_not_the_same(model):
    before = model_fingerprint(model)
    write(model / "3" / "model.py")
    after = model_fingerprint(model)
    assert not before.same_version_files(after, 3)
    assert not after.same_version_files(before, 3)


def test_scan_and_compare_sort_models_into_added_removed_and_modified(tmp_path):
    repo = tmp_path / "repo"
    for name in ("keep", "change", "drop"):
        write(repo / name / "1" / "model.py", name)
    before = scan_repositories([repo])
    assert sorted(before) == ["change", "drop", "keep"]

    write(repo / "change" / "config.pbtxt", "max_batch_size: 4")
    write(repo / "new" / "1" / "model.py")
    for path in sorted((repo / "drop").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (repo / "drop").rmdir()
    changes = compare(before, scan_repositories([repo]))
    assert (changes.added, changes.removed, changes.modified) == (["new"], ["drop"],
                                                                  ["change"])
    assert changes
    assert not compare(before, before)


def test_a_name_in_two_repositories_is_left_out_and_a_missing_repository_is_empty(tmp_path):
    write(tmp_path / "a" / "twice" / "1" / "model.py")
    write(tmp_path / "b" / "twice" / "1" / "model.py")
    write(tmp_path / "b" / "once" / "1" / "model.py")
    found = scan_repositories([tmp_path / "a", tmp_path / "b", tmp_path / "gone"])
    assert sorted(found) == ["once"]


class FakeManager:
    """Records what the poller asks of the model manager."""

    def __init__(self, repositories: list[Path]) -> None:
        self.repositories = repositories
        self.calls: list[tuple[str, object]] = []
        self.failing: set[str] = set()

    def sync_mirrors(self) -> None:
        """No remote repositories here: nothing to mirror."""

    async def unload(self, name: str) -> None:
        self.calls.append(("unload", name))

    async def load_many(self, names: list[str], *, reuse_unchanged: bool = False) -> dict:
        self.calls.append(("load_many", (sorted(names), reuse_unchanged)))
        return {name: "deliberate failure" for name in names if name in self.failing}


async def test_poll_once_unloads_removed_and_loads_added_and_modified_models(tmp_path):
    repo = tmp_path / "repo"
    write(repo / "a" / "1" / "model.py")
    write(repo / "b" / "1" / "model.py")
    manager = FakeManager([repo])
    changed = []
    poller = RepositoryPoller(manager, 1.0, after_change=lambda: changed.append(True))
    await poller.baseline()
    assert not await poller.poll_once()
    assert manager.calls == [] and changed == []

    write(repo / "a" / "2" / "model.py")
    write(repo / "c" / "1" / "model.py")
    (repo / "b" / "1" / "model.py").unlink()
    (repo / "b" / "1").rmdir()
    (repo / "b").rmdir()
    await poller.poll_once()
    assert manager.calls == [("unload", "b"), ("load_many", (["a", "c"], True))]
    assert changed == [True]
    # the next poll sees nothing new: a model is not loaded again and again
    await poller.poll_once()
    assert len(manager.calls) == 2


async def test_a_model_that_failed_to_load_is_tried_again_at_every_poll(tmp_path):
    """As Triton: unchanged or not, until it loads (or its folder goes)."""
    repo = tmp_path / "repo"
    write(repo / "ok" / "1" / "model.py")
    manager = FakeManager([repo])
    poller = RepositoryPoller(manager, 1.0)
    await poller.baseline()
    poller.retry(["broken_at_start"])  # failed at start-up, folder gone meanwhile
    write(repo / "bad" / "1" / "model.py")
    manager.failing = {"bad"}
    await poller.poll_once()
    await poller.poll_once()
    assert manager.calls == [("load_many", (["bad"], True))] * 2
    manager.failing = set()
    await poller.poll_once()  # loads now
    await poller.poll_once()  # and is left alone
    assert manager.calls == [("load_many", (["bad"], True))] * 3


async def test_a_poll_cut_short_by_an_error_is_done_again(tmp_path):
    repo = tmp_path / "repo"
    write(repo / "a" / "1" / "model.py")
    manager = FakeManager([repo])
    poller = RepositoryPoller(manager, 1.0)
    await poller.baseline()
    write(repo / "a" / "config.pbtxt", "max_batch_size: 2")
    original = manager.load_many

    async def broken(names, *, reuse_unchanged=False):
        raise RuntimeError("deliberate failure in load_many")

    manager.load_many = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await poller.poll_once()
    manager.load_many = original  # type: ignore[method-assign]
    await poller.poll_once()
    assert manager.calls == [("load_many", (["a"], True))]


async def test_a_failing_poll_is_logged_and_polling_goes_on(tmp_path, caplog):
    repo = tmp_path / "repo"
    repo.mkdir()
    manager = FakeManager([repo])
    poller = RepositoryPoller(manager, 0.01)
    polls = 0
    original = poller.poll_once

    async def flaky():
        nonlocal polls
        polls += 1
        if polls == 1:
            raise RuntimeError("deliberate failure in a poll")
        return await original()

    poller.poll_once = flaky  # type: ignore[method-assign]
    await poller.baseline()
    poller.start()
    for _ in range(500):  # bounded wait for the second poll, not a speed check
        if polls >= 2:
            break
        await asyncio.sleep(0.01)
    await poller.stop()
    assert polls >= 2
    assert "deliberate failure in a poll" in caplog.text


async def test_stop_lets_a_poll_under_way_finish(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    manager = FakeManager([repo])
    poller = RepositoryPoller(manager, 0.0)
    started, release, finished = asyncio.Event(), asyncio.Event(), []

    async def slow_poll():
        started.set()
        await release.wait()
        finished.append(True)

    poller.poll_once = slow_poll  # type: ignore[method-assign,assignment]
    poller.start()
    await asyncio.wait_for(started.wait(), 10)
    stopping = asyncio.ensure_future(poller.stop())
    await asyncio.wait({stopping}, timeout=0.2)
    assert not stopping.done()  # waits for the poll instead of cutting it
    release.set()
    await asyncio.wait_for(stopping, 10)
    assert finished == [True]


def test_an_ensemble_does_not_wait_for_a_load_that_waits_for_it():
    """Ensembles loading at the same time wait for the composing models others are loading,
    unless that wait would close a circle (then they would wait for ever)."""
    manager = ModelManager([], PluginManager(), LoadOptions())
    manager._waiting = {"outer": "inner", "inner": "leaf"}
    assert manager._closes_circle("leaf", "outer")  # leaf -> outer -> inner -> leaf
    assert manager._closes_circle("inner", "outer")
    assert manager._closes_circle("self", "self")
    assert not manager._closes_circle("other", "outer")
    assert not manager._closes_circle("outer", "unrelated")

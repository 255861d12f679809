"""Remote repositories mirrored into local folders: the content-addressed store and the
mirror, against an in-memory repository that counts its downloads."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from naiad.errors import InferenceServerError, unavailable
from naiad.repository.blobs import BlobStore
from naiad.repository.mirror import RepositoryMirror
from naiad.types import Repository, RepositoryFile

URI = "mem://bucket/models"


class MemoryRepository(Repository):
    """Objects in a dict; the tag is a counter bumped at every write, like a generation."""

    def __init__(self, objects: dict[str, bytes] | None = None) -> None:
        self.objects: dict[str, tuple[bytes, int]] = {}
        self.generation = 0
        self.downloads: list[str] = []
        self.listings = 0
        self.down = False
        self.broken: set[str] = set()
        self.on_list = lambda: None  # what happens as each listing is taken
        self._lock = threading.Lock()
        for path, data in (objects or {}).items():
            self.put(path, data)

    def put(self, path: str, data: bytes) -> None:
        self.generation += 1
        self.objects[path] = (data, self.generation)

    def list_files(self, prefix: str = "") -> list[RepositoryFile]:
        if self.down:
            raise unavailable(f"model repository '{URI}' cannot be reached: refused")
        self.listings += 1
        self.on_list()  # an upload going on while the store is listed
        return [RepositoryFile(path, len(data), str(generation))
                for path, (data, generation) in sorted(self.objects.items())
                if path.startswith(prefix)]

    def download(self, file: RepositoryFile, destination: Path) -> None:
        if file.path in self.broken:
            raise unavailable(f"{URI}/{file.path}: access denied")
        with self._lock:
            self.downloads.append(file.path)
        destination.write_bytes(self.objects[file.path][0])


def add_sub(version: int = 1, body: bytes = b"weights") -> dict[str, bytes]:
    return {"add_sub/config.pbtxt": b'name: "add_sub"\n',
            f"add_sub/{version}/model.py": body}


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "cache", max_bytes=1 << 20)


def mirror_of(repository: Repository, store: BlobStore, tmp_path: Path) -> RepositoryMirror:
    return RepositoryMirror(URI, repository, store, tmp_path / "mirror", download_threads=4)


def test_a_repository_is_laid_out_as_model_folders(store: BlobStore, tmp_path: Path) -> None:
    repository = MemoryRepository({**add_sub(), "mul/1/model.onnx": b"onnx",
                                   "README.md": b"not a model", ".hidden/x": b"no"})
    mirror = mirror_of(repository, store, tmp_path)
    mirror.sync(settle_s=0.01)
    folder = tmp_path / "mirror"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "add_sub", "mul"]
    assert (folder / "add_sub" / "1" / "model.py").read_bytes() == b"weights"
    assert (folder / "mul" / "1" / "model.onnx").read_bytes() == b"onnx"
    # a hard link to the stored blob: its size counts once
    assert (folder / "mul" / "1" / "model.onnx").stat().st_nlink == 2


def test_nothing_unchanged_is_downloaded_again_not_even_after_a_restart(
        store: BlobStore, tmp_path: Path) -> None:
    repository = MemoryRepository(add_sub())
    mirror_of(repository, store, tmp_path).sync(settle_s=0.01)
    assert len(repository.downloads) == 2
    mirror = mirror_of(repository, store, tmp_path)
    mirror.sync(settle_s=0.01)  # a restart: a new mirror over the same store
    mirror.sync()  # a poll
    assert len(repository.downloads) == 2
    restarted = mirror_of(repository, BlobStore(store.root, store.max_bytes), tmp_path)
    restarted.sync(settle_s=0.01)  # a new process reads the store's index
    assert len(repository.downloads) == 2


def test_the_same_content_under_two_names_is_stored_once(store: BlobStore,
                                                         tmp_path: Path) -> None:
    repository = MemoryRepository({"a/1/w": b"same", "b/1/w": b"same"})
    mirror_of(repository, store, tmp_path).sync(settle_s=0.01)
    assert len(list((store.root / "blobs").glob("*/*"))) == 1


def test_a_model_still_being_uploaded_is_not_laid_out(store: BlobStore,
                                                      tmp_path: Path) -> None:
    repository = MemoryRepository(add_sub())
    mirror = mirror_of(repository, store, tmp_path)
    mirror.sync(settle_s=0.01)
    uploads = iter([b"part", b"partial"])
    repository.on_list = lambda: repository.put("add_sub/2/model.py", next(uploads))
    mirror.sync(settle_s=0.01)  # the file changes between the two listings
    assert not (tmp_path / "mirror" / "add_sub" / "2").exists()
    assert (tmp_path / "mirror" / "add_sub" / "1" / "model.py").exists()
    repository.on_list = lambda: None
    repository.put("add_sub/2/model.py", b"whole")
    mirror.sync(settle_s=0.01)
    assert (tmp_path / "mirror" / "add_sub" / "2" / "model.py").read_bytes() == b"whole"


def test_in_poll_mode_a_change_is_laid_out_once_two_polls_agree(store: BlobStore,
                                                                 tmp_path: Path) -> None:
    repository = MemoryRepository(add_sub())
    mirror = mirror_of(repository, store, tmp_path)
    mirror.sync(settle_s=0.01)
    repository.put("add_sub/2/model.py", b"v2")
    mirror.sync()  # first seen
    assert not (tmp_path / "mirror" / "add_sub" / "2").exists()
    mirror.sync()  # the same again: settled
    assert (tmp_path / "mirror" / "add_sub" / "2" / "model.py").read_bytes() == b"v2"


def test_a_model_gone_from_the_repository_loses_its_folder(store: BlobStore,
                                                           tmp_path: Path) -> None:
    repository = MemoryRepository({**add_sub(), "mul/1/m": b"x"})
    mirror = mirror_of(repository, store, tmp_path)
    mirror.sync(settle_s=0.01)
    del repository.objects["mul/1/m"]
    mirror.sync()
    assert not (tmp_path / "mirror" / "mul").exists()
    assert (tmp_path / "mirror" / "add_sub").exists()


def test_syncing_one_model_leaves_the_others_alone(store: BlobStore, tmp_path: Path) -> None:
    repository = MemoryRepository({**add_sub(), "mul/1/m": b"x"})
    mirror = mirror_of(repository, store, tmp_path)
    mirror.sync(["add_sub"], settle_s=0.01)
    assert (tmp_path / "mirror" / "add_sub").exists()
    assert not (tmp_path / "mirror" / "mul").exists()


@pytest.mark.parametrize("path", ["../escape/1/x", "add_sub/../../x", "/abs/1/x",
                                  "add_sub//1/x", "add_sub\\1\\x", "add_sub/./1/x"])
def test_a_listed_path_that_could_leave_the_folder_is_skipped(store: BlobStore,
                                                              tmp_path: Path,
                                                              path: str) -> None:
    repository = MemoryRepository({**add_sub(), path: b"evil"})
    mirror_of(repository, store, tmp_path).sync(settle_s=0.01)
    assert path not in repository.downloads
    assert not (tmp_path / "escape").exists() and not (tmp_path / "x").exists()
    assert (tmp_path / "mirror" / "add_sub" / "1" / "model.py").exists()


def test_a_download_that_fails_keeps_the_old_folder_and_says_why(store: BlobStore,
                                                                 tmp_path: Path) -> None:
    repository = MemoryRepository(add_sub())
    mirror = mirror_of(repository, store, tmp_path)
    mirror.sync(settle_s=0.01)
    repository.put("add_sub/2/model.py", b"v2")
    repository.broken.add("add_sub/2/model.py")
    mirror.sync(settle_s=0.01)
    assert (tmp_path / "mirror" / "add_sub" / "1" / "model.py").exists()
    assert not (tmp_path / "mirror" / "add_sub" / "2").exists()
    assert "access denied" in mirror.failures["add_sub"]
    assert not list((store.root / "partial").iterdir())  # nothing half-written is kept
    repository.broken.clear()
    mirror.sync(settle_s=0.01)
    assert "add_sub" not in mirror.failures
    assert (tmp_path / "mirror" / "add_sub" / "2" / "model.py").read_bytes() == b"v2"


def test_a_repository_that_cannot_be_listed_raises_naming_it(store: BlobStore,
                                                             tmp_path: Path) -> None:
    repository = MemoryRepository(add_sub())
    repository.down = True
    with pytest.raises(InferenceServerError, match="mem://bucket/models"):
        mirror_of(repository, store, tmp_path).sync()


def test_a_plugin_error_that_is_not_naiads_is_named_too(store: BlobStore,
                                                        tmp_path: Path) -> None:
    class Broken(MemoryRepository):
        def list_files(self, prefix: str = "") -> list[RepositoryFile]:
            raise ConnectionError("no route to host")

    with pytest.raises(InferenceServerError, match=r"mem://bucket/models.*no route to host"):
        mirror_of(Broken(), store, tmp_path).sync()


def test_past_its_bound_the_store_evicts_what_no_model_uses(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "cache", max_bytes=10)
    repository = MemoryRepository({"a/1/w": b"12345678"})
    mirror = mirror_of(repository, store, tmp_path)
    mirror.sync(settle_s=0.01)
    repository.objects.clear()
    repository.put("b/1/w", b"abcdefgh")
    mirror.sync(settle_s=0.01)  # a is gone, b is in: a's blob goes to make room
    blobs = list((store.root / "blobs").glob("*/*"))
    assert [p.read_bytes() for p in blobs] == [b"abcdefgh"]


def test_blobs_in_use_are_kept_even_over_the_bound(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "cache", max_bytes=4)
    repository = MemoryRepository({"a/1/w": b"12345678"})
    mirror_of(repository, store, tmp_path).sync(settle_s=0.01)
    assert (tmp_path / "mirror" / "a" / "1" / "w").read_bytes() == b"12345678"
    assert len(list((store.root / "blobs").glob("*/*"))) == 1

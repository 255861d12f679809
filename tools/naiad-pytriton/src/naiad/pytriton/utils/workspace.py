"""PyTriton's ``Workspace`` (``pytriton.utils.workspace``): the folder a ``Triton`` keeps its
model store in."""

from __future__ import annotations

import pathlib
import shutil
import tempfile


class Workspace:
    """The folder for the model store: a new ``workspace_*`` folder under PyTriton's home
    (``PYTRITON_HOME``, ``~/.cache/pytriton``) by default, as in PyTriton; removed by
    ``clean`` when this object made it."""

    def __init__(self, workspace_path: str | pathlib.Path | None = None) -> None:
        if workspace_path is None:
            from naiad.pytriton.constants import PYTRITON_HOME

            PYTRITON_HOME.mkdir(parents=True, exist_ok=True)
            self._path = pathlib.Path(tempfile.mkdtemp(dir=PYTRITON_HOME,
                                                       prefix="workspace_")).resolve()
            self._created = True
        else:
            self._path = pathlib.Path(workspace_path).resolve()
            self._created = not self._path.exists()
            self._path.mkdir(parents=True, exist_ok=True)
        self.model_store_path = self._path / "model-store"
        self.model_store_path.mkdir(exist_ok=True)

    @property
    def path(self) -> pathlib.Path:
        """The workspace folder."""
        return self._path

    def exists(self) -> bool:
        return self._path.exists()

    def is_empty(self) -> bool:
        """Whether the folder holds nothing but dot-files (PyTriton's test before removing
        it)."""
        return not any(not child.name.startswith(".") for child in self._path.iterdir()) \
            if self._path.exists() else True

    def clean(self) -> None:
        if self._created:
            shutil.rmtree(self._path, ignore_errors=True)
        else:
            shutil.rmtree(self.model_store_path, ignore_errors=True)

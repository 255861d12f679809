"""PyTriton's ``Workspace`` (``pytriton.utils.workspace``): the folder a ``Triton`` keeps its
model store in."""

from __future__ import annotations

import pathlib
import shutil
import tempfile


class Workspace:
    """The folder for the model store; removed by ``clean`` when this object made it."""

    def __init__(self, workspace_path: str | pathlib.Path | None = None) -> None:
        if workspace_path is None:
            self.path = pathlib.Path(tempfile.mkdtemp(prefix="pytriton-workspace-"))
            self._created = True
        else:
            self.path = pathlib.Path(workspace_path).resolve()
            self._created = not self.path.exists()
            self.path.mkdir(parents=True, exist_ok=True)
        self.model_store_path = self.path / "model-store"
        self.model_store_path.mkdir(exist_ok=True)

    def exists(self) -> bool:
        return self.path.exists()

    def clean(self) -> None:
        if self._created:
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            shutil.rmtree(self.model_store_path, ignore_errors=True)

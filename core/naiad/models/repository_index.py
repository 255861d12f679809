"""The repository index (``POST /v2/repository/index``, gRPC ``RepositoryIndex``): every
model the repositories hold, each version with its state and the reason it is in it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from naiad.models.records import READY, ModelRecord


def repository_index(folders: Iterable[str], records: Mapping[str, ModelRecord],
                     ready_only: bool = False) -> list[dict]:
    """Index entries for the model ``folders`` found in the repositories now and the
    ``records`` the manager keeps (``ready_only``: READY versions only).

    As in Triton, it lists the model folders the repositories hold now: a model whose
    folder was removed is left out (even while it still serves, before a poll unloads
    it); a name found in two repositories is listed with the reason it cannot load."""
    entries = []
    names = set(folders) | {name for name, record in records.items() if record.path is None}
    for name in sorted(names):
        record = records.get(name)
        if record is None or not record.states:
            if not ready_only:
                entries.append({"name": name})
            continue
        for version, (state, reason) in sorted(record.states.items(),
                                               key=lambda kv: kv[0] or 0):
            if ready_only and state != READY:
                continue
            entry = {"name": name}
            if version is not None:
                entry["version"] = str(version)
            entry["state"] = state
            if reason:
                entry["reason"] = reason
            entries.append(entry)
    return entries

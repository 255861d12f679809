"""naiad.models.repository_index: the repository index from the folders found and the
manager's records."""

from __future__ import annotations

from pathlib import Path

from naiad.models.records import READY, UNAVAILABLE, ModelRecord
from naiad.models.repository_index import repository_index


def test_folders_records_states_and_reasons():
    served = ModelRecord("a", Path("/r/a"), states={1: (READY, ""), 2: (UNAVAILABLE, "boom")})
    staged = ModelRecord("staged", None, states={1: (READY, "")})  # no repository folder
    gone = ModelRecord("gone", Path("/r/gone"), states={1: (READY, "")})  # folder removed
    records = {"a": served, "staged": staged, "gone": gone}
    assert repository_index(["a", "new"], records) == [
        {"name": "a", "version": "1", "state": "READY"},
        {"name": "a", "version": "2", "state": "UNAVAILABLE", "reason": "boom"},
        {"name": "new"},
        {"name": "staged", "version": "1", "state": "READY"},
    ]
    assert repository_index(["a", "new"], records, ready_only=True) == [
        {"name": "a", "version": "1", "state": "READY"},
        {"name": "staged", "version": "1", "state": "READY"},
    ]


def test_a_model_whose_configuration_failed_has_no_version():
    failed = ModelRecord("bad", Path("/r/bad"), states={None: (UNAVAILABLE, "no config")})
    assert repository_index(["bad"], {"bad": failed}) == [
        {"name": "bad", "state": "UNAVAILABLE", "reason": "no config"}]

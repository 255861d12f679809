"""Which loaded models an ensemble calls, and which loaded ensembles call a model: what
unloading one model does to the others (Triton unloads the ensembles that call it, and,
with ``unload_dependents``, an ensemble's composing models)."""

from __future__ import annotations

from collections.abc import Mapping

from naiad.config.platforms import ENSEMBLE
from naiad.models.records import ModelRecord


def composing_models(models: Mapping[str, ModelRecord], name: str) -> list[str]:
    """The models the loaded ensemble ``name`` calls, directly or through its composing
    ensembles, in the order they are found."""
    found: list[str] = []
    pending = [name]
    while pending:
        record = models.get(pending.pop(0))
        if record is None or record.latest is None \
                or record.latest.config.platform != ENSEMBLE:
            continue
        for step in record.latest.config.ensemble_scheduling.step:
            if step.model_name not in found and step.model_name != name:
                found.append(step.model_name)
                pending.append(step.model_name)
    return found


def ensembles_calling(models: Mapping[str, ModelRecord], name: str) -> list[str]:
    """The loaded ensembles with a step that calls model ``name``."""
    return sorted(
        record.name for record in models.values()
        if record.latest is not None and record.latest.config.platform == ENSEMBLE
        and any(step.model_name == name
                for step in record.latest.config.ensemble_scheduling.step))

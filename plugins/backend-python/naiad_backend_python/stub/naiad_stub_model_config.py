"""``pb_utils.ModelConfig``: the configuration ``auto_complete_config`` receives and
returns, with the checks Triton makes on each change. Re-exported by
``triton_python_backend_utils``."""

from __future__ import annotations

import json
from typing import Any


class ModelConfig:
    """The model configuration ``TritonPythonModel.auto_complete_config`` receives and
    returns. Only inputs, outputs, max_batch_size, dynamic batching and the transaction
    policy may be changed, with the checks Triton makes."""

    def __init__(self, model_config: str) -> None:
        self._model_config: dict[str, Any] = json.loads(model_config)

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in "
                f"auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}")
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    f"scheduling_choice as 'dynamic_batching'")
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, kind: str, tensor: dict[str, Any], valid: tuple[str, ...]) -> None:
        model = self._name
        label = f"{kind} '{tensor.get('name', '')}'"
        for key in tensor:
            if key not in valid:
                allowed = ", ".join(f"'{v}'" for v in valid[:-1]) + f" and '{valid[-1]}'"
                raise ValueError(f"{label} in auto-complete-config function for model "
                                 f"'{model}' contains property other than {allowed}.")
        if "name" not in tensor:
            raise ValueError(f"{kind} in auto-complete-config function for model '{model}' "
                             f"is missing 'name' property.")
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{label} in auto-complete-config function for model "
                                 f"'{model}' is missing '{key}' property.")
        existing = self._model_config.setdefault(kind, [])
        for current in existing:
            if current.get("name") != tensor["name"]:
                continue
            current_type = current.get("data_type", "TYPE_INVALID")
            if current_type != "TYPE_INVALID" and current_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{current_type} for {kind} '{tensor['name']}', model provides "
                    f"{tensor['data_type']}")
            if current.get("dims") and current["dims"] != tensor["dims"]:
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects dims "
                    f"{tensor['dims']} but the model configuration specifies dims "
                    f"{current['dims']}")
            if ("optional" in current and "optional" in tensor
                    and current["optional"] != tensor["optional"]):
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{current['optional']}")
            current["data_type"] = tensor["data_type"]
            current["dims"] = tensor["dims"]
            if "optional" in tensor:
                current["optional"] = tensor["optional"]
            return
        existing.append(tensor)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        model = self._name
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(f"model transaction property in auto-complete-config "
                                 f"function for model '{model}' contains property other "
                                 f"than 'decoupled'.")
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(f"trying to change decoupled property in auto-complete-config "
                                 f"for model '{model}', which is already set to "
                                 f"'{policy['decoupled']}'.")
            policy["decoupled"] = wanted

"""Reading ``config.pbtxt``: protobuf text format into Triton's ``ModelConfig``."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from naiad.errors import invalid_arg

CONFIG_FILENAME = "config.pbtxt"
# Triton's --model-config-name looks for <model>/configs/<name>.pbtxt first.
CUSTOM_CONFIG_FOLDER = "configs"


def parse_config_text(text: str, source: str) -> ModelConfig:
    """Parse protobuf text into a ``ModelConfig``; ``source`` names the file in errors."""
    config = ModelConfig()
    try:
        # Parse, not Merge: a non-repeated field given twice is an error, as in Triton.
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        # str(exc) is "line:column : message" from the protobuf parser.
        raise invalid_arg(f"failed to read model configuration {source}: {exc}") from None
    return config


def config_path(model_dir: Path, config_name: str | None = None) -> Path:
    """The file a model's configuration is read from (the custom one if it exists)."""
    if config_name:
        custom = model_dir / CUSTOM_CONFIG_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return model_dir / CONFIG_FILENAME


def load_config_file(model_dir: Path, config_name: str | None = None) -> ModelConfig | None:
    """The parsed configuration of ``model_dir``, or None when it has no config file
    (the backend may then auto-complete one)."""
    path = config_path(model_dir, config_name)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise invalid_arg(f"failed to read model configuration {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_arg(f"failed to read model configuration {path}: not UTF-8 text "
                          f"(byte {exc.start})") from None
    return parse_config_text(text, str(path))

"""naiad convert: Model Navigator's job for naiad (export, check, time, write a repository)."""

from naiad_convert.errors import ConvertError

__all__ = ["ConvertError"]
__version__ = "0.1.0"

"""OpenVINO element types and Triton datatypes: the ones Triton's openvino backend maps
(``openvino_utils.cc``), no others."""

from __future__ import annotations

import openvino as ov

# OpenVINO's type name (``Type.get_type_name()``) -> the V2 datatype.
OV_TO_DATATYPE: dict[str, str] = {
    "boolean": "BOOL",
    "u8": "UINT8",
    "u16": "UINT16",
    "u32": "UINT32",
    "u64": "UINT64",
    "i8": "INT8",
    "i16": "INT16",
    "i32": "INT32",
    "i64": "INT64",
    "f16": "FP16",
    "f32": "FP32",
}

DATATYPE_TO_OV: dict[str, ov.Type] = {
    "BOOL": ov.Type.boolean,
    "UINT8": ov.Type.u8,
    "UINT16": ov.Type.u16,
    "UINT32": ov.Type.u32,
    "UINT64": ov.Type.u64,
    "INT8": ov.Type.i8,
    "INT16": ov.Type.i16,
    "INT32": ov.Type.i32,
    "INT64": ov.Type.i64,
    "FP16": ov.Type.f16,
    "FP32": ov.Type.f32,
}


def datatype_of(element: ov.Type) -> str | None:
    """The V2 datatype of an OpenVINO element type, or None when Triton's backend has none
    (f64, bf16, string, 4-bit and 1-bit types)."""
    return OV_TO_DATATYPE.get(element.get_type_name())


def dims_of(shape: ov.PartialShape) -> list[int]:
    """A partial shape as config dims, as Triton's auto-complete writes them: every
    dimension's size when the whole shape is static, else -1 for every dimension."""
    if shape.is_static:
        return [d.get_length() for d in shape]
    return [-1] * len(shape)

"""Element types: fluidjax names (NumPy's), Paddle's ``VarType.Type`` numbers, NumPy dtypes."""

from __future__ import annotations

import numpy as np

# Paddle's VarType.Type values for tensor element types (wire format facts).
_ENUM = {
    "bool": 0,
    "int16": 1,
    "int32": 2,
    "int64": 3,
    "float16": 4,
    "float32": 5,
    "float64": 6,
    "uint8": 20,
    "int8": 21,
    "bfloat16": 22,
    "complex64": 23,
    "complex128": 24,
}
_NAME_OF_ENUM = {v: k for k, v in _ENUM.items()}

# Paddle's VarType.Type values for variable kinds.
LOD_TENSOR = 7
SELECTED_ROWS = 8
FEED_MINIBATCH = 9
FETCH_LIST = 10
STEP_SCOPES = 11
LOD_TENSOR_ARRAY = 13
RAW = 17
STRING = 25
STRINGS = 26



class VarDesc:
    """Paddle's ``core.VarDesc``: what Fluid scripts use of it, the ``VarType`` enum values
    (``dtype=core.VarDesc.VarType.FP32`` works wherever a dtype is taken)."""

    class VarType:
        BOOL, INT16, INT32, INT64, FP16, FP32, FP64 = 0, 1, 2, 3, 4, 5, 6
        UINT8, INT8, BF16, COMPLEX64, COMPLEX128 = 20, 21, 22, 23, 24
        LOD_TENSOR, SELECTED_ROWS, FEED_MINIBATCH, FETCH_LIST, STEP_SCOPES = 7, 8, 9, 10, 11
        LOD_RANK_TABLE, LOD_TENSOR_ARRAY, PLACE_LIST, READER, RAW, STRING, STRINGS = 12, 13, 14, 15, 17, 25, 26


_ALIASES = {
    "float": "float32",
    "double": "float64",
    "fp32": "float32",
    "fp64": "float64",
    "fp16": "float16",
    "bf16": "bfloat16",
    "int": "int32",
    "long": "int64",
}

FLOAT_TYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


def normalize(dtype) -> str:
    """Return fluidjax's name for ``dtype`` (a name, a NumPy/JAX dtype or a Paddle enum value).

    >>> normalize(np.float32), normalize("fp64"), normalize(5)
    ('float32', 'float64', 'float32')
    """
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype.lower(), dtype.lower())
        if name in _ENUM:
            return name
        raise TypeError(f"unknown dtype {dtype!r}; expected one of {sorted(_ENUM)}")
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        if int(dtype) in _NAME_OF_ENUM:
            return _NAME_OF_ENUM[int(dtype)]
        raise TypeError(f"{dtype} is not a Paddle tensor element type")
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = getattr(dtype, "name", None) or getattr(getattr(dtype, "dtype", None), "name", None)
    if name in _ENUM:
        return name
    raise TypeError(f"unknown dtype {dtype!r}; expected one of {sorted(_ENUM)}")


def to_enum(dtype) -> int:
    """Paddle's ``VarType.Type`` number of an element type."""
    return _ENUM[normalize(dtype)]


def from_enum(value: int) -> str:
    """fluidjax's name of a Paddle ``VarType.Type`` element-type number."""
    return normalize(int(value))


def to_numpy(dtype) -> np.dtype:
    """The NumPy dtype of an element type (``bfloat16`` comes from ml_dtypes, which JAX ships)."""
    name = normalize(dtype)
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def is_float(dtype) -> bool:
    """Whether gradients flow through values of this element type."""
    return normalize(dtype) in FLOAT_TYPES

"""Lane conversions and dtype checks shared by the appliance client and the ring baseline.

bf16 convention: a bf16 lane is the top 16 bits of an f32. Without the optional `ml_dtypes`
package, bf16 tensors are numpy uint16 arrays of those bit patterns.
"""

from __future__ import annotations

import numpy as np

try:  # optional
    import ml_dtypes  # type: ignore

    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    BFLOAT16 = None

_F32_ABS = np.uint32(0x7FFF_FFFF)
_F32_INF = np.uint32(0x7F80_0000)
_BF16_QUIET = np.uint16(0x0040)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widens bf16 bit patterns (uint16) to float32, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Narrows float32 values to the bf16 bit patterns (uint16) of the nearest value, ties to even.

    Overflow rounds to infinity, subnormals are kept (the carry out of the mantissa is the correct
    result), and a NaN is truncated and quieted instead of rounded, so it never becomes infinity.
    """
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    # uint32 arithmetic wraps; only NaN patterns can wrap and they are replaced below.
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = (u & _F32_ABS) > _F32_INF
    if nan.any():
        rounded[nan] = (u[nan] >> np.uint32(16)).astype(np.uint16) | _BF16_QUIET
    return rounded


def wire_view(array: np.ndarray, dtype: str) -> np.ndarray:
    """The flat little-endian wire lanes of `array` for collective dtype `dtype`.

    Raises ValueError when the array's dtype does not carry `dtype` lanes.
    """
    a = np.asarray(array)
    k = a.dtype
    if dtype == "f32":
        ok = k == np.float32
    elif dtype == "f16":
        ok = k == np.float16
    elif dtype == "i32":
        ok = k == np.int32
    elif dtype == "bf16":
        ok = k == np.uint16 or (BFLOAT16 is not None and k == BFLOAT16)
    else:
        raise ValueError(f"unknown dtype {dtype!r} (expected f32, f16, bf16 or i32)")
    if not ok:
        accepted = {
            "f32": "float32",
            "f16": "float16",
            "i32": "int32",
            "bf16": "uint16 bit patterns" + (" or ml_dtypes.bfloat16" if BFLOAT16 is not None else ""),
        }[dtype]
        raise ValueError(f"array dtype {k} does not match the collective's dtype {dtype} (expected {accepted})")
    if dtype == "bf16" and k != np.uint16:
        a = a.view(np.uint16)
    flat = a.reshape(-1)
    if flat.dtype.byteorder == ">":
        flat = flat.astype(flat.dtype.newbyteorder("<"))
    return np.ascontiguousarray(flat)

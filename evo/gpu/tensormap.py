"""Build CUtensorMap descriptors (TMA) for 2-D row-major fp16 tensors, as kernel arguments.

``encode_tensor_map`` returns a shape-(1,) numpy array of dtype ``V128`` holding the 128 raw
bytes of a ``CUtensorMap``; CuPy passes a size-1 numpy array *by value*, so it lands in the
kernel's ``const __grid_constant__ TmaDesc`` parameter (a 64-byte aligned 128-byte struct).

Arguments are validated here, in Python, before the driver is called, so every rule the
driver would reject with an opaque ``CUDA_ERROR_INVALID_VALUE`` is a one-line EvoError
(and testable without a GPU).
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import EvoError

ELEM_BYTES = 2  # fp16
MAX_BOX = 256
TMA_DTYPE = np.dtype("V128")


def validate(ptr: int, rows: int, cols: int, box_rows: int, box_cols: int, swizzle: int, col_block: int = 0) -> None:
    """Raise EvoError (one line) when the driver would refuse this tensor map."""
    for name, v in (("ptr", ptr), ("rows", rows), ("cols", cols), ("box_rows", box_rows), ("box_cols", box_cols),
                    ("swizzle", swizzle), ("col_block", col_block)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise EvoError(f"tensor map: {name} must be an int, got {type(v).__name__}")
    if swizzle not in (0, 32, 64, 128):
        raise EvoError(f"tensor map: swizzle must be 0, 32, 64 or 128 bytes, got {swizzle}")
    if ptr <= 0 or ptr % 16:
        raise EvoError(f"tensor map: global address {ptr:#x} must be non-null and 16-byte aligned")
    if not (1 <= rows < 2**32 and 1 <= cols < 2**32):
        raise EvoError(f"tensor map: tensor {rows}x{cols} must have 1 <= rows, cols < 2^32")
    stride = cols * ELEM_BYTES
    if stride % 16:
        raise EvoError(f"tensor map: row stride {stride} bytes ({cols} fp16 columns) must be a multiple of 16 (cols % 8 == 0)")
    if stride >= 2**40:
        raise EvoError(f"tensor map: row stride {stride} bytes is too large (< 2^40)")
    if col_block:
        # a 3-D map (col_block, cols / col_block, rows): a block past the last column would alias the next row
        if col_block < 0 or col_block % 8 or cols % col_block or box_cols % col_block:
            raise EvoError(f"tensor map: col_block {col_block} must be a multiple of 8 dividing both cols {cols} and box_cols {box_cols}")
        if box_cols // col_block > MAX_BOX:
            raise EvoError(f"tensor map: box {box_cols} columns in blocks of {col_block} exceeds {MAX_BOX} blocks")
        box_cols = col_block  # the swizzle and box rules below apply to one block's line
    if not (1 <= box_rows <= MAX_BOX and 1 <= box_cols <= MAX_BOX):
        raise EvoError(f"tensor map: box {box_rows}x{box_cols} must have each side in 1..{MAX_BOX}")
    inner = box_cols * ELEM_BYTES
    if inner % 16:
        raise EvoError(f"tensor map: box inner side {box_cols} fp16 = {inner} bytes must be a multiple of 16")
    if swizzle and inner > swizzle:
        raise EvoError(f"tensor map: box inner side {inner} bytes exceeds the {swizzle}-byte swizzle span")


def encode_tensor_map(ptr: int, rows: int, cols: int, box_rows: int, box_cols: int, swizzle: int,
                      col_block: int = 0) -> np.ndarray:
    """CUtensorMap for a rows x cols row-major fp16 tensor at device address ``ptr``.

    Out-of-bounds elements of a box read as zeros (oobFill NONE). With ``col_block`` > 0 the map is
    3-D, (col_block, cols / col_block, rows), its box (col_block, box_cols / col_block, box_rows):
    coordinates (0, col / col_block, row). Returns ``np.ndarray(shape=(1,), dtype='V128')`` to pass
    by value to a kernel.
    """
    validate(ptr, rows, cols, box_rows, box_cols, swizzle, col_block)
    if col_block:
        dims = [int(col_block), int(cols) // int(col_block), int(rows)]
        strides = [int(col_block) * ELEM_BYTES, int(cols) * ELEM_BYTES]
        box = [int(col_block), int(box_cols) // int(col_block), int(box_rows)]
    else:
        dims, strides, box = [int(cols), int(rows)], [int(cols) * ELEM_BYTES], [int(box_cols), int(box_rows)]
    try:
        from cuda.bindings import driver as cu
    except ImportError:  # pragma: no cover - depends on the environment
        raise EvoError("tensor map: cuda.bindings (cuda-python) is not installed") from None
    sw = {
        0: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        32: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
        64: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
        128: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
    }[int(swizzle)]
    err, tmap = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        len(dims),
        int(ptr),
        [cu.cuuint64_t(d) for d in dims],
        [cu.cuuint64_t(s) for s in strides],
        [cu.cuuint32_t(b) for b in box],
        [cu.cuuint32_t(1)] * len(dims),
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        sw,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != cu.CUresult.CUDA_SUCCESS:
        raise EvoError(
            f"tensor map: cuTensorMapEncodeTiled failed ({err.name}) for {rows}x{cols} box {box_rows}x{box_cols} swizzle {swizzle}"
            + (f" col_block {col_block}" if col_block else "")
        )
    raw = ctypes.string_at(tmap.getPtr(), 128)
    out = np.empty(1, dtype=TMA_DTYPE)  # numpy aligns allocations to >= 64 bytes
    out.view(np.uint8)[:] = np.frombuffer(raw, dtype=np.uint8)
    return out


def encode_maps(specs, a, b, c, m: int, n: int, k: int) -> list[np.ndarray]:
    """A kernel's tensor maps (its launch's ``tensor_maps``: operand, box, swizzle, col_block; in order) over the
    device arrays A (M x K), B (N x K) and C (M x N), each with a ``.data.ptr``."""
    operands = {"A": (a, m, k), "B": (b, n, k), "C": (c, m, n)}
    maps = []
    for t in specs:
        arr, rows, cols = operands[t.operand]
        maps.append(encode_tensor_map(arr.data.ptr, rows, cols, t.box_rows, t.box_cols, t.swizzle, t.col_block))
    return maps

"""CPU tests of the TMA descriptor encoder: argument validation, and the driver call through a fake driver."""
import ctypes
import sys
import types

import numpy as np
import pytest

from evo.errors import EvoError
from evo.gpu import tensormap
from evo.gpu.tensormap import encode_tensor_map, validate

PTR = 0x7F0000000000  # 16-byte aligned


def test_valid_arguments_pass():
    validate(PTR, 4096, 1024, 128, 64, 128)
    validate(PTR, 1000, 1000, 256, 64, 128)  # boxes may exceed the tensor: TMA fills zeros
    validate(PTR, 7, 8, 64, 8, 0)
    validate(PTR, 64, 64, 64, 16, 32)


@pytest.mark.parametrize(
    "args, words",
    [
        ((PTR, 64, 64, 257, 64, 128), "box"),  # box side > 256
        ((PTR, 64, 64, 64, 512, 0), "box"),
        ((PTR, 64, 64, 0, 64, 128), "box"),
        ((PTR, 64, 1000 + 4, 64, 64, 128), "multiple of 16"),  # row stride 2008 B: misaligned
        ((PTR, 64, 12, 64, 64, 128), "stride"),
        ((PTR, 64, 64, 64, 64, 16), "swizzle"),  # not 0/32/64/128
        ((PTR, 64, 64, 64, 128, 128), "swizzle span"),  # 256-byte box rows under a 128B swizzle
        ((PTR, 64, 64, 64, 32, 32), "swizzle span"),
        ((PTR, 64, 64, 64, 4, 0), "inner side"),  # 8-byte box rows
        ((PTR + 8, 64, 64, 64, 64, 128), "aligned"),
        ((0, 64, 64, 64, 64, 128), "aligned"),
        ((PTR, 0, 64, 64, 64, 128), "rows"),
        ((PTR, 64, 64, 64.0, 64, 128), "int"),
    ],
)
def test_invalid_arguments_raise_one_line(args, words):
    with pytest.raises(EvoError) as e:
        encode_tensor_map(*args)  # validation runs before the driver is imported
    msg = str(e.value)
    assert words in msg and "\n" not in msg


class _FakeDriver(types.SimpleNamespace):
    """Mimics the few names of cuda.bindings.driver that the encoder uses."""


def _fake_driver(calls):
    class Enum(types.SimpleNamespace):
        pass

    class U64(int):
        pass

    class U32(int):
        pass

    class Result:
        CUDA_SUCCESS = "ok"

    buf = ctypes.create_string_buffer(bytes(range(128)), 128)

    class Map:
        def getPtr(self):
            return ctypes.addressof(buf)

    def encode(*a):
        calls.append(a)
        return Result.CUDA_SUCCESS, Map()

    d = _FakeDriver(
        cuuint64_t=U64,
        cuuint32_t=U32,
        CUresult=Result,
        CUtensorMapDataType=Enum(CU_TENSOR_MAP_DATA_TYPE_FLOAT16="f16"),
        CUtensorMapInterleave=Enum(CU_TENSOR_MAP_INTERLEAVE_NONE="il-none"),
        CUtensorMapSwizzle=Enum(CU_TENSOR_MAP_SWIZZLE_NONE="sw0", CU_TENSOR_MAP_SWIZZLE_32B="sw32",
                                CU_TENSOR_MAP_SWIZZLE_64B="sw64", CU_TENSOR_MAP_SWIZZLE_128B="sw128"),
        CUtensorMapL2promotion=Enum(CU_TENSOR_MAP_L2_PROMOTION_L2_256B="l2-256"),
        CUtensorMapFloatOOBfill=Enum(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE="oob-none"),
        cuTensorMapEncodeTiled=encode,
    )
    return d, U64, U32


def _install(monkeypatch, drv) -> None:
    """Make `from cuda.bindings import driver` import the fake."""
    pkg = types.ModuleType("cuda")
    sub = types.ModuleType("cuda.bindings")
    sub.driver = drv
    pkg.bindings = sub
    monkeypatch.setitem(sys.modules, "cuda", pkg)
    monkeypatch.setitem(sys.modules, "cuda.bindings", sub)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)


def test_encode_calls_driver_with_row_major_fp16_layout(monkeypatch):
    calls = []
    drv, U64, U32 = _fake_driver(calls)
    _install(monkeypatch, drv)

    out = encode_tensor_map(PTR, 1000, 4096, 128, 64, 128)
    assert out.shape == (1,) and out.dtype == np.dtype("V128") and out.dtype.itemsize == 128
    assert out.view(np.uint8).tolist() == list(range(128))  # the descriptor's raw bytes, by value
    (dtype, rank, addr, dims, strides, box, estr, il, sw, l2, oob), = calls
    assert (dtype, rank, addr) == ("f16", 2, PTR)
    assert dims == [4096, 1000] and all(isinstance(x, U64) for x in dims + strides)  # innermost first
    assert strides == [4096 * 2]
    assert box == [64, 128] and all(isinstance(x, U32) for x in box + estr)
    assert estr == [1, 1]
    assert (il, sw, l2, oob) == ("il-none", "sw128", "l2-256", "oob-none")
    assert tensormap.TMA_DTYPE.itemsize == 128


def test_column_blocks_validate():
    validate(PTR, 4096, 1024, 64, 128, 128, col_block=64)  # 64 x 128 boxes as two 128-byte swizzled lines per row
    validate(PTR, 4096, 1024, 64, 256, 128, col_block=64)
    for args, words in (
        ((PTR, 64, 1000, 64, 128, 128, 64), "col_block"),   # a block past the last column would alias the next row
        ((PTR, 64, 1024, 64, 96, 128, 64), "col_block"),    # the box is not whole blocks
        ((PTR, 64, 1024, 64, 256, 128, 12), "col_block"),   # blocks of whole 16-byte chunks
        ((PTR, 64, 1024, 64, 256, 128, 128), "swizzle span"),  # one 256-byte line under a 128-byte swizzle
    ):
        with pytest.raises(EvoError) as e:
            encode_tensor_map(*args)
        assert words in str(e.value) and "\n" not in str(e.value)


def test_column_blocks_encode_a_3d_map(monkeypatch):
    calls = []
    drv, U64, U32 = _fake_driver(calls)
    _install(monkeypatch, drv)

    encode_tensor_map(PTR, 1000, 4096, 64, 128, 128, col_block=64)
    (dtype, rank, addr, dims, strides, box, estr, il, sw, l2, oob), = calls
    assert (rank, addr) == (3, PTR)
    assert dims == [64, 4096 // 64, 1000]        # within a block, blocks of a row, rows
    assert strides == [64 * 2, 4096 * 2]         # a block's 128 bytes, a row's bytes: blocks of a row are contiguous
    assert box == [64, 2, 64] and estr == [1, 1, 1] and sw == "sw128"


def test_encode_maps_follows_the_launch_specs(monkeypatch):
    """Every launcher builds a kernel's maps through encode_maps: each spec over its operand (A: M x K, B: N x K,
    C: M x N), in the front matter's order, with its box, swizzle and column blocks."""
    from evo.gpu.tensormap import encode_maps
    from evo.kernel import TensorMapSpec

    calls = []
    drv, _, _ = _fake_driver(calls)
    _install(monkeypatch, drv)
    arr = lambda ptr: types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr))  # noqa: E731
    specs = [TensorMapSpec("B", 256, 64, 128), TensorMapSpec("A", 128, 64, 128), TensorMapSpec("C", 64, 128, 128, 64)]
    maps = encode_maps(specs, arr(PTR), arr(PTR + 4096), arr(PTR + 8192), 2048, 12288, 128)
    assert len(maps) == 3
    assert [(c[1], c[2], c[3], c[5]) for c in calls] == [
        (2, PTR + 4096, [128, 12288], [64, 256]),        # B: N x K (innermost first)
        (2, PTR, [128, 2048], [64, 128]),                # A: M x K
        (3, PTR + 8192, [64, 12288 // 64, 2048], [64, 2, 64]),   # C: M x N in 64-column blocks
    ]

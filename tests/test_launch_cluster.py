"""The launcher opts a kernel compiled with a cluster of more than 8 CTAs (non-portable on Hopper) in to launching,
and leaves every other kernel alone (a stand-in CuPy driver, no GPU)."""
import importlib
import sys
import types

import pytest

from evo.errors import EvoError

WIDTH, NON_PORTABLE = 11, 14  # CUfunction_attribute (cuda.h)


class DriverError(RuntimeError):
    pass


def _module(monkeypatch, dims=None, refuse_set=False):
    """evo.gpu.module imported against a stand-in driver whose kernel has cluster dims `dims` (None: the
    attribute query fails, as before sm_90); returns (module, the attributes set)."""
    set_attrs = []

    def get(attr, ptr):
        if dims is None:
            raise DriverError("CUDA_ERROR_INVALID_VALUE")
        return dims[attr - WIDTH] if WIDTH <= attr < WIDTH + 3 else 0

    def put(ptr, attr, value):
        if refuse_set:
            raise DriverError("CUDA_ERROR_NOT_SUPPORTED")
        set_attrs.append((ptr, attr, value))

    drv = types.SimpleNamespace(CUDADriverError=DriverError, funcGetAttribute=get, funcSetAttribute=put)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(driver=drv, function=types.SimpleNamespace(Module=object)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.delitem(sys.modules, "evo.gpu.module", raising=False)
    mod = importlib.import_module("evo.gpu.module")
    monkeypatch.delitem(sys.modules, "evo.gpu.module", raising=False)  # the next import sees the real cupy again
    return mod, set_attrs


@pytest.mark.parametrize("dims,size,opted", [((16, 1, 1), 16, True), ((8, 1, 1), 8, False), ((2, 2, 4), 16, True),
                                             ((0, 0, 0), 1, False), (None, 1, False)])
def test_large_clusters_are_allowed_and_others_left_alone(monkeypatch, dims, size, opted):
    mod, set_attrs = _module(monkeypatch, dims)
    assert mod.required_cluster_size(5) == size
    mod.allow_large_cluster(5)
    assert set_attrs == ([(5, NON_PORTABLE, 1)] if opted else [])


def test_a_refused_opt_in_is_one_error(monkeypatch):
    mod, _ = _module(monkeypatch, (16, 1, 1), refuse_set=True)
    with pytest.raises(EvoError, match="cluster of 16 CTAs"):
        mod.allow_large_cluster(5)

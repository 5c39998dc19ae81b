"""The evaluation's memory check (evo.gpu.session.Session._fits), with cupy faked: CuPy's cached blocks are given back
to the device only when what is free without them falls short, and a shape that does not fit even then is refused."""
from __future__ import annotations

import pytest

from test_runoff_placements import session_module  # noqa: F401  (the fixture: evo.gpu.session against a mock cupy)

from evo.problem import parse_shape

GIB = 2 ** 30


def fake_device(sm, free_gib: float, cached_gib: float) -> list:
    """memGetInfo reports `free_gib`, plus `cached_gib` once the pool has given its blocks back; the log says when."""
    log, state = [], {"free": free_gib * GIB, "cached": cached_gib * GIB}

    def free_all_blocks():
        log.append("free_all_blocks")
        state["free"], state["cached"] = state["free"] + state["cached"], 0

    sm.cupy.get_default_memory_pool.return_value.free_all_blocks.side_effect = free_all_blocks
    sm.cupy.cuda.runtime.memGetInfo.side_effect = lambda: (state["free"], 141 * GIB)
    return log


def test_the_pool_keeps_its_blocks_while_the_device_has_room(session_module):  # noqa: F811
    log = fake_device(session_module, free_gib=100, cached_gib=20)
    session_module.Session._fits(parse_shape("4096x4096x4096"))  # ~1.4 GiB
    assert log == []


def test_the_pool_gives_its_blocks_back_when_the_device_runs_short(session_module):  # noqa: F811
    log = fake_device(session_module, free_gib=1, cached_gib=60)
    session_module.Session._fits(parse_shape("16384x16384x16384"))  # ~22 GiB: fits only with the cached blocks
    assert log == ["free_all_blocks"]


def test_a_shape_that_does_not_fit_even_then_is_refused(session_module):  # noqa: F811
    log = fake_device(session_module, free_gib=1, cached_gib=2)
    with pytest.raises(session_module.EvoError, match="needs about 22.0 GiB"):
        session_module.Session._fits(parse_shape("16384x16384x16384"))
    assert log == ["free_all_blocks"]

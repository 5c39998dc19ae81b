"""Adversarial kernels (tests/data/cheats/) must be rejected, each with its reason in EvalResult.error.

docs/evaluator.md maps every defence to the test here that proves it. GPU tests are marked gpu;
the compile-time defence (no device-side launch without -rdc) needs only nvcc and runs in CI.
"""
import threading
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import gpu_worker_session

from evo.compile import Compiler
from evo.gpu.worker import WorkerFault
from evo.kernel import KernelSource
from evo.problem import parse_shape

DATA = Path(__file__).parent / "data"
CHEATS = DATA / "cheats"


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    yield from gpu_worker_session(tmp_path_factory.mktemp("cheats"), reps=30)


def _compiled(gpu, path):
    w, comp, _ = gpu
    text = Path(path).read_text()
    ks = KernelSource.parse(text)
    r = comp.compile(ks, w.info.arch)
    assert r.ok, r.error
    return text, ks, r


def evaluate(gpu, path, shape, **kw):
    w = gpu[0]
    text, ks, r = _compiled(gpu, path)
    return w.call("evaluate", timeout_s=120, problem=parse_shape(shape), source=text, cubin=r.cubin_path, h=ks.hash, **kw)


def rejected(ev, stage, *words):
    assert not ev.ok, f"cheat accepted: {ev}"
    assert ev.stage == stage, (ev.stage, ev.error)
    for w in words:
        assert w in ev.error, ev.error
    return ev.error


# 1. work on another stream: a device-side launch needs -rdc, which we never pass ---------------
@pytest.mark.nvcc
def test_device_side_launch_does_not_compile(tmp_path):
    from evo.config import load_config

    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path)}}).compile)
    ks = KernelSource.parse((CHEATS / "device_launch.cu").read_text())
    r = comp.compile(ks, "sm_90a")
    assert not r.ok and "separate compilation" in r.error, r.error


@pytest.mark.gpu
def test_naive_still_passes_every_check(gpu):
    for shape in ("1x1x1", "77x200x72", "256x256x256", "33x65x1"):
        ev = evaluate(gpu, DATA / "naive.cu", shape)
        assert ev.ok, (shape, ev.error)
        assert ev.check.checks == gpu[2].check.seeds + 1 + 3


# 2. stale output / caches across calls ---------------------------------------------------------
@pytest.mark.gpu
def test_stale_output_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "stale_output.cu", "256x256x256"), "check", "unwritten")


@pytest.mark.gpu
def test_pointer_keyed_cache_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "pointer_cache.cu", "256x256x256"), "check", "same buffers, new values")


@pytest.mark.gpu
def test_shape_keyed_cache_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "shape_cache.cu", "256x256x256"), "check", "random inputs #1")


# 3. constant or partial output -----------------------------------------------------------------
@pytest.mark.gpu
def test_constant_output_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "constant_output.cu", "256x256x256"), "check", "relative error")


@pytest.mark.gpu
def test_partial_write_rejected(gpu):
    rejected(evaluate(gpu, DATA / "half_write.cu", "256x256x64"), "check", "unwritten")


# 4. changing inputs, writing outside C -----------------------------------------------------------
@pytest.mark.gpu
def test_modified_inputs_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "modifies_inputs.cu", "128x128x64"), "check", "modified its inputs")


@pytest.mark.gpu
def test_write_outside_c_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "out_of_bounds.cu", "128x128x64"), "check", "outside C")


# 5. precision -------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_fp16_accumulation_rejected_at_small_k(gpu):
    # K = 64: the {0,1} test alone needs K in the thousands; the cancelling inputs expose it at once
    rejected(evaluate(gpu, DATA / "fp16_acc.cu", "64x64x64"), "check", "cancelling")


@pytest.mark.gpu
def test_bf16_inputs_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "bf16_inputs.cu", "128x128x256"), "check", "full-mantissa", "bf16")


# 6. fast paths that never run, skipped tiles: checked on the exact shape --------------------------
@pytest.mark.gpu
def test_fast_path_rejected_on_exact_shape(gpu):
    assert evaluate(gpu, CHEATS / "fast_path.cu", "64x64x64").ok  # honest where small...
    rejected(evaluate(gpu, CHEATS / "fast_path.cu", "256x256x512"), "check", "unwritten")  # ...not on the timed shape


@pytest.mark.gpu
def test_skipped_block_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "skip_block.cu", "128x128x64"), "check", "unwritten")


# 7. deferring work across calls: caught by the per-repetition poison + checksum -------------------
@pytest.mark.gpu
def test_every_other_call_rejected_during_timing(gpu):
    err = rejected(evaluate(gpu, CHEATS / "every_other_call.cu", "256x256x256"), "time", "repetitions produced a wrong result")
    assert "unwritten" in err


# 9. physically impossible results ------------------------------------------------------------------
@pytest.mark.gpu
def test_faster_than_roofline_rejected(gpu):
    # the naive kernel against a bound it cannot beat (as if the ceilings said so): the measurement is refused
    rejected(evaluate(gpu, DATA / "naive.cu", "256x256x256", bound_us=1e6), "time", "faster than the roofline")
    assert evaluate(gpu, DATA / "naive.cu", "256x256x256", bound_us=0.001).ok


# 10. shape special-casing: strong re-check on off-tile shapes ---------------------------------------
@pytest.mark.gpu
def test_shape_special_case_fails_recheck(gpu):
    w = gpu[0]
    assert evaluate(gpu, CHEATS / "shape_special.cu", "256x256x256").ok  # it fools the exact-shape check...
    text, ks, r = _compiled(gpu, CHEATS / "shape_special.cu")
    res = w.call("recheck", timeout_s=120, problem=parse_shape("256x256x256"), source=text, cubin=r.cubin_path,
                 shapes=["77x200x72", "129x67x33"], seeds=3)
    assert not res["ok"] and res["shapes"]["256x256x256"] == "ok", res  # ...but not the off-tile shapes it claims
    assert "77x200x72" in res["error"]
    text, ks, r = _compiled(gpu, DATA / "naive.cu")
    res = w.call("recheck", timeout_s=120, problem=parse_shape("256x256x256"), source=text, cubin=r.cubin_path,
                 shapes=["77x200x72", "129x67x33"], seeds=3)
    assert res["ok"], res


# faults ----------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_too_much_shared_memory_recorded(gpu):
    w = gpu[0]
    restarts = w.restarts
    rejected(evaluate(gpu, CHEATS / "too_much_smem.cu", "64x64x64"), "check", "shared memory")
    assert w.restarts == restarts  # recorded, no crash
    assert evaluate(gpu, DATA / "naive.cu", "64x64x64").ok


@pytest.mark.gpu
def test_worker_sigkill_mid_request(gpu):
    w = gpu[0]
    text, ks, r = _compiled(gpu, DATA / "hang.cu")
    restarts = w.restarts
    pid = w.proc.pid
    threading.Timer(3.0, lambda: os.kill(pid, signal.SIGKILL)).start()
    t0 = time.monotonic()
    with pytest.raises(WorkerFault, match="crash"):
        w.call("evaluate", timeout_s=60, problem=parse_shape("64x64x64"), source=text, cubin=r.cubin_path, h=ks.hash)
    assert time.monotonic() - t0 < 50
    assert w.restarts == restarts + 1 and w.proc.pid != pid
    assert evaluate(gpu, DATA / "naive.cu", "64x64x64").ok


# 8. undefined behaviour: compute-sanitizer ----------------------------------------------------------
@pytest.mark.gpu
def test_sanitizer_flags_uninitialised_shared_memory(gpu):
    from evo.sanitize import find_sanitizer, sanitize

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not available")
    text, ks, r = _compiled(gpu, CHEATS / "uninit_smem.cu")
    rep = sanitize(str(CHEATS / "uninit_smem.cu"), r.cubin_path, parse_shape("64x64x64"), tools=("racecheck",))
    assert rep.available and not rep.ok, rep
    assert rep.tools[0].first_error, rep
    text, ks, r = _compiled(gpu, DATA / "naive.cu")
    rep = sanitize(str(DATA / "naive.cu"), r.cubin_path, parse_shape("64x64x64"))
    assert rep.ok, rep
    text, ks, r = _compiled(gpu, CHEATS / "out_of_bounds.cu")
    rep = sanitize(str(CHEATS / "out_of_bounds.cu"), r.cubin_path, parse_shape("64x64x64"), tools=("memcheck",))
    assert not rep.ok and "Invalid" in rep.tools[0].first_error, rep

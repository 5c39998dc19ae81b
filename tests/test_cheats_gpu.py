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


def _compiled(gpu, path, ptx_checks=True):
    import dataclasses

    w, comp, _ = gpu
    if not ptx_checks:  # a kernel the static PTX gate refuses, built anyway to show what the GPU-side defences do
        comp = dataclasses.replace(comp, ptx_checks=False, locks={})
    text = Path(path).read_text()
    ks = KernelSource.parse(text)
    r = comp.compile(ks, w.info.arch)
    assert r.ok, r.error
    return text, ks, r


def evaluate(gpu, path, shape, ptx_checks=True, **kw):
    w = gpu[0]
    text, ks, r = _compiled(gpu, path, ptx_checks)
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
        assert ev.check.checks == gpu[2].check.seeds + 1 + 1 + 3  # seeds, same buffers, ordinary-data exact, 3 exact


# 2. stale output / caches across calls ---------------------------------------------------------
@pytest.mark.gpu
def test_stale_output_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "stale_output.cu", "256x256x256"), "check", "unwritten")


@pytest.mark.gpu
def test_pointer_keyed_cache_rejected(gpu):
    # its cache is a __device__ array: refused at compile (module-scope state); built anyway, the check sees it
    with pytest.raises(AssertionError, match="module-scope state"):
        _compiled(gpu, CHEATS / "pointer_cache.cu")
    rejected(evaluate(gpu, CHEATS / "pointer_cache.cu", "256x256x256", ptx_checks=False), "check", "same buffers, new values")


@pytest.mark.gpu
def test_shape_keyed_cache_rejected(gpu):
    with pytest.raises(AssertionError, match="module-scope state"):
        _compiled(gpu, CHEATS / "shape_cache.cu")
    rejected(evaluate(gpu, CHEATS / "shape_cache.cu", "256x256x256", ptx_checks=False), "check", "random inputs #1")


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
@pytest.mark.parametrize("shape", ["64x64x64", "256x256x256", "128x128x4096"])
def test_fp16_accumulation_rejected(gpu, shape):
    # the fp32-accumulation bound on random inputs (K >= 256 by design; K = 64 too), before any exact test; at
    # large K the 1e-2 relative error of the same comparison may see it first
    err = rejected(evaluate(gpu, DATA / "fp16_acc.cu", shape), "check", "random inputs #0")
    assert "fp32-accumulation bound" in err or "elements off" in err, err


@pytest.mark.gpu
def test_bf16_inputs_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "bf16_inputs.cu", "128x128x256"), "check", "fp32-accumulation bound")


# 6. fast paths that never run, skipped tiles: checked on the exact shape --------------------------
@pytest.mark.gpu
def test_fast_path_rejected_on_exact_shape(gpu):
    assert evaluate(gpu, CHEATS / "fast_path.cu", "64x64x64").ok  # honest where small...
    rejected(evaluate(gpu, CHEATS / "fast_path.cu", "256x256x512"), "check", "unwritten")  # ...not on the timed shape


@pytest.mark.gpu
def test_skipped_block_rejected(gpu):
    rejected(evaluate(gpu, CHEATS / "skip_block.cu", "128x128x64"), "check", "unwritten")


# 7. deferring work across calls: its launch counter is module state (refused at compile); without that gate,
# the per-call poison + checksum reject it during timing
@pytest.mark.nvcc
def test_every_other_call_refused_at_compile(tmp_path):
    from evo.config import load_config

    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path)}}).compile)
    r = comp.compile(KernelSource.parse((CHEATS / "every_other_call.cu").read_text()), "sm_90a")
    assert not r.ok and "module-scope state" in r.error, r.error


@pytest.mark.gpu
def test_every_other_call_rejected_during_timing(gpu):
    err = rejected(evaluate(gpu, CHEATS / "every_other_call.cu", "256x256x256", ptx_checks=False), "time", "call #")
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


# --- the eight classes of cheats a suite written against the ABI got through (docs/evaluator.md) ------------
# Each test fails when its defence is switched off: EVO_TEST_DEFENCES_OFF=<name> python -m pytest -k <test>.

@pytest.mark.gpu
def test_class1_memo_of_repeated_inputs_never_replays(gpu):
    # inputs are generated anew on the device before every call: a result memo keyed on input values never
    # hits, so the memo kernel times like its own honest path (naive.cu plus a fingerprint); with repeated
    # input sets (fresh_inputs off) it replays copies and times far below it
    honest = evaluate(gpu, DATA / "naive.cu", "1024x1024x1024")
    memo = evaluate(gpu, CHEATS / "memo_sampled.cu", "1024x1024x1024")
    assert honest.ok and memo.ok, (honest.error, memo.error)
    assert memo.time_us > 0.8 * honest.time_us, (memo.time_us, honest.time_us)


@pytest.mark.gpu
def test_class2_timed_calls_look_like_checked_ones(gpu):
    # cheats on every call past its 8th launch (one element of C): the full comparisons sit at random timed
    # calls prepared exactly like the others, so they see it (random_checks off: they check warm-up calls)
    err = rejected(evaluate(gpu, CHEATS / "timed_only.cu", "4096x4096x64"), "time")
    assert "compared in full" in err or "sampled elements" in err, err  # a sampled row/col may see it first


@pytest.mark.gpu
def test_class3_fp16_accumulation_in_timed_calls_rejected(gpu):
    # honest through the check, fp16 accumulation afterwards: the sampled rows/cols of every call are held to the
    # fp32-accumulation bound (tight_bound off: a loose checksum and 1e-2 let it through)
    rejected(evaluate(gpu, CHEATS / "fp16_acc_late.cu", "1024x1024x256"), "time", "fp32-accumulation bound")


@pytest.mark.gpu
def test_class4_exact_tests_cannot_be_recognised(gpu):
    # honest on values that look like an exact test, B rounded to bf16 otherwise: the bound and the exact test on
    # ordinary data (the timed calls' generator) reject it on the first random inputs
    rejected(evaluate(gpu, CHEATS / "bf16_unless_exact.cu", "256x256x1024"), "check", "fp32-accumulation bound")


@pytest.mark.gpu
def test_class5_evaluate_cli_refuses_times_below_the_roofline(tmp_path):
    # with repeated inputs (fresh_inputs off, to let the replay happen at all) python -m evo.evaluate itself
    # measures the ceilings and refuses the replayed time (roofline off: reported as a win over cuBLAS)
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    off = ",".join(x for x in (os.environ.get("EVO_TEST_DEFENCES_OFF", ""), "fresh_inputs") if x)
    env = dict(os.environ, EVO_TEST_DEFENCES_OFF=off, PYTHONPATH=os.pathsep.join(
        x for x in (str(root), os.environ.get("PYTHONPATH", "")) if x))
    proc = subprocess.run([sys.executable, "-m", "evo.evaluate", str(CHEATS / "replay_fast.cu"), "--shape", "4096x4096x1024",
                           "--reps", "20"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "faster than the roofline" in out, out[-3000:]


@pytest.mark.gpu
def test_class6_state_does_not_survive_a_phase(gpu):
    # a __device__ launch counter (refused at compile by the PTX gate; built here without it): every phase loads
    # the module anew, so a second evaluation's check sees launch 0 again and the cheat, honest for 8 launches,
    # is caught in timing both times (fresh_module off: the second evaluation's check already sees it cheat)
    for _ in range(2):
        rejected(evaluate(gpu, CHEATS / "state_in_globals.cu", "256x256x256", ptx_checks=False), "time", "unwritten")


@pytest.mark.nvcc
@pytest.mark.parametrize("name", ["splitk_no_fence.cu", "splitk_arrive_next_turn.cu", "splitk_arrive_in_call.cu"])
def test_class7_unfenced_split_k_refused_at_compile(tmp_path, name):
    # in program order; along a loop's back edge (the arrival at the top of the next turn); inside a callee
    from evo.config import load_config

    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path)}}).compile)
    r = comp.compile(KernelSource.parse((CHEATS / name).read_text()), "sm_90a")
    assert not r.ok and "publication race" in r.error, r.error


@pytest.mark.gpu
def test_class8_memcheck_sees_a_read_past_a(gpu):
    # correct output (the read lands in the evaluator's guard band), but memcheck on exactly sized allocations
    # with padding behind them flags the read 4 KiB past A (sanitizer_padding off: it reads the next buffer)
    from evo.sanitize import find_sanitizer, sanitize

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not available")
    assert evaluate(gpu, CHEATS / "oob_read_4k.cu", "64x64x64").ok
    text, ks, r = _compiled(gpu, CHEATS / "oob_read_4k.cu")
    rep = sanitize(str(CHEATS / "oob_read_4k.cu"), r.cubin_path, parse_shape("64x64x64"), tools=("memcheck",))
    assert not rep.ok and "Invalid __global__ read" in rep.tools[0].first_error, rep


@pytest.mark.gpu
def test_class8_wgmma_champion_passes_the_sanitizer(gpu):
    # the stored 4096x4096x1024 champion: memcheck passes (CUDA API errors are not kernel errors), not "inconclusive"
    from evo.sanitize import find_sanitizer, sanitize

    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not available")
    # any committed table's champion will do (the H100 and H200 tables both hold one): the test is about the
    # sanitizer on a real TMA + wgmma kernel, not about one GPU's table
    tables = Path(__file__).resolve().parent.parent / "kernels_out"
    found = sorted(tables.glob("*/TN/4096x4096x1024.cu"))
    if not found:
        pytest.skip(f"no stored 4096x4096x1024 champion under {tables}")
    champ = found[0]
    text, ks, r = _compiled(gpu, champ)
    rep = sanitize(str(champ), r.cubin_path, parse_shape("4096x4096x1024"), tools=("memcheck",))
    assert rep.ok and all(t.note != "inconclusive" for t in rep.tools), rep.line()

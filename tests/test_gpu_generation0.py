"""On a GPU: generation 0 yields a correct kernel on the small shapes, even with a budget spent at once.

A search with a 3-second budget on 64x64x64, 64x128x128 (a shape that once ended with no correct evo
kernel) and 128x64x512: generation 0 is evaluated past the budget until one candidate is correct, so
every shape ends with an exported, correct kernel. The families are the tensor-core families that
apply to small shapes plus the simt floor (keeps the test's compiles short); the sanitizer is off
(the evaluator's own tests cover it).

    python -m pytest -q tests/test_gpu_generation0.py      # GPU machine
"""
from __future__ import annotations

import io

import pytest

from evo.config import load_config
from evo.problem import parse_shape
from evo.search import Search

pytestmark = pytest.mark.gpu

FAMILIES = ["mma_small_sm80", "mma_sm80", "simt"]


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    from conftest import gpu_worker_session

    yield from gpu_worker_session(tmp_path_factory.mktemp("gen0"), reps=10)


def test_the_checker_warms_up_once_a_worker_on_the_exact_product(gpu):
    # the checker's, fresh inputs' and timer's CuPy kernels compiled before a search's budget (28-50 s of NVRTC on
    # a bare machine, which the first candidate paid): the exact product passes every check and timed-call verification
    w, _, _ = gpu
    first = w.call("warmup", timeout_s=600)
    print(first)
    assert first["ok"], first["error"]
    assert w.call("warmup", timeout_s=60) == {"seconds": 0.0, "ok": True, "error": "", "first": False}


@pytest.mark.parametrize("shape", ["64x64x64", "64x128x128", "128x64x512"])
def test_generation_zero_yields_a_correct_kernel(gpu, shape, tmp_path_factory):
    w, comp, base = gpu
    tmp = tmp_path_factory.getbasetemp()
    cfg = load_config(overrides={
        "search": {"budget_minutes": 0.05, "families": FAMILIES, "confirm_reps": 20},
        "check": {"sanitize": False},
        "timing": {"reps": 10},
        "paths": {"db": str(tmp / "gen0.db"), "out": str(tmp / "gen0_out")},
        "compile": {"cache_dir": base.compile.cache_dir}})
    out = io.StringIO()
    summary = Search(parse_shape(shape), cfg, out=out, compiler=comp, worker=w).run()
    text = out.getvalue()
    print(text[-3000:])
    assert summary.best_us > 0 and summary.kernel_path, text[-3000:]
    assert summary.correct >= 1

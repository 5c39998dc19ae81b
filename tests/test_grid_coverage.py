"""No shape without a correct evo kernel.

* The grid's corners (shapes/grid1000.yaml: M, N, K = 64, 128, 16384 and the small shapes of the issue),
  plus odd sizes, walked through every family's `requires`: each has a valid instance of a tensor-core
  family that compiles for sm_90a, and generation 0 of the default proposer contains one (the small-shape
  family's wherever K % 8 == 0).
* The search: when the time budget ends while generation 0 still compiles, compiled candidates are still
  evaluated until one is correct (a shape once ended with no kernel: 64x128x128); candidates are
  evaluated as their compiles finish.
"""
from __future__ import annotations

import io
import json
import itertools
import random
import time
from pathlib import Path

import pytest
import yaml

from evo.config import load_config
from evo.families import load_families
from evo.problem import parse_shape
from evo.proposers.base import ProposalContext
from evo.proposers.mutate import MutateProposer
from evo.search import Search
from evo.select import Selector
from fakes import FAKE_GPU, FakeCompiler, FakeWorker

ROOT = Path(__file__).resolve().parent.parent
GRID = yaml.safe_load((ROOT / "shapes" / "grid1000.yaml").read_text())["grid"]
CORNER_VALUES = sorted({GRID["m"][0], GRID["m"][1], GRID["m"][-1]})  # 64, 128, 16384
CORNERS = [f"{m}x{n}x{k}" for m, n, k in itertools.product(CORNER_VALUES, repeat=3)]
SMALL = ["64x128x128", "128x64x512", "64x64x64", "64x64x128", "128x128x16384", "2048x12288x128", "16384x16384x128"]
ODD = ["77x1000x333", "1x1x1", "100x100x104", "4095x17x8"]
TENSOR_CORE = {"mma_sm80", "mma_small_sm80", "cute_sm80", "wgmma_sm90", "wgmma_skinny_sm90", "gemv_sm80"}


def _accepting_instance(fam, prob, starts_only=False):
    """A valid instance of fam whose rendering accepts prob (starts first, then the space in order)."""
    for p in itertools.chain(fam.start_instances(), () if starts_only else fam.valid_instances()):
        ks = fam.render(p, prob)
        if ks.accepts(prob, FAKE_GPU.sm_count):
            return ks
    return None


def test_grid_corners_are_the_grid_values():
    assert CORNER_VALUES == [64, 128, 16384] and len(CORNERS) == 27


@pytest.mark.parametrize("shape", CORNERS + SMALL + ODD)
def test_every_shape_has_a_tensor_core_instance_for_sm90a(shape):
    prob = parse_shape(shape)
    fams = load_families(arch="sm_90a")
    by_name = {f.name: f for f in fams}
    assert _accepting_instance(by_name["mma_sm80"], prob), f"{shape}: no valid mma_sm80 instance"
    # the small-shape family's starts alone cover every shape with K % 8 == 0 (cp.async chunks) of up to 2^33 MACs
    small = prob.k % 8 == 0 and prob.m * prob.n * prob.k <= 2 ** 33
    assert bool(_accepting_instance(by_name["mma_small_sm80"], prob, starts_only=True)) == small, shape


@pytest.mark.parametrize("shape", CORNERS[:9] + SMALL[:4] + ODD[:2])
def test_generation_zero_contains_a_tensor_core_candidate(shape):
    prob = parse_shape(shape)
    fams = load_families(arch="sm_90a")
    ctx = ProposalContext(prob, "sm_90a", FAKE_GPU, fams, [], [], random.Random(0))
    proposals = MutateProposer(Selector(16, 4, 3), 0.0, 2).propose(ctx, 0)
    from evo.kernel import KernelSource

    kinds = [KernelSource.parse(p.source) for p in proposals]
    assert kinds and all(ks.accepts(prob, FAKE_GPU.sm_count) for ks in kinds)
    names = {ks.meta.family for ks in kinds}
    assert names & TENSOR_CORE, f"{shape}: generation 0 has no tensor-core kernel ({names})"
    if prob.k % 8 == 0 and prob.m * prob.n * prob.k <= 2 ** 33:
        assert "mma_small_sm80" in names


# ---------------------------------------------------------------------------------------
# the search: generation 0 is evaluated past the budget until a kernel is correct

TOY = str(Path(__file__).parent / "data" / "families")


class _SlowCompiler(FakeCompiler):
    """Every compile takes 50 ms and is logged, so the budget ends during generation 0's compiles."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def compile(self, ks, arch):
        time.sleep(0.05)
        self.log.append(("compile", ks.hash))
        return super().compile(ks, arch)


class _LoggingWorker(FakeWorker):
    log: list = []

    def call(self, op, timeout_s, **kw):
        if op == "evaluate":
            _LoggingWorker.log.append(("evaluate", kw["h"]))
        return super().call(op, timeout_s, **kw)


def test_budget_spent_during_generation_zero_still_yields_a_kernel(tmp_path):
    log: list = []
    _LoggingWorker.log = log
    cfg = load_config(overrides={
        "search": {"budget_minutes": 0.0005, "max_candidates": 0, "children": 6, "population": 6, "elites": 2,
                   "initial_random": 4, "seed": 1},
        "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": TOY}})
    out = io.StringIO()
    s = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=_LoggingWorker, compiler=_SlowCompiler(log))
    summary = s.run()
    assert summary.best_us > 0, out.getvalue()  # a correct kernel although the 30 ms budget ended first
    assert summary.stop_reason == "time budget spent"
    compiles = [h for op, h in log if op == "compile"]
    evals = [h for op, h in log if op == "evaluate"]
    # bounded: past the budget the compiles end with the first correct kernel (the generation's other proposals are
    # dropped, not compiled with the GPU idle), and each is evaluated as its compile finishes
    assert 1 <= len(evals) == len(compiles) < 6
    first = log.index(("evaluate", evals[0]))
    assert log[first - 1] == ("compile", evals[0])


def test_generation_zero_times_every_known_good_start_even_past_the_budget(tmp_path):
    # a fresh machine can spend a short budget on its first compiles and evaluation: the family's vetted starts
    # are still timed (and nothing else past the budget once a kernel is correct)
    import shutil

    fams = tmp_path / "families"
    shutil.copytree(Path(TOY), fams)
    starts = [{"TILE": 8, "UNROLL": 2}, {"TILE": 16, "UNROLL": 1, "PAD": 2}, {"TILE": 8, "UNROLL": 4, "PAD": 1}]
    with open(fams / "toy" / "family.yaml", "a") as f:
        f.write("starts:\n" + "".join(f"  - {json.dumps(s)}\n" for s in starts))
    log: list = []
    _LoggingWorker.log = log
    cfg = load_config(overrides={
        "search": {"budget_minutes": 0.0005, "max_candidates": 0, "children": 8, "population": 8, "elites": 2,
                   "initial_random": 4, "seed": 1},
        "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": str(fams)}})
    out = io.StringIO()
    s = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=_LoggingWorker, compiler=_SlowCompiler(log))
    summary = s.run()
    assert summary.stop_reason == "time budget spent"

    (fam,) = load_families(fams, names=["toy"])
    start_hashes = {fam.render(fam.complete(p)).hash for p in [{}] + starts}  # the default instance is a start too
    evals = [h for op, h in log if op == "evaluate"]
    assert start_hashes <= set(evals), out.getvalue()
    compiles = [h for op, h in log if op == "compile"]
    # and the compiles end there: the generation's other proposals are dropped (a later generation or run proposes
    # again), at most the first correct kernel besides the starts
    assert len(compiles) <= len(start_hashes) + 1

"""A short guided search on a real GPU: the prior's generation 0, the cost model trained on the archive of a first
shape ranking the proposals of a second, staged timing, and a correct exported kernel.

    python -m pytest -m gpu -q tests/test_search_gpu.py      (about 4 minutes on an H100/H200: two short searches)
"""
import io
from pathlib import Path

import pytest

import evo.cost_model
from evo.compile import Compiler
from evo.config import load_config
from evo.gpu.worker import GpuWorker
from evo.problem import parse_shape
from evo.search import Search
from evo.store import Store

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guided")
    cfg = load_config(overrides={
        "paths": {"db": str(tmp / "evo.db"), "out": str(tmp / "out")},
        "compile": {"cache_dir": str(tmp / "cache")},
        "search": {"families": ["wgmma_sm90", "mma_sm80"], "budget_minutes": 2.0, "max_candidates": 40,
                   "children": 6, "initial_random": 0, "prior_top": 8, "confirm_reps": 30, "screen_reps": 5,
                   "patience_seconds": 0},
        "check": {"sanitize": False},
        "timing": {"timeout_s": 60}})
    w = GpuWorker(cfg)
    w.start()
    try:
        yield w, Compiler.from_config(cfg.compile), cfg
    finally:
        w.stop()


def test_guided_search_finds_a_correct_kernel_with_a_trained_cost_model(session, monkeypatch):
    w, comp, cfg = session
    monkeypatch.setattr(evo.cost_model, "MIN_ROWS", 10)  # one short search makes a small archive
    monkeypatch.setattr(evo.cost_model, "MIN_SHAPES", 1)
    first = io.StringIO()
    s1 = Search(parse_shape("1024x1024x4096"), cfg, out=first, compiler=comp, worker=w).run()
    assert s1.best_hash, first.getvalue()[-3000:]
    assert "prior " in _ideas(cfg, "1024x1024x4096")  # generation 0 came from the prior (after the ~25 starts this shape suits)
    out = io.StringIO()
    s2 = Search(parse_shape("512x2048x4096"), cfg, out=out, compiler=comp, worker=w).run()
    text = out.getvalue()
    print(text[-4000:])
    assert "guide: cost model trained on" in text
    assert s2.best_hash and s2.best_us > 0 and Path(s2.kernel_path).is_file()
    store = Store(cfg.paths.db)
    try:
        row = store.confirm("512x2048x4096", "TN", w.info.key)
        assert row is not None and row["hash"] == s2.best_hash  # re-timed side by side before export
        stages = {r[0] for r in store.rows("SELECT stage FROM evaluations WHERE shape='512x2048x4096'")}
        assert "done" in stages
        print("stages:", sorted(stages), "best-so-far:", store.best_so_far("512x2048x4096", "TN", w.info.key))
    finally:
        store.close()


def _ideas(cfg, shape):
    store = Store(cfg.paths.db)
    try:
        return " | ".join(r[0] for r in store.rows(
            "SELECT c.idea FROM candidates c JOIN evaluations e ON e.hash=c.hash WHERE e.shape=?", (shape,)))
    finally:
        store.close()

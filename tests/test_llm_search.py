"""The llm proposer inside the real search loop (fake GPU worker, fake compiler, demo LLM server)."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

import evo.search as search_mod
from evo.config import load_config
from evo.problem import parse_shape
from evo.proposers.llm.client import DEFAULT_KEY_ENV
from evo.records import CompileResult
from evo.search import Search
from evo.testing.fake_llm import DemoScript, FakeLlmServer
from fakes import FakeCompiler, FakeWorker

TOY = str(Path(__file__).parent / "data" / "families")


PTXAS = ("ptxas info    : Compiling entry function 'evo_gemm' for 'sm_90a'\n"
         "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
         "ptxas info    : Used 90 registers, 2048 bytes smem, 400 bytes cmem[0]\n")


class DemoCompiler(FakeCompiler):
    """Also fails the demo's deliberately broken kernels, with a compiler log; compiled kernels get a ptxas report."""

    def compile(self, ks, arch):
        if "evo_demo_undefined_" in ks.text:
            self.compiled.append(ks.hash)
            return CompileResult(ks.hash, arch, False, error='error: identifier "evo_demo_undefined" is undefined',
                                 log='kernel.cu(12): error: identifier "evo_demo_undefined" is undefined\n1 error detected')
        r = super().compile(ks, arch)
        r.log = PTXAS if r.ok else r.log
        return r


def test_search_with_llm_and_mutate(tmp_path, monkeypatch):
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    built = []
    real_build = search_mod.build_proposers
    monkeypatch.setattr(search_mod, "build_proposers", lambda cfg, sel, **kw: built.extend(real_build(cfg, sel, **kw)) or built)
    with FakeLlmServer(DemoScript()) as srv:
        cfg = load_config(overrides={
            "search": {"budget_minutes": 0, "max_candidates": 40, "children": 6, "population": 6, "elites": 2,
                       "initial_random": 4, "seed": 1, "proposers": ["llm", "mutate"]},
            "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": TOY},
            "llm": {"endpoints": [{"base_url": srv.base_url, "model": "fake"}], "backoff_s": 0.001},
        })
        out = io.StringIO()
        summary = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=DemoCompiler()).run()
    llm = next(p for p in built if p.name == "llm")
    s = llm.stats()
    assert s["proposals"] > 0 and s["compiled"] > 0 and s["correct"] > 0
    assert s["fix_requests"] >= 1 and s["fixed"] >= 1
    assert s["unusable"].get("no_code", 0) >= 1 and s["retries"] >= 1
    assert any(line.startswith("llm:") for line in summary.proposer_lines)
    assert any("Failing kernel" in q and "evo_demo_undefined" in q for q in srv.prompts())


def test_llm_only_search_bounds_requests_keeps_conversations_and_profiles_parents(tmp_path, monkeypatch, capsys):
    """--max-candidates bounds the chat requests (fixes included); every conversation is stored; a stored prompt
    carries the parent's ptxas report and Nsight Compute metrics (stand-in ncu), printed by evo.conversations."""
    from evo import conversations
    from evo.store import Store

    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu.log"))
    ncu = str(Path(__file__).parent / "data" / "fake_ncu.py")
    with FakeLlmServer(DemoScript()) as srv:
        cfg = load_config(overrides={
            "search": {"budget_minutes": 0, "max_candidates": 20, "children": 3, "population": 6, "elites": 2,
                       "initial_random": 2, "seed": 3, "proposers": ["mutate", "llm"], "proposer_weights": {"mutate": 1, "llm": 1}},
            "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": TOY},
            "llm": {"url": srv.base_url, "model": "fake", "backoff_s": 0.001, "ncu": ncu, "profile": True},
        })
        out = io.StringIO()
        Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker,
               compiler=DemoCompiler(cache_dir=tmp_path / "cubins")).run()
    text = out.getvalue()
    assert srv.preflights == 1
    store = Store(tmp_path / "evo.db")
    rows = store.conversations()
    assert 0 < len(rows) <= 20  # one conversation per request; its retries (the demo's 429s) are attempts of it
    assert sum(r["attempts"] for r in rows) == len(srv.requests)
    improved = [r for r in rows if "Nsight Compute, one launch of the parent" in r["messages"]]
    assert improved, "no stored prompt carries profiler metrics"
    assert "Used 90 registers" in improved[0]["messages"]
    assert " llm " in text or " llm    " in text  # the candidate lines name their proposer
    capsys.readouterr()
    assert conversations.main(["--db", str(tmp_path / "evo.db"), "show", str(improved[0]["id"])]) == 0
    shown = capsys.readouterr().out
    assert "ptxas report of the parent" in shown and "tensor pipe busy" in shown and "prompt size: ~" in shown


def test_candidate_limit_bounds_llm_requests(tmp_path, monkeypatch):
    """--proposer llm --max-candidates 2 sends at most 2 chat requests (plus the preflight), whatever comes back."""
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    with FakeLlmServer(DemoScript()) as srv:
        cfg = load_config(overrides={
            "search": {"budget_minutes": 0, "max_candidates": 2, "children": 12, "proposers": ["llm"], "seed": 1},
            "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": TOY},
            "llm": {"url": srv.base_url, "model": "fake", "backoff_s": 0.001, "profile": False},
        })
        out = io.StringIO()
        Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=DemoCompiler()).run()
    assert 0 < len(srv.requests) <= 2 and srv.preflights == 1


def test_missing_ncu_is_said_once_and_the_search_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    with FakeLlmServer(DemoScript()) as srv:
        cfg = load_config(overrides={
            "search": {"budget_minutes": 0, "max_candidates": 16, "children": 3, "seed": 3, "proposers": ["mutate", "llm"]},
            "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": TOY},
            "llm": {"url": srv.base_url, "model": "fake", "backoff_s": 0.001, "ncu": "/nonexistent/ncu", "profile": True},
        })
        out = io.StringIO()
        Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker,
               compiler=DemoCompiler(cache_dir=tmp_path / "cubins")).run()
    text = out.getvalue()
    assert text.count("note: Nsight Compute (/nonexistent/ncu) not found") == 1
    prompts = [q for q in srv.prompts() if "ptxas report of the parent" in q]
    assert prompts and all("Nsight Compute, one launch" not in q for q in prompts)
    assert any("Nsight Compute: no profile (Nsight Compute (/nonexistent/ncu) not found)" in q for q in prompts)


def test_sweep_sends_the_preflight_once_not_per_shape(tmp_path, monkeypatch):
    from evo.sweep import run_sweep

    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    with FakeLlmServer(DemoScript()) as srv:
        cfg = load_config(overrides={
            "search": {"budget_minutes": 0, "max_candidates": 2, "children": 4, "proposers": ["llm", "mutate"],
                       "seed": 1, "seed_winners": 0},
            "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": TOY},
            "llm": {"url": srv.base_url, "model": "fake", "backoff_s": 0.001, "profile": False},
        })
        assert search_mod.llm_preflight(cfg) and srv.preflights == 1  # what evo.sweep's main sends
        outcome = run_sweep([parse_shape(s) for s in ("256x256x256", "128x256x512")], cfg, device_ids=[0],
                            worker_factory=FakeWorker, compiler=DemoCompiler(), out=io.StringIO())
    assert outcome.exit_code == 0 and srv.preflights == 1

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


class DemoCompiler(FakeCompiler):
    """Also fails the demo's deliberately broken kernels, with a compiler log."""

    def compile(self, ks, arch):
        if "evo_demo_undefined_" in ks.text:
            self.compiled.append(ks.hash)
            return CompileResult(ks.hash, arch, False, error='error: identifier "evo_demo_undefined" is undefined',
                                 log='kernel.cu(12): error: identifier "evo_demo_undefined" is undefined\n1 error detected')
        return super().compile(ks, arch)


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

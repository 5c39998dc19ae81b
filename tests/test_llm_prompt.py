"""What an improve prompt carries (ptxas, Nsight Compute, the library's kernel, lineage, family best, datasheet
roofline, Hopper techniques, TmaDesc, CUTLASS headers, baselines in generation 1) and its token budget."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evo.config import load_config
from evo.kernel import KernelSource
from evo.problem import Problem
from evo.profile import Profiler
from evo.proposers.llm import LlmProposer
from evo.proposers.llm.client import DEFAULT_KEY_ENV
from evo.proposers.llm.prompt import cutlass_headers
from evo.records import BaselineResult, CompileResult, EvalResult, Individual
from evo.store import Store
from evo.testing import samples
from evo.testing.fake_llm import FakeLlmServer

DATA = Path(__file__).parent / "data"
PROBLEM = Problem(4096, 4096, 1024)
GPU = samples.gpu("NVIDIA H200")
PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'evo_gemm' for 'sm_90a'
ptxas info    : Function properties for evo_gemm
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
"""


def family_text(family: str, **params) -> str:
    """An instance of `family` when the templates render (the realistic prompt size), else a small kernel."""
    try:
        from evo.families import load_families

        fam = next(f for f in load_families() if f.name == family)
        return fam.render({**fam.default_params(), **params}, PROBLEM).text
    except Exception:  # noqa: BLE001 - templates/ is edited by others
        return samples.simt_kernel(16 + params.get("STAGES", 0), family=family)


def wgmma_text(**params) -> str:
    return family_text("wgmma_sm90", **params)


def put(store: Store, text: str, *, parent: str = "", proposer: str = "mutate", idea: str = "", ok: bool = True,
        time_us: float = 0.0, stage: str = "done", error: str = "", log: str = PTXAS) -> Individual:
    ks = KernelSource.parse(text)
    store.add_candidate(ks, parent, proposer, idea, "fake" if proposer == "llm" else "")
    store.add_compile(CompileResult(ks.hash, "sm_90a", stage != "compile", cubin_path="/tmp/none.cubin", log=log,
                                    registers=168, error=error if stage == "compile" else ""))
    store.add_evaluation(PROBLEM.key, PROBLEM.layout, GPU.key, EvalResult(ks.hash, ok, stage, error, time_us=time_us))
    return Individual(hash=ks.hash, family=ks.meta.family, params=dict(ks.meta.params), source=text, parent=parent,
                      proposer=proposer, idea=idea, compiled=stage != "compile", correct=ok, time_us=time_us, error=error)


@pytest.fixture()
def lineage(tmp_path, monkeypatch):
    """grandparent -> parent (llm) -> a failed child; a faster cousin of the same family."""
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    store = Store(tmp_path / "evo.db")
    gp = put(store, wgmma_text(STAGES=3), time_us=60.0)
    par = put(store, wgmma_text(STAGES=4), parent=gp.hash, proposer="llm", idea="deeper ring", time_us=50.0)
    put(store, wgmma_text(STAGES=5), parent=par.hash, proposer="llm", idea="five stages", ok=False, stage="compile",
        error="ptxas error: too much shared data")
    best = put(store, wgmma_text(STAGES=6), time_us=40.0)
    return store, gp, par, best


def propose_once(store, *population, budget: int | None = None, profile: bool = True, monkeypatch=None, tmp_path=None,
                 families=()):
    """The prompt for the population's first parent at `budget` tokens (default: the configured `llm.prompt_tokens`,
    what a search sends with), its stored conversation, and what the profiler said."""
    budget = load_config(None).llm.prompt_tokens if budget is None else budget
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu.log"))
    said: list[str] = []
    prof = Profiler(str(DATA / "fake_ncu.py"), 30, say=said.append) if profile else None
    with FakeLlmServer([{"content": "no code"}]) as srv:
        cfg = load_config(overrides={"llm": {"url": srv.base_url, "model": "fake", "edit_modes": ["full"],
                                             "concurrency": 1, "prompt_tokens": budget, "inspirations": 2}})
        p = LlmProposer.from_config(cfg, store=store, profiler=prof)
        ctx = samples.context(list(population), problem=PROBLEM,
                              baselines=[BaselineResult("cublas", 52.0), BaselineResult("cublaslt_autotune", 48.5)])
        ctx.gpu = GPU
        ctx.families = list(families)
        p.propose(ctx, 1)
    return srv.prompts()[0], store.conversations()[-1], said


def test_default_budget_keeps_an_inspiration(lineage, monkeypatch, tmp_path):
    """At the default `llm.prompt_tokens`, a wgmma_sm90 parent with every section still carries another family's
    fastest kernel as an inspiration, source and all: nothing is cut."""
    store, gp, par, best = lineage
    other_text = family_text("mma_sm80")
    other = put(store, other_text, time_us=45.0)
    default = load_config(None).llm.prompt_tokens
    text, conv, _ = propose_once(store, par, other, budget=default, monkeypatch=monkeypatch, tmp_path=tmp_path)
    sizes = json.loads(conv["sections"])
    assert sizes["inspirations"] > 0 and sizes["cut"] == [], sizes
    assert other_text.rstrip("\n") in text  # the inspiration's whole source


def test_prompt_carries_the_evidence(lineage, monkeypatch, tmp_path):
    store, gp, par, best = lineage
    text, conv, said = propose_once(store, par, monkeypatch=monkeypatch, tmp_path=tmp_path)
    assert said == []
    # measurements, datasheet roofline (not cuBLAS's rate)
    assert "time: 50.00 µs" in text and "vs cublaslt_autotune (48.50 µs" in text
    assert "Datasheet peaks of this GPU: 989 TFLOP/s dense fp16" in text and "4800 GB/s DRAM" in text
    # ptxas and Nsight Compute
    assert "ptxas report of the parent" in text and "Used 168 registers" in text and "0 bytes spill stores" in text
    assert "Nsight Compute, one launch of the parent (ncu --clock-control none" in text
    assert "tensor pipe busy (wgmma / GMMA), % of active cycles: 63.2%" in text
    assert "top warp stall reasons (cycles per issued instruction): barrier 2.10" in text
    assert "shared-memory load bank conflicts: 1024" in text
    # the library's kernel, with its configuration
    assert "cuBLAS runs library kernel `nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_TNT` (tile 256x128, BK 64, 4 stages, cluster 2x1" in text
    assert "the call ran 2 kernels:" in text and "splitKreduce_kernel 0.1 µs; together 12.5 µs" in text
    # lineage: the ancestor, the failed try from this parent; the family's best
    assert f"[ancestor] {gp.hash[:10]} wgmma_sm90 (mutate): 60.00 µs" in text
    assert "[child of this parent]" in text and "failed at compile: ptxas error: too much shared data. idea: five stages" in text
    assert f"] {par.hash[:10]} " not in text  # the parent is not its own lineage
    assert f"Best kernel of the parent's family (`wgmma_sm90`) on this shape\n{best.hash[:10]}: 40.00 µs" in text
    # Hopper techniques, TmaDesc, headers
    for s in ("Warp specialisation", "TMA multicast", "stream-K", "TMA-store epilogue", "wgmma.mma_async",
              "struct alignas(64) TmaDesc { unsigned char bytes[128]; };"):
        assert s in text, s
    for h in cutlass_headers():
        assert f"`<{h}>`" in text
    # stored: profiles and the prompt's size by section
    assert store.profile(par.hash, PROBLEM.key, PROBLEM.layout, GPU.key)["ok"] == 1
    assert store.profile("library:cublas", PROBLEM.key, PROBLEM.layout, GPU.key)["kernel"].startswith("nvjet")
    sizes = json.loads(conv["sections"])
    # at the configured budget nothing is cut, and the whole prompt stays within 24000 tokens (the parent's source is
    # most of it: ~81 KB of ~96 KB for wgmma_sm90)
    assert sizes["cut"] == [] and sizes["evidence"] > 0 and sizes["history"] > 0 and sizes["family_best"] > 0
    assert sizes["tokens_est"] <= 24000
    print(f"\nprompt: {len(text)} chars, ~{sizes['tokens_est']} tokens; sections: "
          + ", ".join(f"{k} {v}" for k, v in sizes.items() if isinstance(v, int)))


def test_profiles_are_reused_not_rerun(lineage, monkeypatch, tmp_path):
    store, _, par, _ = lineage
    propose_once(store, par, monkeypatch=monkeypatch, tmp_path=tmp_path)
    propose_once(store, par, monkeypatch=monkeypatch, tmp_path=tmp_path)
    assert len((tmp_path / "ncu.log").read_text().splitlines()) == 2  # the parent and the library, once each


def test_budget_cuts_the_least_useful_sections_first(lineage, monkeypatch, tmp_path):
    store, gp, par, best = lineage
    full, conv_full, _ = propose_once(store, par, best, monkeypatch=monkeypatch, tmp_path=tmp_path)
    total = json.loads(conv_full["sections"])["tokens_est"]
    small, conv, _ = propose_once(store, par, best, budget=total - 300, monkeypatch=monkeypatch, tmp_path=tmp_path)
    sizes = json.loads(conv["sections"])
    assert sizes["tokens_est"] <= total - 300
    assert "family_best" in sizes["cut"] and "evidence" not in sizes["cut"]
    assert par.source.rstrip() in small and "Nsight Compute, one launch" in small
    tiny, conv, _ = propose_once(store, par, best, budget=100, monkeypatch=monkeypatch, tmp_path=tmp_path)
    assert par.source.rstrip() in tiny and "time: 50.00 µs" in tiny  # never cut
    assert set(json.loads(conv["sections"])["cut"]) >= {"history", "techniques", "evidence", "library"}


def test_generation_one_parent_gets_baselines_and_stored_times(tmp_path, monkeypatch):
    """A family's start that nothing has timed: the prompt gives the libraries' times and the roofline,
    and once the archive holds its time, that time (never 'not measured yet')."""
    store = Store(tmp_path / "evo.db")
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    from evo.families import load_families

    fam = next(f for f in load_families() if f.name == "simt")  # generation 1: nothing timed, the family's default
    text = fam.render(fam.default_params(), PROBLEM).text
    prompt, _, _ = propose_once(store, profile=False, monkeypatch=monkeypatch, tmp_path=tmp_path, families=[fam])
    assert "not measured yet" not in prompt
    assert "has not been timed on this shape yet" in prompt
    assert "cublas on this shape: 52.00 µs" in prompt and "roofline bound:" in prompt
    put(store, text, time_us=45.0)  # timed since, but not in the population handed over (another island)
    prompt, _, _ = propose_once(store, profile=False, monkeypatch=monkeypatch, tmp_path=tmp_path, families=[fam])
    assert "time: 45.00 µs" in prompt and "vs cublas (52.00 µs" in prompt

"""bench.phase_trace instruments a family's kernel at fixed places: they must still be there (once each), and the
instrumented family must still render and declare a workspace for the stamps."""
from pathlib import Path

import pytest

from bench.phase_trace import SLOTS, TRACE_BYTES, TRACES, anchors_present, instrumented_templates
from evo.families import load_families
from evo.problem import Problem

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = {
    "wgmma_skinny_sm90": ({"BM": 64, "BN": 48, "CLK": 16, "CONSUMERS": 1, "G": 1, "STAGES": 8}, Problem(128, 128, 16384)),
    "wgmma_sm90": ({"BM": 128, "BN": 96, "PERSISTENT": 0, "STAGES": 6, "EPI": 1}, Problem(128, 12288, 256)),
}


@pytest.mark.parametrize("family", sorted(TRACES))
def test_every_anchor_is_in_the_template_once(family):
    text = (ROOT / "templates" / family / "kernel.cu").read_text()
    assert anchors_present(text, family) == []
    gone = TRACES[family].patches[3][0]
    assert anchors_present(text.replace(gone, ""), family) == [gone]


def test_a_deeper_indented_copy_of_an_anchor_is_another_place(tmp_path):
    """An indented anchor is matched where it starts a line: a new, more deeply indented line with the same statement
    (a second loop waiting on the ring) neither makes the anchor ambiguous nor receives its stamps."""
    text = (ROOT / "templates" / "wgmma_sm90" / "kernel.cu").read_text()
    anchor, _ = next(p for p in TRACES["wgmma_sm90"].patches if p[0].lstrip(" ").startswith("mbar_wait(smem_u32(&full_bar[s])"))
    marker = "  extern __shared__ uint8_t smem_raw[];\n"
    deeper = "    " + anchor  # the same wait, four columns further in
    with_copy = text.replace(marker, marker + "  if (0) {\n" + deeper + "  }\n", 1)
    assert with_copy.count(anchor) == 2 and anchors_present(with_copy, "wgmma_sm90") == []
    (src := tmp_path / "src" / "wgmma_sm90").mkdir(parents=True)
    for f in (ROOT / "templates" / "wgmma_sm90").iterdir():
        (src / f.name).write_text(f.read_text())
    (src / "kernel.cu").write_text(with_copy)
    out = (instrumented_templates(tmp_path / "out", "wgmma_sm90", tmp_path / "src") / "wgmma_sm90" / "kernel.cu").read_text()
    assert deeper + "  }\n" in out  # the copy is left as it was; the anchor's own line got the stamps
    assert out.count("if (i == 0 && j == 0) EVO_C(2);") == 1
    # and an anchor that is gone or repeated at line starts is named
    twice = text.replace(marker, marker + anchor, 1)
    assert anchors_present(twice, "wgmma_sm90") == [anchor]
    (src / "kernel.cu").write_text(twice)
    with pytest.raises(SystemExit, match="starts 2 lines"):
        instrumented_templates(tmp_path / "out2", "wgmma_sm90", tmp_path / "src")


@pytest.mark.parametrize("family", sorted(TRACES))
def test_instrumented_family_renders_with_a_trace_workspace(tmp_path, family):
    (fam,) = load_families(instrumented_templates(tmp_path, family), names=[family])
    params, problem = INSTANCES[family]
    ks = fam.render(fam.complete(params))
    stamps = len(TRACES[family].phases)
    macros = ("EVO_T", "EVO_C", "EVO_M")
    assert sum(ks.text.count(f"{m}(") for m in macros) >= 1 + stamps  # the macros and one stamp per phase
    for i in range(stamps):
        assert f"(({i}))" not in ks.text and any(f"{m}({i})" in ks.text for m in macros)
    launch = ks.launch(problem, 132)
    assert launch.workspace >= launch.grid[0] * SLOTS * 8  # four rows of 8 slots per CTA
    assert TRACE_BYTES >= 16384 * SLOTS * 8  # the region holds a 16384-CTA grid's slots


def test_ping_pong_stamps_take_the_later_consumer(tmp_path):
    """wgmma_sm90's phases after the first stage are stamped by each consumer into its own row, and the reader takes
    the later (a ping-pong CTA's last unit may be consumer 1's: stamped by consumer 0 alone, a 4096^2 x 1024 trace
    ended one unit early); the first stage is consumer 0's."""
    (fam,) = load_families(instrumented_templates(tmp_path, "wgmma_sm90"), names=["wgmma_sm90"])
    text = fam.render(fam.complete({"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 6, "EPI": 1, "GROUP": 8})).text
    assert f"evo_trace[blockIdx.x * {SLOTS} + 8 * (threadIdx.x / 128 - 1) + (i)] = t_" in text  # consumer c: row c
    assert "threadIdx.x >= 128 && threadIdx.x % 128 == 0" in text
    assert all(f"EVO_M({i})" in text and f"EVO_C({i})" not in text for i in range(3, 8))
    assert "EVO_C(2)" in text and "EVO_M(2)" not in text


@pytest.mark.nvcc
@pytest.mark.parametrize("waits", [False, True])
def test_instrumented_ping_pong_compiles(tmp_path, waits):
    from evo.compile import Compiler
    from evo.config import load_config

    (fam,) = load_families(instrumented_templates(tmp_path, "wgmma_sm90", waits=waits), names=["wgmma_sm90"])
    ks = fam.render(fam.complete({"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 6, "EPI": 1, "GROUP": 8}))
    assert ("%%clock64" in ks.text) == waits
    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path / "cache")}}).compile)
    r = comp.compile(ks, "sm_90a")
    assert r.ok and not r.spill_bytes, r.error


def test_waits_wrap_every_ring_wait_and_store_next_to_the_exit_stamps(tmp_path):
    """--waits counts the producer's free-stage wait, the consumers' full-stage waits (the main loop's and both
    EARLY_STORE paths'), ping-pong's turn waits and split-K's spins on the other splits; the producer stores its counts after its last load, each consumer
    right after its exit stamp. Without --waits every wait is left as it is."""
    on = (instrumented_templates(tmp_path / "on", "wgmma_sm90", waits=True) / "wgmma_sm90" / "kernel.cu").read_text()
    off = (instrumented_templates(tmp_path / "off", "wgmma_sm90") / "wgmma_sm90" / "kernel.cu").read_text()
    assert on.count("EVO_WAITF(i == 0, mbar_wait(") == 2 and on.count("EVO_WAITF(nk == 1, mbar_wait(") == 1
    assert "EVO_WAIT(evo_wf, __VA_ARGS__); if (first) evo_wf0 += evo_wf - f_;" in on and "w_[3] = evo_wf0;" in on
    assert on.count("EVO_WAIT(evo_we, mbar_wait(smem_u32(&empty_bar[ps])") == 1
    assert "EVO_WAIT(evo_wo, if (c == 1) mbar_wait(smem_u32(&order_bar[1])" in on
    assert on.count("EVO_WAIT(evo_wo, while (") == 2 and on.count("__nanosleep(32));") == 2  # split-K's spins on the other splits
    assert "static_cast<uint32_t>(w.split));\n          EVO_M(5);" in on  # SPLIT_RS: its slice stored
    assert "while (produce_next()) {\n      }\n      EVO_WPUT_P;" in on and "EVO_M(7);\n  EVO_WPUT_C;\n}" in on
    assert "clock64" in on and "clock64" not in off and "#define EVO_WAIT(acc, ...) __VA_ARGS__" in off
    assert "#define EVO_WAITF(first, ...) __VA_ARGS__" in off
    # the same patches either way: only the macros' definitions differ
    strip = lambda s: "\n".join(x for x in s.splitlines() if not x.startswith("#define EVO_W"))
    assert strip(on) == strip(off)


def test_waits_are_the_sm90_familys():
    from evo.errors import EvoError

    with pytest.raises(EvoError, match="--waits is wgmma_sm90's"):
        instrumented_templates(Path("/nonexistent"), "wgmma_skinny_sm90", waits=True)


def test_wait_lines_clock_and_shares():
    """Two launches x three CTAs: clock = cycles / ns, shares = wait cycles / the thread's cycles, median CTA then
    median launch; a CTA that left no counts (zeros) is left out."""
    import numpy as np

    from bench.phase_trace import wait_lines

    raw = np.zeros((2, 3, 4, 8), dtype=np.int64)
    t0, k0 = 10**18, 5 * 10**12  # stamps past float64's integers: differences are taken first
    for launch, ghz in enumerate((1.5, 1.7)):
        for cta in range(2):  # CTA 2 stays empty
            ns = 10_000 + 1000 * cta
            cyc = int(ns * ghz)
            raw[launch, cta, 0, 0] = t0 + 7
            raw[launch, cta, 0, 7] = raw[launch, cta, 1, 7] = t0 + 7 + ns  # both consumers' exit stamps
            raw[launch, cta, 2, :4] = [k0, k0 + cyc // 2, t0 + 7 + ns // 2, cyc // 4]  # producer: waits half its cycles
            raw[launch, cta, 3, :4] = [cyc // 10, cyc // 5, k0 + cyc, cyc // 25]  # consumer 0: 10 % full (4 at firsts), 20 % other
            raw[launch, cta, 3, 4:7] = [0, cyc // 2, k0 + cyc]  # consumer 1: 0 % full, 50 % other
    lines = wait_lines(raw, 2)
    assert lines[0].startswith("  SM clock, entry -> consumer 0's exit: 1600 MHz") and "CTAs 1600-1600" in lines[0]
    assert "full stage 10.0 % of its cycles (4.0 at a unit's first k block)" in lines[1] and "other consumer or splits 20.0 %" in lines[1]
    assert "full stage 0.0 % of its cycles (0.0 at" in lines[3] and "other consumer or splits 50.0 %" in lines[3]
    assert lines[4].startswith("  producer waits for a free stage 50.0 %")
    assert wait_lines(np.zeros((1, 2, 4, 8), dtype=np.int64), 2) == []  # nothing counted: nothing printed


def test_the_trace_comes_ahead_of_a_split_k_workspace(tmp_path):
    """Split-K instances keep their workspace: the instrumented one is TRACE_BYTES longer and the kernel steps past it."""
    params, problem = {"BM": 128, "BN": 64, "SPLIT_K": 4, "STAGES": 7, "GROUP": 16}, Problem(256, 1024, 16384)
    (plain,) = load_families(ROOT / "templates", names=["wgmma_sm90"])
    (traced,) = load_families(instrumented_templates(tmp_path, "wgmma_sm90"), names=["wgmma_sm90"])
    before = plain.render(plain.complete(params)).launch(problem, 132).workspace
    ks = traced.render(traced.complete(params))
    assert before > 0 and ks.launch(problem, 132).workspace == before + TRACE_BYTES
    assert "workspace += TRACE_FLOATS;" in ks.text and f"TRACE_FLOATS = {TRACE_BYTES // 4};" in ks.text


def test_allow_spills_lifts_the_spill_gate_only(tmp_path):
    from bench.phase_trace import trace_compiler

    strict, lenient = trace_compiler(tmp_path / "a", False), trace_compiler(tmp_path / "b", True)
    assert strict.reject_spills and not lenient.reject_spills
    assert strict.flags == lenient.flags and lenient.cache_dir == tmp_path / "b"


def test_per_cta_lines_are_medians_over_launches():
    import numpy as np

    from bench.phase_trace import per_cta_lines

    rel = np.array([[[0.0, 1.0], [0.1, np.nan]], [[0.0, 3.0], [0.3, 5.0]]])  # 2 launches x 2 CTAs x 2 phases
    lines = per_cta_lines(rel, ["entry", "exit"])
    assert lines[0].split() == ["CTA", "entry", "exit"]
    assert lines[1].split() == ["0", "0.00", "2.00"] and lines[2].split() == ["1", "0.20", "5.00"]


@pytest.mark.parametrize("family", sorted(TRACES))
def test_every_stamp_is_ordered_against_the_memory_operations_around_it(tmp_path, family):
    # a timer read the compiler may move is a stamp on the wrong side of a barrier: each macro clobbers memory
    text = (instrumented_templates(tmp_path, family) / family / "kernel.cu").read_text()
    macros = [line for line in text.splitlines() if line.startswith("#define EVO_") and "globaltimer" in line]
    assert macros and all(':: "memory")' in m for m in macros), macros
    if family == "wgmma_sm90":  # and every clock read of the wait counts
        from bench.phase_trace import WAITS_ON

        reads = [x.split(");")[0] for x in WAITS_ON.split("asm volatile(")[1:]]
        assert len(reads) == 6 and all(r.endswith(':: "memory"') for r in reads), reads

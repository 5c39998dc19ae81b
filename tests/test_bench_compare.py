"""bench.compare's markdown: every row has the header's columns, speedups are library time / evo time,
host-bound b2b figures are marked, and a shape without an evo kernel shows '-' and stays out of the geomeans."""
from pathlib import Path

import json

import pytest

from bench.compare import render_markdown
from evo.gpu.state_sampler import summarize

ROOT = Path(__file__).resolve().parent.parent


def _row(shape, evo, lib, hb=()):
    r = {"shape": shape, "family": "wgmma_sm90", "roof": 10.0, "host_bound": set(hb), "read_ab": 8.0,
         "cublas": lib, "cublaslt_heuristic": lib * 1.1, "cublaslt_autotune": lib * 0.9}
    if evo:
        r["evo"] = evo
    return r


def test_tables_have_consistent_columns_and_right_speedups():
    res = {"cold": [_row("64x64x64", 10.0, 20.0), _row("128x128x128", 0.0, 5.0)],
           "b2b": [_row("64x64x64", 10.0, 20.0, hb=("cublaslt_heuristic",))]}
    md = render_markdown("# h\n", res)
    tables = [ln for ln in md.splitlines() if ln.startswith("|")]
    widths = {ln.count("|") for ln in tables}
    assert len(widths) == 1, widths
    row = next(ln for ln in tables if ln.startswith("| 64x64x64"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[2] == "10.00" and cells[8] == "2.000" and cells[11] == "1.800"  # vs cuBLAS 2x; best lib = Lt auto 18
    assert "22.00†" in md and "† host-bound" in md
    assert "| 128x128x128 | wgmma_sm90 | - |" in md
    geo = [ln for ln in tables if "geomean" in ln][0]
    assert "2.000" in geo  # only the shape with an evo kernel counts


def test_plot_marks_host_bound_bars_and_missing_kernels(tmp_path):
    import pytest

    pytest.importorskip("matplotlib")
    from bench.compare import _plot, plot_bars

    res = {"cold": [_row("64x64x64", 10.0, 20.0), _row("128x128x128", 0.0, 5.0)],
           "b2b": [_row("64x64x64", 10.0, 20.0, hb=("cublaslt_autotune",)), _row("128x128x128", 0.0, 5.0)]}
    assert plot_bars(res["cold"]) == [(1.8, ""), (0.0, "none")]
    assert plot_bars(res["b2b"])[0] == (1.8, "host")  # the best library's figure was the host's
    assert plot_bars([_row("1x1x1", 10.0, 20.0, hb=("cublas",))])[0][1] == ""  # not the best library: no mark
    _plot(res, tmp_path / "b.png", "Fake GPU")
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_table_kernels_are_the_published_sources(tmp_path):
    """--table benchmarks what the committed table publishes: each row's exported kernel file and family."""
    import shutil

    from bench.compare import table_kernels
    from evo.errors import EvoError
    from evo.export import read_table

    table = ROOT / "kernels_out" / "NVIDIA_H200"
    _, rows = read_table(table)
    got = table_kernels(str(table))
    with_files = [r for r in rows if r.kernel_path]
    assert with_files and set(got) == {r.shape for r in with_files}
    r = with_files[0]
    assert got[r.shape] == {"source": (table.parent / r.kernel_path).read_text(), "family": r.family}
    copy = tmp_path / "NVIDIA_H200"
    shutil.copytree(table, copy)
    (tmp_path / r.kernel_path).unlink()
    with pytest.raises(EvoError, match="missing"):
        table_kernels(str(copy))


def test_an_instance_is_evos_kernel_on_every_shape():
    """--family F --instance JSON: the instance rendered from templates/ as bench.template_ab renders it, one source per
    shape (the shape-independent rendering for all of them), its family beside it."""
    from bench.compare import instance_kernels
    from bench.template_ab import plan

    params = {"BM": 128, "BN": 192, "PINGPONG": 1, "STAGES": 4, "EPI": 1, "GROUP": 16}
    shapes = ["16384x16384x4096", "4096x4096x1024"]
    got = instance_kernels("wgmma_sm90", json.dumps(params), shapes)
    (want,) = [ks.text for _, ks in plan("wgmma_sm90", None, [params], shapes)]
    assert got == {sh: {"source": want, "family": "wgmma_sm90"} for sh in shapes}
    assert "BN: 192" in want and "PINGPONG: 1" in want


@pytest.mark.parametrize("argv, message", [
    (["--instance", "{}"], "--instance needs --family"),
    (["--family", "wgmma_sm90", "--instance", "{}", "--table", "kernels_out/NVIDIA_H200"], "not both"),
    (["--family", "wgmma_sm90", "--instance", "{BM: 128"], "not a JSON object"),
    (["--family", "wgmma_sm90", "--instance", "[1]"], "must be a JSON object"),
    (["--family", "wgmma_sm90", "--instance", '{"BM": 100}'], "BM"),
    (["--family", "no_such_family", "--instance", "{}"], "no_such_family"),
])
def test_a_bad_instance_is_a_one_line_error_before_any_gpu(capsys, argv, message):
    from bench.compare import main

    assert main(["--shapes", "4096x4096x1024"] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err


def test_precompile_hands_every_table_kernel_to_the_parallel_compiler():
    """The table's kernels compile side by side before the first timing, each for the GPU's arch; none: no call."""
    from bench.compare import precompile, table_kernels

    from evo.compile import CompileResult
    from evo.kernel import KernelSource

    class Recorder:
        def __init__(self):
            self.calls = []

        def compile_many(self, items):
            self.calls.append(list(items))
            return [CompileResult(ks.hash, arch, True) for ks, arch in self.calls[-1]]

    kernels = list(table_kernels(str(ROOT / "kernels_out" / "NVIDIA_H200")).values())[:3]
    sources = [KernelSource.parse(k["source"]) for k in kernels]
    rec = Recorder()
    got = precompile(rec, sources, "sm_90a")
    assert len(rec.calls) == 1
    assert [ks.text for ks, _ in rec.calls[0]] == [k["source"] for k in kernels]
    assert {arch for _, arch in rec.calls[0]} == {"sm_90a"}
    assert set(got) == {ks.hash for ks in sources} and all(r.ok for r in got.values())
    assert precompile(rec, [], "sm_90a") == {}
    assert len(rec.calls) == 1
    # one kernel serving two shapes (or one instance timed on two) is handed over once
    got = precompile(rec, [sources[0], sources[1], sources[0]], "sm_90a")
    assert [ks.hash for ks, _ in rec.calls[-1]] == [sources[0].hash, sources[1].hash]
    assert set(got) == {sources[0].hash, sources[1].hash}


def test_cold_rows_carry_the_verdict_beyond_the_noise_band():
    """A speed claim counts beyond the measured noise: each cold row says win / tie / loss against the fastest
    library by the rule a table publishes with (evo.noise: half the two timings' mean spread, at least the floor)."""
    from bench.compare import row_verdict

    def cold(shape, evo, lib, evo_spread, lib_spread):
        r = _row(shape, evo, lib)
        r["spread"] = {"evo": evo_spread, "cublas": 0.5, "cublaslt_heuristic": 0.5, "cublaslt_autotune": lib_spread}
        return r  # the best library is the autotune at 0.9 x lib

    win = cold("64x64x64", 10.0, 12.0, 0.02, 0.02)         # 10.8 / 10.0 = 1.08 beyond a 2 % band
    tie = cold("128x64x64", 10.0, 12.0, 0.20, 0.20)        # the same 1.08 inside a 10 % band (half of 20 %)
    loss = cold("64x128x64", 10.0, 10.8, 0.02, 0.02)       # 9.72 / 10.0 = 0.972 beyond a 2 % band
    floor_tie = cold("128x128x64", 10.0, 11.3, 0.0, 0.0)   # 1.017 inside the 2 % floor, no spread measured
    assert row_verdict(win, 0.02) == ("win", 0.02)
    assert row_verdict(tie, 0.02) == ("tie", 0.10)
    assert row_verdict(loss, 0.02)[0] == "loss"
    assert row_verdict(floor_tie, 0.02) == ("tie", 0.02) and row_verdict(floor_tie, 0.01)[0] == "win"
    assert row_verdict(_row("1x1x1", 10.0, 20.0), 0.02) == ("", 0.0)  # b2b / server rows: no spreads, no verdict
    md = render_markdown("# h\n", {"cold": [win, tie, loss, floor_tie], "b2b": [_row("64x64x64", 10.0, 20.0)]})
    tables = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert len({ln.count("|") for ln in tables}) == 1
    assert "| win (2.0 %) |" in md and "| tie (10.0 %) |" in md and "| loss (2.0 %) |" in md
    assert "1 wins, 2 ties, 1 losses" in md
    assert md.count("wins,") == 1  # the b2b table measured no spreads: no verdict line


def test_rotating_runs_each_placement_in_turn():
    from evo.placements import rotating

    ran = []
    run = rotating([lambda: ran.append(0), lambda: ran.append(1), lambda: ran.append(2)])
    for _ in range(7):
        run()
    assert ran == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(ValueError):
        rotating([])


def test_placement_gaps_differ_from_set_to_set():
    from evo.placements import MAX_PLACEMENTS, pad_bytes

    gaps = [pad_bytes(i) for i in range(MAX_PLACEMENTS)]
    assert len(set(gaps)) == MAX_PLACEMENTS
    assert min(gaps) >= 1 << 20 and max(gaps) <= 11 << 20


@pytest.mark.parametrize("p", ["0", "12"])
def test_placements_out_of_range_is_a_one_line_error(capsys, p):
    from bench.compare import main

    assert main(["--shapes", str(ROOT / "shapes" / "small.yaml"), "--placements", p]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--placements must be 1 to 11" in err


def _fake_gpu(monkeypatch, log):
    """bench.compare's GPU side as fakes that record which buffers every call ran on: cupy arrays are named tokens."""
    import sys
    import types

    import bench.compare as bc

    counter = {"n": 0}

    def token(kind):
        counter["n"] += 1
        return f"{kind}{counter['n']}"

    cupy = types.SimpleNamespace(
        float16="f16", uint8="u8", nan=float("nan"),
        random=types.SimpleNamespace(RandomState=lambda seed: seed),
        empty=lambda shape, dtype=None: token("buf" if dtype == "u8" else "c"),
        full=lambda shape, value, dtype=None: token("out"))

    def random_inputs(p, rs):
        return token("a"), token("b")

    class Plan:
        def __init__(self, a, b, cfg):
            self.a, self.heuristic, self.tuned = a, ("heur", a), None

        def call(self, alg):
            return lambda: log.append((alg[0], alg[1]))

        def close(self):
            pass

    def select_across(plans, timer, reps):
        for pl in plans:
            pl.tuned = ("tuned", pl.a)

    class Timing:
        def __init__(self, us):
            self.median_us, self.spread = us, 0.01

    class Timer:
        def measure(self, contenders, reps, warmup):
            for _ in range(warmup + reps):
                for f in contenders.values():
                    f()
            return {n: Timing(10.0 if n != "evo" else 8.0) for n in contenders}

        def read(self, a, b):
            log.append(("read", a))

    class Session:
        def __init__(self, cfg):
            self.timer = Timer()

        def cublas(self, a, b, c):
            log.append(("cublas", a))

        def handle_ceilings(self):
            return {"peak_tflops": 700.0, "bw_gbs": 4000.0}

    info = types.SimpleNamespace(name="Fake GPU", key="Fake_GPU", driver="0", cuda_runtime="0", extra={}, sm_count=132,
                                 smem_per_block_optin=232448, arch="sm_90a")

    def load_kernel(ks, cubin, p, sms, smem):
        return lambda a, b, c: log.append(("evo", a))

    checks = types.SimpleNamespace(random_inputs=random_inputs, reference=lambda a, b: None,
                                   compare=lambda c, ref, cfg, what: types.SimpleNamespace(correct=True, error=""))
    for name, mod in {"cupy": cupy, "evo.gpu.device": types.SimpleNamespace(gpu_info=lambda *a, **k: info),
                      "evo.baselines": types.SimpleNamespace(LtPlan=Plan, select_across=select_across), "evo.check": checks,
                      "evo.gpu.host_launch": types.SimpleNamespace(load_kernel=load_kernel),
                      "evo.gpu.session": types.SimpleNamespace(Session=Session)}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    class Sampled:  # nvidia-smi's view of each cold window: the clock held back by a power cap
        def __init__(self, bus, field, interval_ms):
            self.summary = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.summary = summarize(["00000000:19:00.0, 1650, 1980, 700.0, 700.0, 63, 0x4"], "")

    monkeypatch.setitem(sys.modules, "evo.gpu.state_sampler",
                        types.SimpleNamespace(reasons_field=lambda: "f", sample_states=Sampled))
    monkeypatch.setattr(bc, "precompile", lambda compiler, sources, arch: {
        ks.hash: types.SimpleNamespace(ok=True, cubin_path="k.cubin") for ks in sources})
    monkeypatch.setattr(bc, "_plot", lambda *a: None)
    return bc


@pytest.mark.parametrize("flag", [1, 3, None])
def test_every_contender_runs_on_each_placement_in_turn(monkeypatch, tmp_path, flag):
    """The main loop with the GPU faked: every contender (cuBLAS, both cuBLASLt picks, evo, the read of A and B) runs
    on the P input sets in turn, each set as often as the others, evo on the same sets the libraries use; without the
    option, on 4 sets; the page's command names P."""
    placements = 4 if flag is None else flag
    log: list = []
    bc = _fake_gpu(monkeypatch, log)
    shapes = tmp_path / "one.yaml"
    shapes.write_text("name: one\nlayout: TN\nshapes:\n  - 4096x4096x1024\n")
    argv = ["--shapes", str(shapes), "--table", str(ROOT / "kernels_out" / "NVIDIA_H200"), "--modes", "cold",
            "--reps", "6", "--out-dir", str(tmp_path)]
    assert bc.main(argv + ([] if flag is None else ["--placements", str(flag)])) == 0
    seen = {}
    for who, a in log:
        seen.setdefault(who, []).append(a)
    assert set(seen) == {"cublas", "heur", "tuned", "evo", "read"}
    sets = set(seen["cublas"])
    assert len(sets) == placements
    for who, calls in seen.items():
        assert set(calls) == sets, who  # the same input sets for every contender
        window = calls[-9:]  # the timed window's 3 warm-up and 6 timed calls: the sets in turn
        assert len(set(window[:placements])) == placements, who
        assert all(window[i] == window[i + placements] for i in range(len(window) - placements)), who
    md = (tmp_path / "bench-Fake_GPU.md").read_text()
    assert "| 4096x4096x1024 |" in md and ("placements of its buffers" in md) == (placements > 1)
    assert "Clock held back on 1 of 1 shapes: 4096x4096x1024." in md  # the cold window's sampled state reaches the page
    assert "- 4096x4096x1024: SM clock median 1650 MHz (lowest 1650) of 1980; power up to 700 of 700 W" in md
    assert f"--reps 6 --placements {placements}`" in md


def test_a_named_page_carries_its_note_under_the_command(monkeypatch, tmp_path):
    """--name large writes bench-large-<GPU>.md (the judge pages' names) and the command that reproduces it names it too;
    --note is one line of provenance under the command."""
    log: list = []
    bc = _fake_gpu(monkeypatch, log)
    shapes = tmp_path / "one.yaml"
    shapes.write_text("name: one\nlayout: TN\nshapes:\n  - 4096x4096x1024\n")
    argv = ["--shapes", str(shapes), "--table", str(ROOT / "kernels_out" / "NVIDIA_H200"), "--modes", "cold",
            "--reps", "4", "--out-dir", str(tmp_path), "--name", "large", "--note", "The table as of\n commit abc."]
    assert bc.main(argv) == 0
    assert not (tmp_path / "bench-Fake_GPU.md").exists()
    lines = (tmp_path / "bench-large-Fake_GPU.md").read_text().splitlines()
    i = next(j for j, ln in enumerate(lines) if ln.startswith("Command:"))
    assert lines[i].endswith("--placements 4 --name large`") and lines[i + 1] == "The table as of commit abc."


@pytest.mark.parametrize("name", ["../x", "a b", "x.md"])
def test_a_page_name_that_is_not_a_plain_word_is_a_one_line_error(capsys, name):
    from bench.compare import main

    assert main(["--shapes", str(ROOT / "shapes" / "small.yaml"), "--name", name]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--name must be letters" in err


def test_each_shape_names_the_algorithms_its_cublaslt_contenders_ran():
    # two pages of one shape whose library times differ can then be told apart: another pick, or the same one faster
    auto = {"algorithm_id": 66, "tile": [64, 128], "cluster_shape": [2, 1, 1], "stages": [64, "AUTO"], "split_k": 1}
    heur = {"algorithm_id": 66, "tile": [128, 64], "cluster_shape": [1, 2, 1], "split_k": 1, "custom_option": 3}
    row = {**_row("512x2048x4096", 16.6, 18.4), "lt_algorithms": {"cublaslt_heuristic": heur, "cublaslt_autotune": auto}}
    md = render_markdown("# h\n", {"cold": [row, _row("64x64x64", 10.0, 20.0)]})
    assert "## cuBLASLt's algorithms" in md
    assert ("- 512x2048x4096: heuristic id 66, tile 128x64, cluster 1x2x1, split-k 1, option 3; "
            "autotune id 66, tile 64x128, cluster 2x1x1, stages 64xAUTO, split-k 1") in md
    assert "64x64x64:" not in md  # a row without recorded algorithms is not listed
    assert len({ln.count("|") for ln in md.splitlines() if ln.startswith("|")}) == 1
    assert "cuBLASLt's algorithms" not in render_markdown("# h\n", {"cold": [_row("64x64x64", 10.0, 20.0)]})


def test_each_shape_says_what_clock_the_gpu_ran_its_cold_window_at():
    # a ratio taken while a power cap held the clock back says so on the page (16384^2 x 4096 read 0.965x in one judge)
    capped = summarize(["00000000:19:00.0, 1650, 1980, 699.0, 700.0, 63, 0x4"] * 3
                       + ["00000000:19:00.0, 1755, 1980, 690.0, 700.0, 63, 0x0"], "")
    free = summarize(["00000000:19:00.0, 1980, 1980, 400.0, 700.0, 50, 0x0"] * 5, "")
    rows = [{**_row("16384x16384x4096", 3109.0, 2999.0), "gpu_state": capped}, {**_row("64x64x64", 4.0, 4.8), "gpu_state": free},
            {**_row("128x128x128", 4.0, 4.8), "gpu_state": None}]
    md = render_markdown("# h\n", {"cold": rows, "b2b": [dict(r, gpu_state=None) for r in rows]})
    assert "## The GPU while timing (cold)" in md
    assert "These samples do not see the clock inside a kernel" in md  # the in-kernel clock is phase_trace's
    assert "Clock held back on 1 of 2 shapes: 16384x16384x4096." in md
    assert ("- 16384x16384x4096: SM clock median 1650 MHz (lowest 1650) of 1980; power up to 699 of 700 W; 63 C at most; "
            "clock held back by software power cap in 3 of 4 samples") in md
    assert "- 64x64x64: SM clock median 1980 MHz (lowest 1980) of 1980; power up to 400 of 700 W; 50 C at most; no clock limit in 5 samples" in md
    assert "128x128x128:" not in md  # no samples: no line
    assert len({ln.count("|") for ln in md.splitlines() if ln.startswith("|")}) == 1
    free_only = render_markdown("# h\n", {"cold": [rows[1]]})
    assert "No clock limit on any of the 1 shapes." in free_only
    assert "The GPU while timing" not in render_markdown("# h\n", {"cold": [rows[2]]})

"""bench.power_draw: each contender's sustained window, the per-contender medians and the page, with the GPU faked."""
import sys
import types
from pathlib import Path

import pytest

from test_sustained import Clock, sampler

from bench.power_draw import render, summarize_rounds
from evo.gpu.state_sampler import INTERVAL_MS, summarize
from evo.sustained import Sustained

ROOT = Path(__file__).resolve().parents[1]


def test_medians_over_rounds_energy_and_the_ratio_to_the_fastest_library():
    w = [Sustained("evo", 100, 0.30, 1785, 690.0), Sustained("evo", 100, 0.29, 1800, 686.0),
         Sustained("cublaslt_autotune", 100, 0.288, 1830, 650.0), Sustained("cublaslt_autotune", 100, 0.290, 1810, 660.0),
         Sustained("cublas", 100, 0.31, -1, -1.0)]
    rows = summarize_rounds(w)
    assert [r["contender"] for r in rows] == ["cublaslt_autotune", "evo", "cublas"]  # fastest first
    auto, evo, cublas = rows
    assert evo["us"] == pytest.approx(2950.0) and evo["sm_mhz"] == pytest.approx(1792.5) and evo["rounds"] == 2
    assert evo["mj"] == pytest.approx(688.0 * 2950.0 * 1e-3)  # median W x median us
    assert evo["vs_best_lib"] == pytest.approx(2890.0 / 2950.0) and auto["vs_best_lib"] == pytest.approx(1.0)
    assert cublas["power_w"] == -1 and cublas["mj"] == -1  # nothing read: no energy claimed
    # cycles per call = us x MHz; per cycle against the fastest library: its cycles over these
    assert evo["kcycles"] == pytest.approx(2950.0 * 1792.5e-3) and auto["kcycles"] == pytest.approx(2890.0 * 1820e-3)
    assert evo["vs_best_lib_per_cycle"] == pytest.approx((2890.0 * 1820) / (2950.0 * 1792.5))
    assert cublas["kcycles"] == -1 and cublas["vs_best_lib_per_cycle"] == 0.0  # no clock read: no cycles claimed
    md = render("16384x16384x4096", rows, 2.0 * 16384 * 16384 * 4096)
    assert "| evo | 2950.00 | 745.4 | 1792 | 688 | 2029.60 | 5287.9 | 0.980 | 0.995 |" in md
    assert "| cublas | 3100.00 | 709.4 | - | - | - | - | 0.932 | - |" in md


def test_per_cycle_ratio_reads_the_library_of_fewest_cycles_not_the_fastest_by_time():
    # at the power cap a kernel can take more cycles and still be faster: here the autotune is the fastest library
    # back to back, but cuBLAS, clocked lower, takes the fewest cycles, so at one shared clock it would be the
    # fastest; the per-cycle column compares with it
    w = [Sustained("evo", 100, 0.331, 1440, 681.0), Sustained("cublaslt_autotune", 100, 0.3332, 1384, 681.0),
         Sustained("cublas", 100, 0.3429, 1300, 685.0)]
    rows = {r["contender"]: r for r in summarize_rounds(w)}
    fewest = 3429.0 * 1300  # cuBLAS's cycles (x 1e-3 on both sides)
    assert rows["evo"]["vs_best_lib"] == pytest.approx(3332.0 / 3310.0)                  # faster back to back
    assert rows["evo"]["vs_best_lib_per_cycle"] == pytest.approx(fewest / (3310.0 * 1440))  # slower per cycle
    assert rows["evo"]["vs_best_lib_per_cycle"] < 1.0 < rows["evo"]["vs_best_lib"]
    assert rows["cublas"]["vs_best_lib_per_cycle"] == pytest.approx(1.0)
    assert rows["cublaslt_autotune"]["vs_best_lib_per_cycle"] == pytest.approx(fewest / (3332.0 * 1384))
    assert rows["cublaslt_autotune"]["vs_best_lib"] == pytest.approx(1.0)


def test_added_instances_are_contenders_never_the_library_they_are_compared_with():
    # an instance faster and of fewer cycles than every library is measured against the libraries, not against itself
    w = [Sustained("wgmma_sm90 BM128/BN192", 100, 0.30, 1400, 680.0), Sustained("evo", 100, 0.32, 1400, 680.0),
         Sustained("cublaslt_autotune", 100, 0.33, 1400, 680.0), Sustained("cublas", 100, 0.34, 1400, 680.0)]
    rows = {r["contender"]: r for r in summarize_rounds(w)}
    assert rows["wgmma_sm90 BM128/BN192"]["vs_best_lib"] == pytest.approx(3300.0 / 3000.0)
    assert rows["wgmma_sm90 BM128/BN192"]["vs_best_lib_per_cycle"] == pytest.approx(3300.0 / 3000.0)
    assert rows["evo"]["vs_best_lib"] == pytest.approx(3300.0 / 3200.0)
    assert rows["cublaslt_autotune"]["vs_best_lib"] == pytest.approx(1.0)


@pytest.mark.parametrize("argv, said", [(["--shape", "4096x4096"], "malformed shape"),
                                        (["--shape", "64x64x64", "--instance", "{}"], "--instance needs --family"),
                                        (["--shape", "64x64x64", "--family", "wgmma_sm90", "--instance", "{BM: 1}"],
                                         "not a JSON object"),
                                        (["--shape", "64x64x64", "--seconds", "0"], "--seconds must be"),
                                        (["--shape", "64x64x64", "--rounds", "11"], "--rounds 1 to 10")])
def test_bad_arguments_are_one_line_errors(capsys, argv, said):
    from bench.power_draw import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and said in err


def test_each_round_runs_every_contender_alone_in_its_own_sampled_window(monkeypatch, capsys):
    import bench.power_draw as pd

    log, clk = [], Clock(0.001)
    cupy = types.SimpleNamespace(
        float16="f16", nan=float("nan"), random=types.SimpleNamespace(RandomState=lambda s: s),
        empty=lambda shape, dtype=None: "c", full=lambda shape, value, dtype=None: (log.append(("poison", value)), "out")[1],
        cuda=types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(synchronize=clk.sync)))

    class Plan:
        def __init__(self, a, b, cfg):
            self.heuristic, self.tuned = "heur", None

        def call(self, alg):
            return lambda: (log.append(("lt", alg)), clk.call())

        def close(self):
            log.append(("closed",))

    def select_across(plans, timer, reps):
        plans[0].tuned = "tuned"

    Sampled = sampler(log, summarize(["00000000:19:00.0, 1785, 1980, 690.0, 700.0, 61, 0x4"], ""))

    session = types.SimpleNamespace(timer=None, cublas=lambda a, b, c: (log.append(("cublas",)), clk.call()))
    info = types.SimpleNamespace(name="Fake GPU", key="NVIDIA_H200", driver="0", cuda_runtime="0", sm_count=132,
                                 smem_per_block_optin=232448, arch="sm_90a", extra={"pci_bus_id": "0000:19:00.0"})
    compiler = types.SimpleNamespace(compile_many=lambda items: [
        types.SimpleNamespace(ok=True, cubin_path="k.cubin", hash=ks.hash) for ks, arch in items])
    fakes = {"cupy": cupy, "evo.gpu.device": types.SimpleNamespace(gpu_info=lambda: info),
             "evo.baselines": types.SimpleNamespace(LtPlan=Plan, select_across=select_across),
             "evo.check": types.SimpleNamespace(random_inputs=lambda p, rs: ("a", "b"), reference=lambda a, b: None,
                                                compare=lambda c, ref, cfg, what: types.SimpleNamespace(correct=True, error="")),
             "evo.compile": types.SimpleNamespace(Compiler=types.SimpleNamespace(from_config=lambda c: compiler)),
             "evo.gpu.host_launch": types.SimpleNamespace(
                 load_kernel=lambda ks, cubin, p, sms, smem: lambda a, b, c: (log.append(("evo", ks.meta.family)), clk.call())),
             "evo.gpu.session": types.SimpleNamespace(Session=lambda cfg: session),
             "evo.gpu.state_sampler": types.SimpleNamespace(INTERVAL_MS=INTERVAL_MS, reasons_field=lambda: "f",
                                                      sample_states=Sampled)}
    for name, mod in fakes.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(pd, "time", types.SimpleNamespace(perf_counter=clk.now, sleep=lambda s: log.append(("rest", s))))
    argv = ["--shape", "4096x4096x1024", "--table", str(ROOT / "kernels_out" / "NVIDIA_H200"), "--seconds", "0.2",
            "--rounds", "2", "--rest", "0.5", "--family", "wgmma_skinny_sm90", "--instance", '{"BM": 64, "BN": 64, "CONSUMERS": 1}']
    assert pd.main(argv) == 0
    # a window per contender and round, each after its rest, holding only that contender's calls
    windows, current = [], None
    for e in log:
        if e[0] == "window":
            current = []
            windows.append(current)
        elif current is not None and e[0] in ("evo", "cublas", "lt"):
            current.append(e)
    assert len(windows) == 10 and all(len(set(w)) == 1 and len(w) >= 200 for w in windows)
    firsts = [w[0] for w in windows]
    assert sorted(firsts[:5], key=str) == sorted(firsts[5:], key=str)  # every contender once a round
    # the table's kernel (wgmma_sm90 on this row) and the instance rendered from templates/, each in its own window
    assert set(firsts) == {("evo", "wgmma_sm90"), ("evo", "wgmma_skinny_sm90"), ("cublas",), ("lt", "heur"), ("lt", "tuned")}
    assert log.count(("rest", 0.5)) == 10
    kinds = [e[0] for e in log]
    assert kinds.count("poison") == 2 and kinds.index("poison") < kinds.index("evo")  # C poisoned before each check
    out = capsys.readouterr().out
    assert "### 4096x4096x1024" in out and "| evo | 1000.00 |" in out and "| 1785 | 690 | 690.00 |" in out
    label = "wgmma_skinny_sm90 BM64/BN64/CONSUMERS1"
    assert f"| {label} | 1000.00 |" in out
    assert """--family wgmma_skinny_sm90 --instance '{"BM": 64, "BN": 64, "CONSUMERS": 1}'""" in out
    assert "clock held back by software power cap in 1 of 1 sample" in out

"""Nsight Compute evidence (evo.profile): CSV parsing, a stand-in ncu on CPU, and the real ncu on a GPU."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evo.library_kernel import parse_kernel_name
from evo.problem import Problem
from evo.profile import METRICS, Profiler, describe, find_ncu, main_kernel, parse_csv

DATA = Path(__file__).parent / "data"
FAKE_NCU = str(DATA / "fake_ncu.py")
PROBLEM = Problem(256, 256, 256)

def test_profile_target_usage_error_is_one_line(capsys):
    """Neither a kernel nor the library: one line, exit 2, before CuPy is looked for."""
    from evo.gpu.profile_target import main as target

    with pytest.raises(SystemExit) as e:
        target(["--shape", "64x64x64", "--source", "k.cu"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give --source and --cubin, or --library cublas" in err


CSV = '''==PROF== Connected to process 1 (python)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","evo_gemm","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","12.50"
"0","1","python","h","evo_gemm","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Kbyte","1,536.00"
"0","1","python","h","evo_gemm","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","33.3"
"0","1","python","h","evo_gemm","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","some__other.metric","","7"
"1","1","python","h","reduce","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","900"
==PROF== Disconnected from process 1
'''


def test_parse_csv_units_and_kernels():
    kernels = parse_csv(CSV)
    assert [k[0] for k in kernels] == ["evo_gemm", "reduce"]
    m = kernels[0][1]
    assert m == {"duration_us": 12.5, "dram_read_mb": pytest.approx(1.536), "dram_pct": 33.3}
    assert kernels[1][1]["duration_us"] == pytest.approx(0.9)
    assert main_kernel(kernels)[0] == "evo_gemm"  # the longest
    assert main_kernel(kernels, "reduce")[0] == "reduce"
    assert parse_csv("==ERROR== nothing") == []


def test_l2_sectors_cta_count_and_sm_spread():
    rows = "\n".join(f'"0","1","python","h","evo_gemm","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0","m","{m}","{u}","{v}"'
                     for m, u, v in (("lts__t_sectors_srcunit_tex_op_read.sum", "sector", "5,203,644"),
                                     ("lts__t_sectors_srcunit_ltcfabric.sum", "sector", "840,896"),
                                     ("sm__ctas_launched.sum", "block", "128"), ("sm__cycles_active.min", "cycle", "0"),
                                     ("sm__cycles_active.max", "cycle", "47,215")))
    m = parse_csv(CSV.splitlines()[1] + "\n" + rows)[0][1]
    assert m == {"l2_read_mb": pytest.approx(166.5166), "l2_fabric_mb": pytest.approx(26.908672), "ctas": 128,
                 "sm_active_min": 0, "sm_active_max": 47215}
    lines = describe(m)
    assert "L2 reads by the SMs (TMA and loads): 166.5 MB" in lines and "CTAs launched: 128" in lines
    assert "L2 fabric traffic (lines crossing between the L2's two partitions): 26.9 MB" in lines
    assert lines[-1] == "busiest SM active 47215 cycles, least busy 0 (an idle SM)"
    assert describe({"sm_active_min": 29301.0, "sm_active_max": 31900.0})[-1].endswith("(1.09x)")


def test_describe_orders_stall_reasons():
    lines = describe({"duration_us": 10.0, "tensor_gmma_pct": 60.0, "stall_barrier": 2.0, "stall_wait": 0.5,
                      "stall_long_scoreboard": 1.5, "smem_ld_conflicts": 1024.0})
    assert lines[0] == "kernel duration: 10.0 µs"
    assert any("wgmma" in ln and "60.0%" in ln for ln in lines)
    assert lines[-1].startswith("top warp stall reasons") and lines[-1].index("barrier") < lines[-1].index("long scoreboard")
    assert any("bank conflicts: 1024" in ln for ln in lines)


def _profiler(monkeypatch, tmp_path, mode="ok"):
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu.log"))
    said: list[str] = []
    return Profiler(FAKE_NCU, 30, say=said.append), said


def calls(tmp_path) -> list[str]:
    log = tmp_path / "ncu.log"
    return log.read_text().splitlines() if log.exists() else []


def test_profile_kernel_with_a_stand_in_ncu(monkeypatch, tmp_path):
    prof, said = _profiler(monkeypatch, tmp_path)
    res = prof.profile_kernel("/*---evo ...*/", str(tmp_path / "k.cubin"), PROBLEM)
    assert res.ok and res.kernel == "evo_gemm" and said == []
    assert res.call_summary() == ""  # one kernel: nothing more to say
    assert res.metrics["duration_us"] == pytest.approx(12.3456) and res.metrics["tensor_gmma_pct"] == 63.2
    assert res.metrics["dram_read_mb"] == pytest.approx(25.17) and res.metrics["smem_ld_conflicts"] == 1024
    cmd = calls(tmp_path)[0]
    assert "--clock-control none" in cmd and "--profile-from-start off" in cmd
    assert "-m evo.gpu.profile_target --shape 256x256x256 --source" in cmd and "--cubin" in cmd
    assert all(m in cmd for m, _ in METRICS.values())


def test_cli_takes_ncu_and_timeout_from_the_config(monkeypatch, tmp_path, capsys):
    from evo.profile import main

    _profiler(monkeypatch, tmp_path)  # the stand-in's environment
    conf = tmp_path / "c.yaml"
    conf.write_text(f"llm:\n  ncu: {FAKE_NCU}\n  profile_timeout_s: 30\n")
    assert main(["--config", str(conf), "--shape", "256x256x256", "--library", "cublas"]) == 0
    assert "kernel:" in capsys.readouterr().out and calls(tmp_path)
    assert main(["--shape", "256x256x256", "--library", "cublas", "--ncu", str(tmp_path / "no_ncu")]) == 2
    assert "ncu" in capsys.readouterr().err


def test_library_kernel_name_and_configuration(monkeypatch, tmp_path):
    prof, _ = _profiler(monkeypatch, tmp_path)
    res = prof.profile_library(PROBLEM)
    assert res.ok and res.kernel.startswith("nvjet_hsh_256x128") and "splitKreduce_kernel" in res.kernels
    # the call's second kernel (split-K partials summed apart) is said, with each duration and the sum
    assert res.kernel_us == pytest.approx([12.3456, 0.1235], abs=1e-3)
    assert res.call_summary() == ("the call ran 2 kernels: nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_TNT 12.3 µs, "
                                  "splitKreduce_kernel 0.1 µs; together 12.5 µs (the metrics are "
                                  "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_TNT's alone)")
    assert res.lines()[-1] == res.call_summary() and res.lines()[:-1] == describe(res.metrics)
    k = parse_kernel_name(res.kernel)
    assert (k.tile, k.bk, k.stages, k.cluster) == ((256, 128), 64, 4, (2, 1))
    assert "tile 256x128" in k.summary() and "cluster 2x1" in k.summary()


def test_cublaslt_kernels_are_profiled_by_name(monkeypatch, tmp_path, capsys):
    """cuBLASLt's heuristic and autotune choices are profile targets too (what the autotune winner runs)."""
    from evo.profile import main

    prof, _ = _profiler(monkeypatch, tmp_path)
    for lib in ("cublaslt_heuristic", "cublaslt_autotune"):
        assert prof.profile_library(PROBLEM, lib).ok
        assert f"-m evo.gpu.profile_target --shape 256x256x256 --library {lib}" in calls(tmp_path)[-1]
    assert main(["--shape", "256x256x256", "--library", "cublaslt_autotune", "--ncu", FAKE_NCU]) == 0
    assert "tile 256x128" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--shape", "256x256x256", "--library", "cublasxt", "--ncu", FAKE_NCU])


def test_kernel_names_of_other_libraries():
    k = parse_kernel_name("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64_cluster2x1x1_warpgroupsize2x1x1_"
                          "execute_segment_k_on_kernel__5x_cublas")
    assert (k.tile, k.cluster, k.warpgroups, k.split_k) == ((128, 256, 64), (2, 1, 1), (2, 1, 1), "on")
    k = parse_kernel_name("cutlass_80_tensorop_f16_s16816gemm_f16_256x128_32x3_tn_align8(Params)")
    assert (k.kind, k.tile, k.bk, k.stages) == ("cutlass", (256, 128), 32, 3)
    assert parse_kernel_name("mystery_kernel").summary() == "library kernel `mystery_kernel`"


def test_unknown_metric_is_dropped_and_said(monkeypatch, tmp_path):
    prof, said = _profiler(monkeypatch, tmp_path, "unknown")
    res = prof.profile_kernel("x", "k.cubin", PROBLEM)
    assert res.ok and "tensor_gmma_pct" not in res.metrics and "sm__pipe_tensor_op_gmma" in res.detail
    assert "stall_membar" not in res.metrics and "smsp__average_warps_issue_stalled_membar" in res.detail  # not listed
    assert res.metrics["stall_barrier"] == 2.1
    c = calls(tmp_path)
    assert len(c) == 3 and c[1] == "--query-metrics" and said == []  # one try, the query, the retry


def test_not_permitted_is_said_once_and_skipped(monkeypatch, tmp_path):
    prof, said = _profiler(monkeypatch, tmp_path, "perm")
    for _ in range(3):
        res = prof.profile_kernel("x", "k.cubin", PROBLEM)
        assert not res.ok and "not permitted" in res.detail
    assert prof.profile_library(PROBLEM).ok is False
    assert len(said) == 1 and "ERR_NVGPUCTRPERM" in said[0]
    assert len(calls(tmp_path)) == 1  # never run again


def test_missing_ncu_is_said_once():
    said: list[str] = []
    prof = Profiler("/nonexistent/ncu", say=said.append)
    assert not prof.profile_kernel("x", "k.cubin", PROBLEM).ok
    assert not prof.profile_library(PROBLEM).ok
    assert said == ["note: Nsight Compute (/nonexistent/ncu) not found; the LLM prompts go without profiler metrics"]


@pytest.mark.gpu
def test_real_ncu(tmp_path):
    """On a GPU machine with Nsight Compute: profile the naive kernel and the library on one shape."""
    ncu = find_ncu()
    if not ncu:
        pytest.skip("Nsight Compute (ncu) is not installed")
    from evo.compile import Compiler
    from evo.config import load_config
    from evo.kernel import KernelSource

    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path / "cache")}})
    src = (DATA / "naive.cu").read_text()
    ks = KernelSource.parse(src)
    import subprocess

    cc = subprocess.run([sys.executable, "-c", "import cupy; d = cupy.cuda.Device(); print(*d.compute_capability)"],
                        capture_output=True, text=True).stdout.split()
    arch = "sm_90a" if cc and cc[0] == "9" else f"sm_{''.join(cc) or '80'}"
    r = Compiler.from_config(cfg.compile).compile(ks, arch)
    assert r.ok, r.error
    prof = Profiler(ncu, 240)
    problem = Problem(512, 512, 512)
    res = prof.profile_kernel(src, r.cubin_path, problem)
    print(f"\nncu on naive.cu {problem.key}: ok={res.ok} kernel={res.kernel} ({res.seconds:.1f} s) {res.detail}")
    for ln in describe(res.metrics):
        print("  " + ln)
    if prof.disabled:
        pytest.skip(prof.disabled)
    assert res.ok and res.kernel.startswith("evo_gemm"), res.detail
    assert res.metrics["duration_us"] > 0 and "dram_pct" in res.metrics and "occupancy_pct" in res.metrics
    assert any(k.startswith("stall_") for k in res.metrics)
    lib = prof.profile_library(problem)
    print(f"library: {lib.kernel} -> {parse_kernel_name(lib.kernel).summary()} ({lib.seconds:.1f} s) {lib.detail}")
    for ln in describe(lib.metrics):
        print("  " + ln)
    assert lib.ok and lib.kernel and lib.metrics["duration_us"] > 0
    lt = prof.profile_library(problem, "cublaslt_autotune")
    print(f"cuBLASLt autotune: {lt.kernel} -> {parse_kernel_name(lt.kernel).summary()} ({lt.seconds:.1f} s) {lt.detail}")
    assert lt.ok and lt.kernel and lt.metrics["duration_us"] > 0
    from evo.profile_sass import hotspots

    sass = prof.sass(src, r.cubin_path, problem)
    print("\n".join(hotspots(sass.lines, 5)) if sass.ok else sass.detail)
    assert sass.ok and sum(ln.samples for ln in sass.lines) > 0, sass.detail


def test_source_page_hot_spots():
    """The SASS lines of a real ncu source page (trimmed) and the hot spots made of them."""
    from evo.profile_sass import hotspots, parse_source_csv

    lines = parse_source_csv((DATA / "ncu_source_page.csv").read_text())
    assert len(lines) == 21 and lines[0].sass.startswith("LDC R1")
    top = max(lines, key=lambda ln: ln.samples)
    assert top.sass.startswith("HGMMA.64x128x16") and top.samples == 231 and top.executed == 12288
    depbar = next(ln for ln in lines if ln.sass.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
    assert depbar.stalls["barrier"] == 181 and depbar.samples == 182
    total = sum(ln.samples for ln in lines)
    out = hotspots(lines, top=3)
    assert len(out) == 4 and out[0].startswith(f"{total} samples over 21 SASS instructions")
    assert "HGMMA.64x128x16" in out[1] and f"{100 * 231 / total:5.1f}%" in out[1] and "x12288" in out[1]
    assert "WARPGROUP.DEPBAR" in out[2] and "[barrier 181" in out[2] and "after:" in out[2]
    assert parse_source_csv("==PROF== nothing\n") == [] and hotspots([]) == ["no warp-state samples on this kernel"]


def test_cli_sass_with_a_stand_in_ncu(monkeypatch, tmp_path, capsys):
    from evo.profile import main

    _profiler(monkeypatch, tmp_path)
    src, cubin = tmp_path / "k.cu", tmp_path / "k.cubin"
    src.write_text("/*---evo ...*/")
    assert main(["--shape", "256x256x256", "--source", str(src), "--cubin", str(cubin), "--ncu", FAKE_NCU, "--sass", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "HGMMA.64x128x16" in out[1] and len(out) == 6  # summary, 4 hot spots, the command
    cmd = calls(tmp_path)[-1]
    assert "--page source --print-source sass" in cmd and "--section SourceCounters" in cmd
    assert main(["--shape", "256x256x256", "--library", "cublas", "--ncu", FAKE_NCU, "--sass", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sass needs --source and --cubin" in err[0]


def test_sm_clock_in_mhz_whatever_unit_ncu_reports():
    for unit, value in (("cycle/nsecond", "1.755"), ("cycle/usecond", "1,755"), ("cycle/second", "1,755,000,000")):
        row = f'"0","1","python","h","evo_gemm","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0","m","sm__cycles_elapsed.avg.per_second","{unit}","{value}"'
        m = parse_csv(CSV.splitlines()[1] + "\n" + row)[0][1]
        assert m["sm_clock_mhz"] == pytest.approx(1755.0)
    assert "SM clock during the kernel: 1755 MHz" in describe({"sm_clock_mhz": 1755.2})

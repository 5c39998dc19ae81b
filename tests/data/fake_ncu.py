#!/usr/bin/env python3
"""A stand-in for Nsight Compute's command line in tests: prints what `ncu --csv --metrics ...` prints, or for
`--page source` a trimmed capture of a real source page (ncu_source_page.csv: a wgmma_sm90 kernel on an H200).

FAKE_NCU_MODE: ok (default) | perm (counters not permitted) | unknown (refuses the wgmma tensor-pipe metric)
FAKE_NCU_LOG: a file that receives one line per call (the arguments).
"""
import os
import sys

args = sys.argv[1:]
if os.environ.get("FAKE_NCU_LOG"):
    with open(os.environ["FAKE_NCU_LOG"], "a") as f:
        f.write(" ".join(args) + "\n")
mode = os.environ.get("FAKE_NCU_MODE", "ok")
if "--query-metrics" in args:  # base names, as ncu lists them (without the wgmma tensor-pipe one in "unknown" mode)
    print("Device NVIDIA H200 (GH100)\n---------------------------------------------------------------------------")
    print("Metric Name                                   Metric Description")
    bases = ("gpu__time_duration", "sm__throughput", "sm__pipe_tensor_op_hmma_cycles_active", "dram__throughput",
             "dram__bytes_read", "dram__bytes_write", "lts__throughput", "lts__t_sector_hit_rate", "sm__warps_active",
             "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st")
    bases += tuple(f"smsp__average_warps_issue_stalled_{s}_per_issue_active" for s in ("barrier", "wait", "long_scoreboard"))
    bases += ("sm__pipe_tensor_op_gmma_cycles_active",) if mode != "unknown" else ()
    for base in bases:
        print(f"{base:<45} some description")
    sys.exit(0)
if "--page" in args and args[args.index("--page") + 1] == "source":  # the source page: a trimmed real capture
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ncu_source_page.csv")) as f:
        sys.stdout.write(f.read())
    sys.exit(0)
metrics = args[args.index("--metrics") + 1].split(",") if "--metrics" in args else []
print("==PROF== Connected to process 4242 (python)")
if mode == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
    sys.exit(1)
gmma = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
if mode == "unknown" and gmma in metrics:
    print(f"==ERROR== Failed to find metric {gmma}", file=sys.stderr)
    sys.exit(1)
values = {"gpu__time_duration.sum": ("nsecond", "12,345.6"), "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "41.5"),
          "dram__bytes_read.sum": ("Mbyte", "25.17"), "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", "12.4"),
          gmma: ("%", "63.2"), "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": ("", "1,024"),
          "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": ("", "0.85"),
          "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": ("", "2.10"),
          "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": ("", "0.30")}
library = "--library" in args
kernels = [("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_TNT", 1.0), ("splitKreduce_kernel", 0.01)] if library else [("evo_gemm", 1.0)]
print('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC",'
      '"Section Name","Metric Name","Metric Unit","Metric Value"')
for i, (name, scale) in enumerate(kernels):
    for m in metrics:
        if m in values:
            unit, v = values[m]
            if m == "gpu__time_duration.sum":
                v = f"{float(v.replace(',', '')) * scale:,.1f}"
            print(f'"{i}","4242","python","host","{name}","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0",'
                  f'"Command line profiler metrics","{m}","{unit}","{v}"')
print("==PROF== Disconnected from process 4242")

"""bench.dispatch_compare's summary: paired ratio = best library / dispatch per round, measured noise (A/A control,
bootstrap interval), shapes under the bar named only when beyond their noise, exit code."""
import numpy as np
import pytest

from bench.dispatch_compare import is_below, main, paired_stats, summarize


def test_summary_flags_shapes_below_the_bar():
    rows = [{"shape": "257x14336x4096", "dispatch": 107.8, "cublas": 52.6, "cublaslt_heuristic": 53.0,
             "cublaslt_autotune": 52.9, "explain": "general 1a2b (borrowed)"},
            {"shape": "16x4096x4096", "dispatch": 13.8, "cublas": 14.9, "cublaslt_heuristic": 15.0,
             "cublaslt_autotune": 14.9, "explain": "evo"}]
    md, below = summarize(rows, 0.99, "NVIDIA_H200")
    assert below == ["257x14336x4096"]
    assert "| 257x14336x4096 | 107.80 | 52.60 | 53.00 | 52.90 | 0.488 **below** | 0.00% | - | - |" in md
    assert "| 16x4096x4096 | 13.80 |" in md and "1.080 |" in md
    assert "1 below 0.99 beyond noise: 257x14336x4096" in md


def test_below_needs_both_the_bar_and_the_noise():
    """The 0.99 bar is never widened: under it and beyond the measured noise counts; inside the noise is named apart."""
    assert is_below(0.985, 0.004, 0.99) and not is_below(0.985, 0.02, 0.99) and not is_below(0.995, 0.0, 0.99)
    rows = [{"shape": "24x4096x4096", "dispatch": 15.09, "cublas": 14.80, "cublaslt_heuristic": 15.06,
             "cublaslt_autotune": 15.68, "explain": "cublas", "ratio": 0.985, "noise": 0.02, "aa": 1.012, "rounds": 400},
            {"shape": "4096x6144x4096", "dispatch": 285.4, "cublas": 285.5, "cublaslt_heuristic": 286.2,
             "cublaslt_autotune": 277.6, "explain": "cublas", "ratio": 0.973, "noise": 0.002, "aa": 0.999, "rounds": 100}]
    md, below = summarize(rows, 0.99, "GPU")
    assert below == ["4096x6144x4096"]
    assert "| 0.985 | 2.00% | 1.0120 | 400 |" in md and "| 0.973 **below** | 0.20% | 0.9990 | 100 |" in md
    assert "under 0.99 but inside their noise: 24x4096x4096" in md


def test_paired_stats_cancel_drift_and_measure_noise():
    """Clocks drift between rounds by ±5 %; within a round the library is 2 % faster than dispatch. The paired ratio
    finds 0.98 with a tight interval although the medians alone are smeared by the drift."""
    rng = np.random.default_rng(1)
    drift = 1 + 0.05 * np.sin(np.arange(200) / 7.0)
    jitter = lambda: 1 + 0.001 * rng.standard_normal(200)  # noqa: E731
    d = 100 * drift * jitter()
    s = {"dispatch": list(d), "dispatch_again": list(100 * drift * jitter()),
         "cublas": list(98 * drift * jitter()), "cublaslt_heuristic": list(99 * drift * jitter()),
         "cublaslt_autotune": list(101 * drift * jitter())}
    st = paired_stats(s)
    assert st["best"] == "cublas" and st["rounds"] == 200
    assert st["ratio"] == pytest.approx(0.98, abs=0.001) and abs(st["aa"] - 1) < 0.001
    assert st["noise"] < 0.002 and is_below(st["ratio"], st["noise"], 0.99)
    # an A/A control that disagrees by 1 % makes the noise at least 1 %
    s["dispatch_again"] = list(101 * drift * jitter())
    assert paired_stats(s)["noise"] >= 0.009


def test_cli_needs_shapes(capsys):
    assert main([]) == 2 and "give --shapes" in capsys.readouterr().err
    assert main(["--shape", "64x64x64", "--reps", "2"]) == 2 and "--reps >= 5" in capsys.readouterr().err

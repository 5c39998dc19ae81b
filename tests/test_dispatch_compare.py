"""bench.dispatch_compare's summary: ratio = best library / dispatch, shapes under the bar named, exit code."""
from bench.dispatch_compare import main, summarize


def test_summary_flags_shapes_below_the_bar():
    rows = [{"shape": "257x14336x4096", "dispatch": 107.8, "cublas": 52.6, "cublaslt_heuristic": 53.0,
             "cublaslt_autotune": 52.9, "explain": "general 1a2b (borrowed)"},
            {"shape": "16x4096x4096", "dispatch": 13.8, "cublas": 14.9, "cublaslt_heuristic": 15.0,
             "cublaslt_autotune": 14.9, "explain": "evo"}]
    md, below = summarize(rows, 0.99, "NVIDIA_H200")
    assert below == ["257x14336x4096"]
    assert "| 257x14336x4096 | 107.80 | 52.60 | 53.00 | 52.90 | 0.488 **below** |" in md
    assert "| 16x4096x4096 | 13.80 |" in md and "1.080 |" in md
    assert "1 below 0.99: 257x14336x4096" in md


def test_cli_needs_shapes(capsys):
    assert main([]) == 2 and "give --shapes" in capsys.readouterr().err

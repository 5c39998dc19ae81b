"""evo.table_classes: a table's rows by class (best library time x K) for the generated README."""
import math

from evo.export import _table_row
from evo.table_classes import best_lib_us, class_of, markdown, summarize


def _row(shape, lib_us, ratio, verdict, winner):
    m, n, k = (int(x) for x in shape.split("x"))
    return _table_row({"shape": shape, "m": m, "n": n, "k": k, "cublas_us": lib_us * 1.1, "cublaslt_heuristic_us": 0,
                       "cublaslt_autotune_us": lib_us, "speedup_best_library": ratio, "verdict": verdict,
                       "winner": winner})


def test_rows_fall_in_their_class_by_the_fastest_library_and_k():
    assert best_lib_us(_row("64x64x64", 5.0, 1.2, "win", "evo")) == 5.0
    assert class_of(_row("64x64x64", 5.0, 1.2, "win", "evo")) == (0, 0)
    assert class_of(_row("4096x4096x1024", 49.9, 1.0, "tie", "cublas")) == (1, 1)
    assert class_of(_row("8192x8192x3072", 900.0, 1.0, "tie", "cublas")) == (2, 2)  # K off the grid: the long class
    assert class_of(_table_row({"shape": "64x64x64", "m": 64, "n": 64, "k": 64})) is None  # no library timed


def test_a_class_counts_its_verdicts_and_the_table_serves_the_library_where_evo_does_not_win():
    rows = [_row("1024x1024x8192", 28.0, 0.9, "loss", "cublaslt_autotune"),
            _row("512x2048x4096", 18.0, 1.1, "win", "evo"),
            _row("256x1024x8192", 15.0, 1.02, "tie", "cublaslt_autotune"),
            _row("64x64x64", 5.0, 1.2, "win", "evo")]
    long_mid, small = summarize(rows)[1], summarize(rows)[0]
    assert (long_mid.rows, long_mid.wins, long_mid.ties, long_mid.losses) == (3, 1, 1, 1)
    assert math.isclose(long_mid.evo_geomean, (0.9 * 1.1 * 1.02) ** (1 / 3))
    assert math.isclose(long_mid.served_geomean, 1.1 ** (1 / 3))  # the loss and the tie serve the library: 1.0
    assert (long_mid.lowest_shape, long_mid.lowest) == ("1024x1024x8192", 0.9)
    assert (small.time_class, small.k_class, small.rows) == ("< 10 µs", "K <= 256", 1)
    lines = markdown(rows)
    assert len(lines) == 4 and "| 10-50 µs | K > 2048 | 3 | 1 | 1 | 1 |" in lines[3], lines
    assert markdown([]) == []

"""evo.dispatch without a GPU: table loading, what serves a shape (winner, library, borrowed general kernel,
cuBLAS), fallbacks that keep results right, input validation, and the dispatcher's own host overhead."""
from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from evo.dispatch import Dispatcher, row_band, validate
from evo.errors import EvoError
from evo.stream_local import StreamLocal

TESTS = Path(__file__).resolve().parent
NAIVE = (TESTS / "data" / "naive.cu").read_text()


def kernel_text(i: int, requires: str = "M > 0", **params) -> str:
    ps = ", ".join(f"{k}: {v}" for k, v in {"V": i, **params}.items())
    return NAIVE.replace("params: {}", f"params: {{{ps}}}\nrequires: \"{requires}\"", 1)


def ref(a, b):
    return (a.astype(np.float32) @ b.astype(np.float32).T).astype(np.float16)


class NumpyBackend:
    """Stands in for CupyBackend: NumPy arrays, 'kernels' that compute the reference (or garbage if WRONG),
    cuBLASLt 'algorithms' by config (`algos`, nvmath's autotune pick at index `nvmath`), and µs injected per call
    name (evo:<source shape>, cublas, cublaslt:<i>, where cublaslt stands for every algorithm not named): a number
    (every round) or a list (per round, repeated to the rounds asked for); `second` overrides them from the second
    measurement of a shape on."""

    gpu_key = "Fake_GPU"
    arch = "sm_90a"
    num_sms = 132
    native = np.ndarray
    driver = "580.1"

    def __init__(self, times: dict | None = None, second: dict | None = None):
        self.loaded: list[tuple[str, str]] = []
        self.precompiled: list[list[str]] = []  # the hashes of each precompile call
        self.checked: list[tuple[str, str]] = []
        self.cublas_calls = 0
        self.lt: list[tuple[str, dict | None, bool]] = []  # (shape, config asked for, tune)
        self.lt_all: list[str] = []  # shapes whose every planned algorithm was handed out for timing
        self.timed: list[tuple[str, tuple]] = []
        self.reps: list[int] = []
        self.times = {"cublas": 10.0, "cublaslt": 10.5, **(times or {})}
        self.second = second or {}
        self.algos = [{"algorithm_id": 7, "tile": "128x256"}, {"algorithm_id": 3}]
        self.nvmath = 1

    def cublaslt(self, problem, config, tune):
        self.lt.append((problem.key, config, tune))
        cfg = config or ({"algorithm_id": 7, "tile": "128x256"} if tune else {"algorithm_id": 3})
        how = "the stored algorithm" if config else ("autotuned on this GPU" if tune else "the heuristic's top-1")

        def call(a, b, c):
            c[...] = ref(a, b)

        return call, cfg, how

    def cublaslt_algorithms(self, problem):
        self.lt_all.append(problem.key)

        def call(a, b, c):
            c[...] = ref(a, b)

        return [(call, cfg) for cfg in self.algos], self.nvmath

    def time(self, problem, calls, reps):
        times = {**self.times, **(self.second if any(k == problem.key for k, _ in self.timed) else {})}
        self.timed.append((problem.key, tuple(sorted(calls))))
        self.reps.append(reps)
        return {name: list(np.resize(np.asarray(times.get(name, times.get(name.split(":")[0], 10.0)), float), reps))
                for name in calls}

    def adopt(self, x):
        return x

    def empty(self, m, n):
        return np.empty((m, n), np.float16)

    def cublas(self):
        def call(a, b, c):
            self.cublas_calls += 1
            c[...] = ref(a, b)

        return call

    def precompile(self, sources, cache_dir):
        self.precompiled.append(sorted(ks.hash for ks in sources))
        return [f"kernel {ks.hash} does not compile for sm_90a: error: boom" for ks in sources
                if ks.meta.params.get("NOCOMPILE")]

    def load(self, ks, problem, cache_dir):
        if ks.meta.params.get("NOCOMPILE"):
            raise EvoError(f"kernel {ks.hash} does not compile for sm_90a: error: boom")
        self.loaded.append((ks.hash, problem.key))
        wrong = ks.meta.params.get("WRONG")

        def call(a, b, c):
            c[...] = 0 if wrong else ref(a, b)

        call.hash = ks.hash
        return call

    def check(self, fn, problem):
        self.checked.append((fn.hash, problem.key))
        rs = np.random.default_rng(0)
        a = rs.standard_normal((problem.m, problem.k)).astype(np.float16)
        b = rs.standard_normal((problem.n, problem.k)).astype(np.float16)
        c = np.full((problem.m, problem.n), np.nan, np.float16)
        fn(a, b, c)
        return "" if np.allclose(c, ref(a, b), rtol=1e-2, atol=1e-2) else "relative error 1e+00 > 1e-02"


def make_table(root: Path, rows: list[tuple[str, str, str]], gpu: str = "Fake_GPU") -> Path:
    """rows: (shape, winner, kernel text or ''); written like evo.export writes them."""
    out = []
    for i, (shape, winner, text, *extra) in enumerate(rows):
        m, n, k = (int(x) for x in shape.split("x"))
        path = ""
        h = ""
        if text:
            from evo.kernel import KernelSource

            path = f"{gpu}/TN/{shape}.cu"
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
            h = KernelSource.parse(text).hash
        out.append({"gpu": gpu, "shape": shape, "layout": "TN", "m": m, "n": n, "k": k, "winner": winner,
                    "hash": h, "kernel_path": path, "family": "naive" if text else "", **(extra[0] if extra else {})})
    (root / gpu).mkdir(parents=True, exist_ok=True)
    (root / gpu / "table.json").write_text(json.dumps({"gpu": gpu, "layout": "TN", "rows": out}))
    return root / gpu


@pytest.fixture(autouse=True)
def decisions_file(tmp_path, monkeypatch):
    """Measured decisions go to a file of the test's own, never to ~/.cache."""
    path = tmp_path / "decisions.json"
    monkeypatch.setenv("EVO_DISPATCH_DECISIONS", str(path))
    return path


def inputs(m, n, k, seed=0):
    rs = np.random.default_rng(seed)
    return rs.standard_normal((m, k)).astype(np.float16), rs.standard_normal((n, k)).astype(np.float16)


@pytest.fixture
def table(tmp_path):
    return make_table(tmp_path, [
        ("256x256x256", "evo", kernel_text(0)),
        ("1024x1024x1024", "evo", kernel_text(1, requires="M % 128 == 0 and N % 128 == 0")),
        ("4096x4096x4096", "cublaslt_autotune", kernel_text(2)),
        ("8192x8192x8192", "cublas", ""),
        ("512x512x512", "evo", kernel_text(3, WRONG=1)),
    ])


def test_table_winner_is_used_and_loaded_once(table):
    be = NumpyBackend()
    d = Dispatcher.load(table, backend=be)
    a, b = inputs(256, 256, 256)
    for _ in range(3):
        c = d.matmul(a, b)
    np.testing.assert_array_equal(c, ref(a, b))
    assert d.plan(256, 256, 256).kind == "evo" and len(be.loaded) == 1 and be.checked == [] and be.cublas_calls == 0
    assert "table winner" in d.explain(256, 256, 256)


def test_library_rows_are_served_by_the_library_that_won(table, decisions_file):
    be = NumpyBackend()
    d = Dispatcher.load(table, backend=be)
    a, b = inputs(64, 64, 64)
    d.rows[(64, 64, 64)] = {"shape": "64x64x64", "winner": "cublas", "m": 64, "n": 64, "k": 64}
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    assert d.plan(64, 64, 64).kind == "library" and d.plan(64, 64, 64).library == "cublas"
    assert be.cublas_calls == 1 and be.loaded == []
    # cuBLASLt autotune won 4096^3 (the evo kernel lost): cuBLASLt serves, autotuned once here and kept
    plan = d.plan(4096, 4096, 4096)
    assert plan.kind == "library" and plan.library == "cublaslt_autotune" and be.loaded == []
    assert be.lt == [("4096x4096x4096", None, True)] and "autotuned on this GPU" in plan.reason
    assert "algorithm 7" in d.explain(4096, 4096, 4096)
    # a new process finds the autotuned algorithm in the decisions file and does not tune again
    be2 = NumpyBackend()
    Dispatcher.load(table, backend=be2).plan(4096, 4096, 4096)
    assert be2.lt == [("4096x4096x4096", {"algorithm_id": 7, "tile": "128x256"}, True)]
    assert json.loads(decisions_file.read_text())


def test_cublaslt_rows_use_the_stored_algorithm_or_the_heuristic(tmp_path):
    algo = {"algorithm_id": 21, "tile": "64x128", "stages": "64x4", "split_k": 1}
    root = make_table(tmp_path, [
        ("1024x1024x1024", "cublaslt_autotune", "", {"library_algorithms": {"cublaslt_autotune": algo}}),
        ("2048x2048x2048", "cublaslt_heuristic", ""),
    ])
    be = NumpyBackend()
    d = Dispatcher.load(root, backend=be)
    a, b = inputs(1024, 1024, 1024)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    assert be.lt == [("1024x1024x1024", algo, True)] and "stored algorithm" in d.explain(1024, 1024, 1024)
    d.plan(2048, 2048, 2048)
    assert be.lt[-1] == ("2048x2048x2048", None, False) and "heuristic" in d.explain(2048, 2048, 2048)
    assert be.cublas_calls == 0


def test_cublaslt_failure_falls_back_to_cublas(tmp_path):
    root = make_table(tmp_path, [("1024x1024x1024", "cublaslt_autotune", "")])
    be = NumpyBackend()

    def broken(problem, config, tune):
        raise EvoError("cuBLASLt through nvmath-python is not available (No module named 'nvmath')")

    be.cublaslt = broken
    d = Dispatcher.load(root, backend=be)
    a, b = inputs(1024, 1024, 1024)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    assert be.cublas_calls == 1 and "cuBLASLt unavailable" in d.plan(1024, 1024, 1024).reason


@pytest.mark.parametrize("speedup, spread, kind", [(1.009, 0.01, "library"), (1.08, 0.01, "evo"),
                                                    (1.04, 0.12, "library"), (0.0, 0.0, "evo")])
def test_evo_wins_count_only_beyond_the_noise_band(tmp_path, speedup, spread, kind):
    """The table's own verdict, ties not measured again (dispatch.measure_ties off: the tests below have it on)."""
    from evo.dispatch import DispatchSettings

    root = make_table(tmp_path, [("256x256x256", "evo", kernel_text(0),
                                  {"speedup_best_library": speedup, "best_library": "cublaslt_autotune",
                                   "spread": spread, "best_library_spread": spread})])
    be = NumpyBackend()
    d = Dispatcher.load(root, backend=be, settings=DispatchSettings.from_config(measure_ties=False))
    plan = d.plan(256, 256, 256)
    assert plan.kind == kind, plan.reason
    if kind == "library":
        assert plan.library == "cublaslt_autotune" and "inside the noise band" in plan.reason and be.loaded == []


def tie_table(root: Path, text: str, speedup: float = 1.10, band: float = 0.12, winner: str = "cublaslt_autotune") -> Path:
    """One small-shape row the way a sweep exports a tie: the library kept, evo's kernel ahead inside a wide band."""
    return make_table(root, [("512x512x64", winner, text, {"speedup_best_library": speedup, "noise_band": band,
                                                            "best_library": "cublaslt_autotune", "verdict": "tie"})])


def test_a_tie_whose_evo_kernel_led_is_measured_here_and_evo_serves_when_it_wins(tmp_path, decisions_file):
    """evo 1.10x inside a 12 % band in the table: timed here against cuBLAS and every cuBLASLt algorithm (paired,
    one measurement), 1.25x beyond noise, so evo's own kernel serves; the decision is kept for that kernel."""
    from evo.kernel import KernelSource

    root = tie_table(tmp_path, kernel_text(5))
    h = KernelSource.parse(kernel_text(5)).hash
    be = NumpyBackend({"evo:512x512x64": 8.0})
    d = Dispatcher.load(root, backend=be)
    assert d.measures_tie(d.rows[(512, 512, 64)])
    a, b = inputs(512, 512, 64)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(512, 512, 64)
    assert plan.kind == "evo" and plan.hash == h and plan.ratio == pytest.approx(1.25), plan.reason
    assert "a tie in the table (evo 1.100x inside its ±12.0% noise band)" in plan.reason and "measured here" in plan.reason
    assert be.checked == [(h, "512x512x64")]  # checked on the shape before it was timed
    assert be.timed == [("512x512x64", ("cublas", "cublaslt:0", "cublaslt:1", "evo:512x512x64"))]
    saved = json.loads(decisions_file.read_text())
    assert list(saved) == [f"Fake_GPU|580.1|512x512x64|tie:{h}"] and saved[f"Fake_GPU|580.1|512x512x64|tie:{h}"]["serve"] == "evo"
    # another process reads the decision: nothing timed, the kernel checked again before use
    be2 = NumpyBackend({"evo:512x512x64": 8.0})
    plan2 = Dispatcher.load(root, backend=be2).plan(512, 512, 64)
    assert plan2.kind == "evo" and be2.timed == [] and be2.checked == [(h, "512x512x64")]
    # a new kernel in that row is a new decision, measured again
    root3 = tie_table(tmp_path / "t3", kernel_text(6))
    be3 = NumpyBackend({"evo:512x512x64": 8.0})
    Dispatcher.load(root3, backend=be3).plan(512, 512, 64)
    assert len(be3.timed) == 1


@pytest.mark.parametrize("evo_us", [10.0, 9.9, 12.0])
def test_a_measured_tie_that_evo_does_not_win_here_goes_to_the_fastest_library(tmp_path, evo_us):
    root = tie_table(tmp_path, kernel_text(5))
    be = NumpyBackend({"evo:512x512x64": evo_us, "cublaslt": 9.5})
    d = Dispatcher.load(root, backend=be)
    a, b = inputs(512, 512, 64)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(512, 512, 64)
    assert plan.kind == "library" and plan.library == "cublaslt" and be.cublas_calls == 0, plan.reason
    assert plan.reason.startswith("a tie in the table") and "cuBLASLt measured fastest (9.50 us" in plan.reason
    assert f"its evo kernel measured {9.5 / evo_us:.3f}x" in plan.reason and "not beyond" in plan.reason
    # another process reads the decision: the library serves, nothing timed, the evo kernel not even loaded
    be2 = NumpyBackend()
    plan2 = Dispatcher.load(root, backend=be2).plan(512, 512, 64)
    assert plan2.kind == "library" and plan2.library == "cublaslt" and be2.timed == [] and be2.loaded == []


@pytest.mark.parametrize("speedup, winner, text, measure", [
    (1.015, "cublaslt_autotune", kernel_text(5), True),   # evo's lead within the 2 % floor: the table decides
    (0.95, "cublaslt_autotune", kernel_text(5), True),    # a loss
    (1.10, "cublaslt_autotune", "", True),                # no kernel to time
    (1.10, "cublaslt_autotune", kernel_text(5), False),   # dispatch.measure_ties off
])
def test_ties_not_worth_measuring_are_served_as_the_table_says(tmp_path, speedup, winner, text, measure):
    from evo.dispatch import DispatchSettings

    root = tie_table(tmp_path, text, speedup=speedup, winner=winner)
    be = NumpyBackend()
    d = Dispatcher.load(root, backend=be, settings=DispatchSettings.from_config(measure_ties=measure))
    plan = d.plan(512, 512, 64)
    assert not d.measures_tie(d.rows[(512, 512, 64)])
    assert plan.kind == "library" and plan.library == "cublaslt_autotune" and "wins in the table" in plan.reason
    assert be.timed == [] and be.loaded == []


def test_a_tie_whose_kernel_fails_here_is_served_as_the_table_says(tmp_path):
    from evo.kernel import KernelSource

    root = tie_table(tmp_path, kernel_text(5, WRONG=1))
    be = NumpyBackend({"evo:512x512x64": 1.0})
    d = Dispatcher.load(root, backend=be)
    a, b = inputs(512, 512, 64)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(512, 512, 64)
    assert plan.kind == "library" and plan.library == "cublaslt_autotune" and be.timed == []
    assert "its evo kernel is unusable here" in plan.reason
    assert be.checked == [(KernelSource.parse(kernel_text(5, WRONG=1)).hash, "512x512x64")]


def test_an_evo_row_inside_its_band_is_a_measured_tie_too(tmp_path):
    """An older table's row that names evo as the winner with a lead inside its band: the same measurement."""
    root = make_table(tmp_path, [("256x256x256", "evo", kernel_text(0),
                                  {"speedup_best_library": 1.04, "best_library": "cublaslt_autotune",
                                   "spread": 0.12, "best_library_spread": 0.12})])
    be = NumpyBackend({"evo:256x256x256": 9.0, "cublaslt": 10.5})
    plan = Dispatcher.load(root, backend=be).plan(256, 256, 256)
    assert plan.kind == "evo" and plan.ratio == pytest.approx(10.0 / 9.0, abs=1e-4) and len(be.timed) == 1, plan.reason
    assert "a tie in the table (evo 1.040x inside its ±6.0% noise band)" in plan.reason


def test_precompile_includes_the_kernels_of_measured_ties(tmp_path):
    from evo.kernel import KernelSource

    root = make_table(tmp_path, [
        ("512x512x64", "cublaslt_autotune", kernel_text(5), {"speedup_best_library": 1.10, "noise_band": 0.12}),
        ("512x512x128", "cublaslt_autotune", kernel_text(6), {"speedup_best_library": 1.01, "noise_band": 0.12}),
    ])
    be = NumpyBackend()
    assert Dispatcher.load(root, backend=be).precompile() == []
    assert be.precompiled == [[KernelSource.parse(kernel_text(5)).hash]]


def test_unknown_shape_borrows_a_kernel_only_after_it_won_on_that_shape(table, decisions_file):
    be = NumpyBackend({"evo:256x256x256": 8.0})
    d = Dispatcher.load(table, backend=be)
    a, b = inputs(300, 200, 250)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(300, 200, 250)
    # nearest evo rows: 256^3 (accepts anything) before 512^3 (wrong) and 1024^3 (requires M % 128 == 0: skipped)
    assert plan.kind == "general" and plan.source_shape == "256x256x256"
    assert (plan.hash, "300x200x250") in be.checked
    # the wrong 512^3 kernel is never timed; cuBLAS and every planned cuBLASLt algorithm are, in one measurement
    assert be.timed == [("300x200x250", ("cublas", "cublaslt:0", "cublaslt:1", "evo:256x256x256"))]
    assert plan.ratio == pytest.approx(1.25) and "1.250x" in d.explain(300, 200, 250)
    assert d.matmul(a, b) is not None and len(be.timed) == 1  # decided once per shape
    saved = json.loads(decisions_file.read_text())
    (k, v), = [(k, v) for k, v in saved.items() if "300x200x250" in k]
    assert k == "Fake_GPU|580.1|300x200x250|shape" and v["serve"] == "evo" and v["ratio"] == pytest.approx(1.25)
    # another process: the decision is read, not measured again; the kernel is still checked before use
    be2 = NumpyBackend({"evo:256x256x256": 8.0})
    d2 = Dispatcher.load(table, backend=be2)
    assert d2.plan(300, 200, 250).kind == "general" and be2.timed == [] and len(be2.checked) == 1
    # a new driver is a new decision
    be3 = NumpyBackend({"evo:256x256x256": 8.0})
    be3.driver = "590.2"
    Dispatcher.load(table, backend=be3).plan(300, 200, 250)
    assert len(be3.timed) == 1


@pytest.mark.parametrize("evo_us, served", [(21.4, "cublas"), (10.1, "cublas"), (9.9, "cublas")])
def test_slower_borrowed_kernel_loses_to_the_library(table, evo_us, served):
    """The issue's case: a nearby shape's kernel, correct but 0.49x cuBLAS, must not serve; nor one inside noise."""
    be = NumpyBackend({"evo:256x256x256": evo_us})
    d = Dispatcher.load(table, backend=be)
    a, b = inputs(300, 200, 250)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(300, 200, 250)
    assert plan.kind == served and be.cublas_calls == 1, plan.reason
    assert f"{10.0 / evo_us:.3f}x" in plan.reason and "not beyond" in plan.reason


def test_unknown_shape_served_by_the_faster_library(table):
    be = NumpyBackend({"cublaslt": 9.0})
    d = Dispatcher.load(table, backend=be)
    a, b = inputs(8000, 8000, 16)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(8000, 8000, 16)
    assert plan.kind == "cublaslt" and "cuBLASLt measured fastest" in plan.reason
    assert be.lt == [] and be.lt_all == ["8000x8000x16"]  # the timed call serves: planned once, no second tuning
    be2 = NumpyBackend({"cublaslt": 9.0})
    Dispatcher.load(table, backend=be2).plan(8000, 8000, 16)
    assert be2.timed == [] and be2.lt == [("8000x8000x16", {"algorithm_id": 7, "tile": "128x256"}, False)]


def test_wrong_borrowed_kernel_is_never_used(tmp_path):
    root = make_table(tmp_path, [("512x512x512", "evo", kernel_text(3, WRONG=1)),
                                 ("64x64x64", "evo", kernel_text(4, requires="M % 64 == 0"))])
    be = NumpyBackend({"evo:512x512x512": 1.0})
    d = Dispatcher.load(root, backend=be)
    a, b = inputs(500, 500, 500)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(500, 500, 500)
    assert plan.kind == "cublas" and "fails on 500x500x500" in plan.reason and be.cublas_calls == 1
    assert be.timed == [("500x500x500", ("cublas", "cublaslt:0", "cublaslt:1"))]


def test_unknown_shape_near_library_region_borrows_nothing(table):
    be = NumpyBackend()
    d = Dispatcher.load(table, backend=be)
    plan = d.plan(8000, 8000, 8000)
    assert plan.kind == "cublas" and be.loaded == [] and be.timed == [("8000x8000x8000", ("cublas", "cublaslt:0", "cublaslt:1"))]


def test_compile_failure_falls_back(tmp_path):
    root = make_table(tmp_path, [("256x256x256", "evo", kernel_text(0, NOCOMPILE=1))])
    be = NumpyBackend()
    d = Dispatcher.load(root, backend=be)
    a, b = inputs(256, 256, 256)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(256, 256, 256)
    assert plan.kind == "library" and plan.library == "cublas" and "does not compile" in plan.reason


def test_precompile_compiles_each_evo_winner_once_before_any_call(tmp_path):
    from evo.kernel import KernelSource

    shared = kernel_text(0)  # one kernel serving two shapes
    root = make_table(tmp_path, [
        ("256x256x256", "evo", shared),
        ("512x256x256", "evo", shared),
        ("1024x1024x1024", "evo", kernel_text(1, NOCOMPILE=1)),
        ("4096x4096x4096", "cublaslt_autotune", kernel_text(2)),  # a library row: its losing kernel is not compiled
        ("8192x8192x8192", "cublas", ""),
    ])
    be = NumpyBackend()
    d = Dispatcher.load(root, backend=be)
    errors = d.precompile()
    broken = KernelSource.parse(kernel_text(1, NOCOMPILE=1)).hash
    assert be.precompiled == [sorted({KernelSource.parse(shared).hash, broken})] and be.loaded == []
    assert len(errors) == 1 and "does not compile" in errors[0] and broken in errors[0]
    a, b = inputs(256, 256, 256)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))  # serving is unchanged by it
    only_libraries = make_table(tmp_path / "libs", [("8192x8192x8192", "cublas", "")])
    be2 = NumpyBackend()
    assert Dispatcher.load(only_libraries, backend=be2).precompile() == [] and be2.precompiled == []


def test_cupy_backend_precompiles_side_by_side_into_the_cache_it_loads_from(tmp_path):
    """CupyBackend.precompile hands every kernel to one compile_many for this GPU's arch, and names the failures."""
    from types import SimpleNamespace

    from evo.dispatch import CupyBackend
    from evo.kernel import KernelSource

    class Compiler:
        def __init__(self):
            self.items = []

        def compile_many(self, items):
            self.items.append(list(items))
            return [SimpleNamespace(hash=ks.hash, ok=i == 0, error="" if i == 0 else "ptxas error")
                    for i, (ks, _) in enumerate(items)]

    be = CupyBackend.__new__(CupyBackend)
    be.arch, be.cache_dir, be._compiler = "sm_90a", None, Compiler()
    kss = [KernelSource.parse(kernel_text(i)) for i in range(2)]
    assert be.precompile(kss, tmp_path) == [f"kernel {kss[1].hash} does not compile for sm_90a: ptxas error"]
    assert be._compiler.items == [[(kss[0], "sm_90a"), (kss[1], "sm_90a")]]
    assert be.compiler(tmp_path) is be._compiler  # load compiles through the same compiler (and cache)


def test_table_winner_whose_requires_refuses_this_gpu_falls_back(tmp_path):
    # a one-wave kernel (wgmma_sm90 SPLIT_RS) exported from a GPU with more SMs than this one: never launched here
    root = make_table(tmp_path, [("256x256x256", "evo", kernel_text(0, requires="NUM_SMS >= 200"))])
    be = NumpyBackend()
    d = Dispatcher.load(root, backend=be)
    a, b = inputs(256, 256, 256)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(256, 256, 256)
    assert plan.kind == "library" and "does not take 256x256x256 on this GPU (132 SMs" in plan.reason
    assert be.loaded == []


def test_verify_all_checks_table_winners(table):
    be = NumpyBackend()
    d = Dispatcher.load(table, backend=be, verify="all")
    a, b = inputs(512, 512, 512)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))  # the table's (wrong) winner is caught
    assert d.plan(512, 512, 512).kind == "library"
    # without verification the table is trusted for its own shapes
    assert Dispatcher.load(table, backend=NumpyBackend()).plan(512, 512, 512).kind == "evo"


def test_corrupt_decisions_file_is_set_aside(table, decisions_file):
    decisions_file.write_text("{not json")
    be = NumpyBackend({"evo:256x256x256": 8.0})
    assert Dispatcher.load(table, backend=be).plan(300, 200, 250).kind == "general"
    assert decisions_file.with_name("decisions.json.corrupt").exists() and json.loads(decisions_file.read_text())


def test_load_without_a_gpu_is_one_clean_error(monkeypatch, table):
    import sys

    from evo.dispatch import CupyBackend
    from evo.errors import NoGpuError

    monkeypatch.setitem(sys.modules, "cupy", None)  # as on a machine without CuPy
    with pytest.raises(NoGpuError, match="needs CuPy and a CUDA GPU"):
        CupyBackend()
    with pytest.raises(NoGpuError):
        Dispatcher.load(table)


def test_out_argument(table):
    d = Dispatcher.load(table, backend=NumpyBackend())
    a, b = inputs(256, 256, 256)
    out = np.empty((256, 256), np.float16)
    assert d.matmul(a, b, out=out) is out
    np.testing.assert_array_equal(out, ref(a, b))
    with pytest.raises(ValueError, match=r"out must be a C-contiguous float16 \[256, 256\]"):
        d.matmul(a, b, out=np.empty((256, 255), np.float16))


@pytest.mark.parametrize("a, b, err, match", [
    ([[1.0]], np.zeros((2, 2), np.float16), TypeError, "A must be a CuPy array or a torch CUDA tensor, not list"),
    (np.zeros((4, 8), np.float32), np.zeros((4, 8), np.float16), TypeError, "A must be float16, got float32"),
    (np.zeros(8, np.float16), np.zeros((4, 8), np.float16), ValueError, r"A must be 2-D \[M, K\], got shape \(8,\)"),
    (np.zeros((4, 8), np.float16), np.zeros((4, 6), np.float16), ValueError, "K differs"),
    (np.zeros((8, 4), np.float16).T, np.zeros((4, 8), np.float16), ValueError, "A must be C-contiguous"),
    (np.zeros((4, 8), np.float16), np.zeros((0, 8), np.float16), ValueError, "B has an empty dimension"),
])
def test_validation_errors_are_one_line(a, b, err, match):
    with pytest.raises(err, match=match) as e:
        validate(a, b)
    assert "\n" not in str(e.value)


def test_load_errors(tmp_path, table):
    with pytest.raises(EvoError, match="no kernel table for Fake_GPU"):
        Dispatcher.load(tmp_path / "nowhere", backend=NumpyBackend())
    other = NumpyBackend()
    other.gpu_key = "Other_GPU"
    with pytest.raises(EvoError, match="is the table of Fake_GPU, this GPU is Other_GPU"):
        Dispatcher.load(table, backend=other)
    be = NumpyBackend()
    d = Dispatcher.load(None, backend=be) if (Path("kernels_out") / "Fake_GPU").exists() else None
    assert d is None or d.gpu == "Fake_GPU"


def test_load_without_a_folder_looks_in_the_config_paths_out(tmp_path, monkeypatch):
    monkeypatch.delenv("EVO_KERNELS", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EvoError, match=r"at kernels_out/Fake_GPU/table\.json"):
        Dispatcher.load(None, backend=NumpyBackend())
    monkeypatch.setenv("EVO_KERNELS", str(tmp_path / "elsewhere"))
    with pytest.raises(EvoError, match="elsewhere/Fake_GPU/table"):
        Dispatcher.load(None, backend=NumpyBackend())


def test_table_exported_by_a_sweep_dispatches(tmp_path):
    """The table.json evo.export writes after a (fake) sweep is what the dispatcher reads."""
    from evo.problem import parse_shape
    from evo.sweep import run_sweep
    from test_sweep import CachingFakeCompiler, ShapeFake, make_cfg

    cfg = make_cfg(tmp_path)
    shapes = ["256x256x256", "512x512x512", "2048x2048x2048"]
    run_sweep([parse_shape(s) for s in shapes], cfg, device_ids=[0], worker_factory=ShapeFake,
              compiler=CachingFakeCompiler(), out=io.StringIO())
    be = NumpyBackend()
    be.load = lambda ks, p, cache: (lambda a, b, c: c.__setitem__(Ellipsis, ref(a, b)))  # toy kernels are correct
    d = Dispatcher.load(Path(cfg.paths.out) / "Fake_GPU", backend=be)
    assert {r["shape"] for r in d.rows.values()} == set(shapes)
    for s in shapes:
        m, n, k = (int(x) for x in s.split("x"))
        row, kind = d.rows[(m, n, k)], d.plan(m, n, k).kind
        evo_wins = row["winner"] == "evo" and row["speedup_best_library"] > 1 + row_band(row, 0.02)
        assert kind == ("evo" if evo_wins else "library"), d.explain(m, n, k)
    a, b = inputs(256, 256, 256)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))


def test_dispatch_host_overhead_without_gpu(table, capsys):
    """The dispatcher's own Python work per call (validation, plan lookup, output allocation) on NumPy inputs."""
    be = NumpyBackend()
    d = Dispatcher.load(table, backend=be)
    a, b = inputs(256, 256, 256)
    d.matmul(a, b)
    plan = d.plan(256, 256, 256)
    plan.fn = lambda a, b, c: None  # leave the 'kernel' out: only the dispatch path is timed
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        d.matmul(a, b)
    per_call = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(n):
        plan.fn(a, b, np.empty((256, 256), np.float16))
    bare = (time.perf_counter() - t0) / n * 1e6
    with capsys.disabled():
        print(f"\ndispatch host overhead (CPU, NumPy stand-in): {per_call:.2f} us per call vs {bare:.2f} us bare "
              f"-> {per_call - bare:.2f} us of dispatch logic")
    assert per_call - bare < 50


@pytest.mark.parametrize("times, settle, lib, alg, rounds", [
    # near-tie (0.4 %, inside the 2 % floor): a second round of 200 settles it, the fastest median serves
    ({"cublas": 10.0, "cublaslt:0": 10.3, "cublaslt:1": 10.04}, 200, "cublas", 0, 2),
    # the same without a second round: cuBLASLt within the 0.5 % library tie serves
    ({"cublas": 10.0, "cublaslt:0": 10.3, "cublaslt:1": 10.04}, 0, "cublaslt", 3, 1),
    ({"cublas": 10.0, "cublaslt:0": 10.3, "cublaslt:1": 10.2}, 0, "cublas", 0, 1),  # cuBLAS beyond the tie
    ({"cublas": 10.0, "cublaslt:0": 9.7, "cublaslt:1": 9.9}, 0, "cublaslt", 7, 1),  # the fastest algorithm, not the first
    ({"cublas": 10.0, "cublaslt:0": 9.7, "cublaslt:1": 9.8}, 200, "cublaslt", 7, 2),
    ({"cublas": 10.0, "cublaslt:0": 9.0, "cublaslt:1": 9.9}, 200, "cublaslt", 7, 1),  # a clear winner: one round
])
def test_off_table_library_choice_over_every_algorithm(table, decisions_file, times, settle, lib, alg, rounds):
    from evo.decisions import METHOD
    from evo.dispatch import DispatchSettings

    be = NumpyBackend(times)
    d = Dispatcher.load(table, backend=be, settings=DispatchSettings.from_config(settle_reps=settle))
    a, b = inputs(8000, 8000, 16)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(8000, 8000, 16)
    assert plan.kind == lib and len(be.timed) == rounds, plan.reason
    (v,) = json.loads(decisions_file.read_text()).values()
    assert v["serve"] == lib and v["method"] == METHOD
    if lib == "cublaslt":
        assert v["algorithm"]["algorithm_id"] == alg and v["lib_us"] == pytest.approx(min(times["cublaslt:0"], times["cublaslt:1"]))
        if times["cublas"] < v["lib_us"]:
            assert "library tie" in plan.reason
    else:
        assert v["algorithm"] == {} and be.cublas_calls == 1


def test_near_tie_goes_to_a_second_round_that_decides(tmp_path, decisions_file):
    """The H200 case: the first measurement has algorithm 0 ahead by 0.3 %, inside the noise; nvmath's pick
    (algorithm 1) is a near-tie; 200 more rounds of the near-ties alone find algorithm 1 faster, and it serves."""
    from evo.dispatch import DispatchSettings

    root = make_table(tmp_path, [("8192x8192x8192", "cublas", "")])
    be = NumpyBackend({"cublas": 39.0, "cublaslt:0": 38.03, "cublaslt:1": 38.15},
                      second={"cublas": 39.0, "cublaslt:0": 38.21, "cublaslt:1": 37.65})
    d = Dispatcher.load(root, backend=be, settings=DispatchSettings.from_config(measure_reps=60, settle_reps=200))
    a, b = inputs(128, 1894, 358)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(128, 1894, 358)
    assert be.timed == [("128x1894x358", ("cublas", "cublaslt:0", "cublaslt:1")),
                        ("128x1894x358", ("cublaslt:0", "cublaslt:1"))]  # cuBLAS (2.6 % slower) is not a near-tie
    assert be.reps == [60, 200]
    assert plan.kind == "cublaslt" and "second round of 200" in plan.reason and "cublaslt:1 serves" in plan.reason
    assert "nvmath's autotune pick" in plan.reason
    (v,) = json.loads(decisions_file.read_text()).values()
    assert v["algorithm"] == {"algorithm_id": 3} and v["lib_us"] == pytest.approx(37.65)
    # the very call timed in the second round serves; a new process reads the decision and measures nothing
    be2 = NumpyBackend()
    assert Dispatcher.load(root, backend=be2).plan(128, 1894, 358).kind == "cublaslt" and be2.timed == []
    assert be2.lt == [("128x1894x358", {"algorithm_id": 3}, False)]


def test_clear_winner_is_not_measured_again(tmp_path, decisions_file):
    root = make_table(tmp_path, [("8192x8192x8192", "cublas", "")])
    be = NumpyBackend({"cublas": 39.0, "cublaslt:0": 37.0, "cublaslt:1": 38.2})  # 3.2 % and 5.4 % behind
    plan = Dispatcher.load(root, backend=be).plan(128, 1894, 358)
    assert len(be.timed) == 1 and plan.kind == "cublaslt" and "near-tie" not in plan.reason
    assert json.loads(decisions_file.read_text())["Fake_GPU|580.1|128x1894x358|shape"]["algorithm"]["algorithm_id"] == 7


def test_near_tie_band_is_the_measured_noise_where_wider_than_the_floor(tmp_path):
    """3 % behind is a clear loss for a quiet measurement, a near-tie for a noisy one (bootstrap of paired ratios)."""
    root = make_table(tmp_path, [("8192x8192x8192", "cublas", "")])
    rs = np.random.default_rng(3)
    quiet = {"cublas": 50.0, "cublaslt:0": 10.0, "cublaslt:1": 10.3}
    noisy = {"cublas": 50.0, "cublaslt:0": list(10.0 * (1 + 0.15 * rs.standard_normal(60))),
             "cublaslt:1": list(10.3 * (1 + 0.15 * rs.standard_normal(60)))}
    for times, rounds in ((quiet, 1), (noisy, 2)):
        be = NumpyBackend(times)
        Dispatcher.load(root, backend=be).plan(100, 1000, 100 + rounds)
        assert len(be.timed) == rounds, times


def test_nvmath_pick_is_always_a_contender(tmp_path, decisions_file):
    """Five algorithms inside the noise, settle_max 3: the two fastest and nvmath's pick (the slowest of the five,
    still within the noise) are timed again; the others are left out."""
    from evo.dispatch import DispatchSettings

    root = make_table(tmp_path, [("8192x8192x8192", "cublas", "")])
    times = {"cublas": 20.0, **{f"cublaslt:{i}": 10.0 + 0.02 * i for i in range(5)}}
    be = NumpyBackend(times, second={"cublaslt:4": 9.5})
    be.algos = [{"algorithm_id": 10 + i} for i in range(5)]
    be.nvmath = 4
    plan = Dispatcher.load(root, backend=be, settings=DispatchSettings.from_config(settle_max=3)).plan(64, 4096, 512)
    assert be.timed[1] == ("64x4096x512", ("cublaslt:0", "cublaslt:1", "cublaslt:4"))
    assert plan.kind == "cublaslt" and "cublaslt:4 serves" in plan.reason
    assert next(iter(json.loads(decisions_file.read_text()).values()))["algorithm"] == {"algorithm_id": 14}


def test_near_ties_function():
    from evo.dispatch import near_ties

    s = {"a": [10.0] * 50, "b": [10.1] * 50, "c": [10.5] * 50, "d": [10.15] * 50}
    assert [t.name for t in near_ties(s, 0.02, 4)] == ["a", "b", "d"]
    assert [t.name for t in near_ties(s, 0.02, 2, keep="d")] == ["a", "d"]
    assert [t.name for t in near_ties(s, 0.005, 4)] == ["a"]  # a clear winner
    assert near_ties(s, 0.02, 4)[1].ratio == pytest.approx(1.01) and near_ties({}, 0.02, 4) == []


def test_second_round_is_bounded_by_the_device_time_budget(tmp_path):
    """Near-ties of 2.75 ms each: 200 rounds would be 1.1 s; a 0.5 s budget gives 90 rounds (never under measure_reps)."""
    from evo.dispatch import DispatchSettings

    root = make_table(tmp_path, [("8192x8192x8192", "cublas", "")])
    be = NumpyBackend({"cublas": 2750.0, "cublaslt": 2751.0})
    Dispatcher.load(root, backend=be, settings=DispatchSettings.from_config(settle_budget_s=0.5, settle_max=2)).plan(2048, 57344, 8191)
    assert be.reps == [60, 90]
    be = NumpyBackend({"cublas": 2750.0, "cublaslt": 2751.0})
    Dispatcher.load(root, backend=be, settings=DispatchSettings.from_config(settle_budget_s=0.01, settle_max=2)).plan(2048, 57344, 8190)
    assert be.reps == [60, 60]


def test_decision_measured_the_old_way_is_measured_again(table, decisions_file):
    """A decision without the current method (e.g. an nvmath-autotune pick from an older evo) is not trusted."""
    decisions_file.write_text(json.dumps({"Fake_GPU|580.1|8000x8000x16|shape": {
        "serve": "cublaslt", "lib_us": 9.0, "library": "cublaslt", "algorithm": {"algorithm_id": 3}}}))
    be = NumpyBackend({"cublas": 9.0, "cublaslt": 11.0})
    plan = Dispatcher.load(table, backend=be).plan(8000, 8000, 16)
    assert plan.kind == "cublas" and len(be.timed) == 1
    assert json.loads(decisions_file.read_text())["Fake_GPU|580.1|8000x8000x16|shape"]["method"]


@pytest.mark.parametrize("mode, n, idx", [("reorder", 3, 2), ("outside", 4, 3), ("fails", 3, -1)])
def test_cupy_backend_marks_nvmath_pick_among_planned_algorithms(monkeypatch, mode, n, idx):
    """CupyBackend.cublaslt_algorithms keeps the heuristic's order (nvmath's autotune reorders its list), finds
    nvmath's pick among the planned algorithms by identity, appends a pick outside the plan, and still hands out
    the planned algorithms when nvmath's autotune fails."""
    import evo.ltgemm
    from evo.dispatch import CupyBackend
    from evo.problem import Problem

    class Alg:
        def __init__(self, i):
            self.algorithm_id = i

    class FakeLt:
        def __init__(self, m, n, k, limit=8):
            self.algs = [Alg(i) for i in range(3)]

        @property
        def algorithms(self):
            return list(self.algs)

        def autotune(self):
            if mode == "fails":
                raise RuntimeError("boom")
            self.algs = self.algs[::-1]  # as nvmath: the winner first
            return self.algs[0] if mode == "reorder" else Alg(99)

        def bind(self, alg, own_workspace=False):
            return lambda a, b, c: alg

    monkeypatch.setattr(evo.ltgemm, "LtGemm", FakeLt)
    be = object.__new__(CupyBackend)
    be.lt_algorithms, be.stream_instances = 8, 8
    be.cupy = SimpleNamespace(cuda=SimpleNamespace(get_current_stream=lambda: SimpleNamespace(ptr=0),
                                                   runtime=SimpleNamespace(streamIsCapturing=lambda s: False)))
    algs, pick = be.cublaslt_algorithms(Problem(64, 64, 64))
    assert len(algs) == n and pick == idx
    assert all(isinstance(fn, StreamLocal) for fn, _ in algs)  # each stream binds its own workspace
    assert [cfg["algorithm_id"] for _, cfg in algs[:3]] == [0, 1, 2]
    if mode == "outside":
        assert algs[3][1]["algorithm_id"] == 99


def test_the_gpu_tests_off_table_shapes_are_outside_every_committed_table():
    """test_dispatch_gpu.py checks the dispatcher's fallback on shapes the table lacks; a sweep that adds one of them
    to a table would turn that check into a table lookup."""
    import csv

    from test_dispatch_gpu import OFF_TABLE

    root = Path(__file__).resolve().parent.parent / "kernels_out"
    tables = sorted(root.glob("*/table.csv"))
    assert tables
    for t in tables:
        with open(t) as f:
            shapes = {r["shape"] for r in csv.DictReader(f)}
        assert not shapes & set(OFF_TABLE), (t, shapes & set(OFF_TABLE))


def test_shape_compiled_kernel_is_rendered_again_for_a_shape_outside_the_table(tmp_path, decisions_file):
    """mma_small_sm80 compiles M, N, K in, so its table kernel takes its own shape only; a shape outside the table
    borrows the row's parameters rendered again with its own constants, checked and timed like any borrowed kernel."""
    from evo.families import load_families
    from evo.problem import Problem

    fam = load_families(names=["mma_small_sm80"])[0]
    params = fam.complete({"BM": 16, "BN": 16, "BK": 64, "WARPS_M": 1, "WARPS_N": 1, "WARPS_K": 2, "STAGES": 8,
                           "SPLIT_K": 2})
    own = fam.render(params, Problem(16, 4096, 14336))
    root = make_table(tmp_path, [("16x4096x14336", "evo", own.text), ("4096x4096x4096", "cublas", "")])
    be = NumpyBackend({"evo:16x4096x14336": 8.0})
    d = Dispatcher.load(root, backend=be)
    assert not own.serves(Problem(16, 5120, 13824), "sm_90a", 132)  # the row's own kernel refuses the new shape
    a, b = inputs(16, 5120, 13824)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    plan = d.plan(16, 5120, 13824)
    assert plan.kind == "general" and plan.source_shape == "16x4096x14336", plan.reason
    (h, shape), = be.loaded
    assert shape == "16x5120x13824" and h != own.hash  # a kernel of its own, not the row's
    assert (h, "16x5120x13824") in be.checked
    assert be.timed == [("16x5120x13824", ("cublas", "cublaslt:0", "cublaslt:1", "evo:16x4096x14336"))]
    rendered = d._borrowed(d.rows[(16, 4096, 14336)], Problem(16, 5120, 13824))
    assert "M == 16 and N == 5120 and K == 13824" in rendered.meta.requires and rendered.meta.params == own.meta.params
    # a shape the parameters cannot take (K not a whole number of the splits' k blocks) borrows nothing
    assert d._borrowed(d.rows[(16, 4096, 14336)], Problem(16, 4096, 14344)) is None
    # another process: the decision is read, the kernel rendered, loaded and checked again before use
    be2 = NumpyBackend({"evo:16x4096x14336": 8.0})
    d2 = Dispatcher.load(root, backend=be2)
    assert d2.plan(16, 5120, 13824).kind == "general" and be2.timed == [] and be2.loaded == be.loaded


def test_kernel_of_an_unknown_family_is_not_rendered_again(tmp_path):
    """A table kernel whose family is not among the templates (an LLM's own) lends only its own source."""
    root = make_table(tmp_path, [("256x256x256", "evo", kernel_text(0, requires="M == 256 and N == 256 and K == 256"))])
    be = NumpyBackend({"evo:256x256x256": 8.0})
    d = Dispatcher.load(root, backend=be)
    a, b = inputs(300, 200, 250)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))
    assert d.plan(300, 200, 250).kind != "general" and be.loaded == []


class OneGpuOfTwo(NumpyBackend):
    """NumpyBackend as the dispatcher of GPU 1 while GPU 0 is current: records whether each load, allocation and
    call ran inside its `on_device` context."""

    def __init__(self):
        super().__init__()
        self.inside = False
        self.where: list[tuple[str, bool]] = []

    @contextlib.contextmanager
    def on_device(self):
        self.inside = True
        try:
            yield
        finally:
            self.inside = False

    def load(self, ks, problem, cache_dir):
        self.where.append(("load", self.inside))
        fn = super().load(ks, problem, cache_dir)

        def call(a, b, c):
            self.where.append(("call", self.inside))
            fn(a, b, c)

        call.hash = fn.hash
        return call

    def empty(self, m, n):
        self.where.append(("empty", self.inside))
        return super().empty(m, n)

    def time(self, problem, calls, reps):
        self.where.append(("time", self.inside))
        return super().time(problem, calls, reps)


def test_the_dispatchers_gpu_is_current_while_it_plans_allocates_and_calls(table):
    """A dispatcher of another GPU than the current one loads, checks, times, allocates C and launches under its
    own device (CupyBackend.on_device); nothing of it runs on the current GPU."""
    be = OneGpuOfTwo()
    d = Dispatcher.load(table, backend=be)
    a, b = inputs(256, 256, 256)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))  # a table winner: loaded, C allocated, called
    a, b = inputs(77, 200, 72)
    np.testing.assert_array_equal(d.matmul(a, b), ref(a, b))  # not in the table: borrowed kernels timed
    assert {w for w, _ in be.where} >= {"load", "empty", "call", "time"}
    assert all(inside for _, inside in be.where), be.where
    assert not be.inside


def test_module_matmul_serves_each_gpu_from_its_own_dispatcher(monkeypatch):
    """evo.dispatch.matmul picks the Dispatcher of the GPU that holds A (a CuPy array's device.id, a torch tensor's
    device.index), creates each on first use and reuses it."""
    import evo.dispatch as dispatch

    made: list = []

    class Stub:
        def __init__(self, device_id):
            self.device_id, self.calls = device_id, []

        def matmul(self, a, b, out=None):
            self.calls.append(a)
            return "C"

    def load(cls=None, table_dir=None, backend=None, device_id=None, **kw):
        made.append(Stub(device_id))
        return made[-1]

    monkeypatch.setattr(dispatch.Dispatcher, "load", classmethod(lambda cls, *a, **kw: load(cls, *a, **kw)))
    monkeypatch.setattr(dispatch._Default, "dispatchers", {})
    on = lambda i: SimpleNamespace(device=SimpleNamespace(id=i))  # noqa: E731 - a CuPy array's device
    torch_like = SimpleNamespace(device=SimpleNamespace(type="cuda", index=1))
    a0, a1 = on(0), on(1)
    assert dispatch.matmul(a0, a0) == "C" and dispatch.matmul(a1, a1) == "C" and dispatch.matmul(torch_like, torch_like)
    dispatch.matmul(a0, a0)
    assert [s.device_id for s in made] == [0, 1]
    assert made[0].calls == [a0, a0] and made[1].calls == [a1, torch_like]
    assert dispatch.device_of(np.zeros(2)) is None


def test_threads_plan_a_shape_once_and_never_time_side_by_side(table, tmp_path, monkeypatch):
    """Threads whose first calls meet: one plans (the others wait for its plan), and no two measurements run on the
    GPU at once (each would slow the other and store a skewed decision)."""
    import threading
    from collections import Counter

    class Slow(NumpyBackend):
        def __init__(self):
            super().__init__()
            self.busy = 0
            self.overlap = False

        def time(self, problem, calls, reps):
            self.busy += 1
            self.overlap |= self.busy > 1
            time.sleep(0.05)
            self.busy -= 1
            return super().time(problem, calls, reps)

    shapes = [(77, 200, 72), (77, 200, 72), (129, 67, 33), (77, 200, 72), (129, 67, 33)]
    alone = NumpyBackend()  # what planning each shape once measures, in a process of its own (decisions file)
    monkeypatch.setenv("EVO_DISPATCH_DECISIONS", str(tmp_path / "alone.json"))
    d0 = Dispatcher.load(table, backend=alone)
    for m, n, k in dict.fromkeys(shapes):
        d0.plan(m, n, k)
    assert alone.timed  # shapes outside the table: measured on first use
    monkeypatch.setenv("EVO_DISPATCH_DECISIONS", str(tmp_path / "threads.json"))
    be = Slow()
    d = Dispatcher.load(table, backend=be)
    out: dict = {}

    def call(i, m, n, k):
        a, b = inputs(m, n, k, seed=i)
        out[i] = (d.matmul(a, b), ref(a, b))

    threads = [threading.Thread(target=call, args=(i, *s)) for i, s in enumerate(shapes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c, want in out.values():
        np.testing.assert_array_equal(c, want)
    assert not be.overlap
    assert Counter(key for key, _ in be.timed) == Counter(key for key, _ in alone.timed)  # each shape planned once
    assert len(out) == len(shapes)


def test_use_sets_the_dispatcher_a_gpu_serves_from(monkeypatch):
    """evo.dispatch.use registers a Dispatcher for its GPU (or the one named) in the registry that evo.dispatch.matmul
    and torch.ops.evo.matmul both read: nothing else is loaded for that GPU."""
    import evo.dispatch as dispatch

    monkeypatch.setattr(dispatch._Default, "dispatchers", {})
    monkeypatch.setattr(dispatch.Dispatcher, "load", classmethod(lambda cls, *a, **kw: pytest.fail("loaded another")))
    one = SimpleNamespace(backend=SimpleNamespace(device_id=1), matmul=lambda a, b, out=None: "C1")
    zero = SimpleNamespace(backend=SimpleNamespace(), matmul=lambda a, b, out=None: "C0")
    dispatch.use(one)
    dispatch.use(zero, device=0)
    assert dispatch.default(1) is one and dispatch.default(0) is zero
    assert dispatch.matmul(SimpleNamespace(device=SimpleNamespace(id=1)), None) == "C1"
    assert dispatch.matmul(SimpleNamespace(device=SimpleNamespace(id=0)), None) == "C0"

"""python -m evo.evaluate applies the roofline bound (from the measured ceilings) to both of its timings (no GPU)."""
from pathlib import Path

import pytest

import evo.evaluate as ev_mod
from evo.problem import parse_shape
from evo.records import BaselineResult, CheckResult, CompileResult, EvalResult

DATA = Path(__file__).parent / "data"


class _Worker:
    calls: list = []

    def __init__(self, cfg, *a, **k):
        from fakes import FAKE_GPU

        self.info = FAKE_GPU

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def call(self, op, timeout_s, **kw):
        _Worker.calls.append((op, kw))
        if op == "ceilings":
            return {"peak_tflops": 1000.0, "bw_gbs": 4000.0, "detail": "fake"}
        if op == "evaluate":
            return EvalResult(kw["h"], True, "done", check=CheckResult(True, checks=8), time_us=5.0, spread=0.01)
        if op == "baselines":
            note = "WRONG: 5.000 us is faster than the roofline" if kw.get("bound_us", 0) > 5.0 / 0.85 else ""
            return {"results": {"kernel": BaselineResult("kernel", 5.0, 0.01, note),
                                "cublas": BaselineResult("cublas", 50.0, 0.01)}}
        raise AssertionError(op)


class _Compiler:
    @staticmethod
    def from_config(cfg):
        return _Compiler()

    def compile(self, ks, arch):
        return CompileResult(ks.hash, arch, True, cubin_path="/nonexistent.cubin", registers=32)


def test_evaluate_passes_the_roofline_bound(monkeypatch, capsys):
    monkeypatch.setattr(ev_mod, "GpuWorker", _Worker)
    monkeypatch.setattr(ev_mod, "Compiler", _Compiler)
    _Worker.calls = []
    rc = ev_mod.main([str(DATA / "naive.cu"), "--shape", "4096x4096x1024"])
    bound = parse_shape("4096x4096x1024").roofline_us(1000.0, 4000.0)
    ops = {op: kw for op, kw in _Worker.calls}
    assert ops["evaluate"]["bound_us"] == pytest.approx(bound) and ops["baselines"]["bound_us"] == pytest.approx(bound)
    assert rc == 1 and "REJECTED" in capsys.readouterr().out  # 5 us for 4096x4096x1024 is below ~137 us


def test_eval_overhead_refuses_a_tree_without_evo(tmp_path, capsys):
    from bench.eval_overhead import main

    assert main(["--repo", str(tmp_path)]) == 2
    assert "has no evo package" in capsys.readouterr().err


def test_eval_overhead_refuses_an_unknown_family_in_one_line(capsys):
    from bench.eval_overhead import main

    assert main(["--families", "cutlass_sm90,no_such_family"]) == 2
    assert "unknown family no_such_family" in capsys.readouterr().err


def test_eval_overhead_takes_the_named_families_host_launched_ones_included(monkeypatch, tmp_path):
    """--families: those families' instances, a host-launched one (cutlass_sm90) among them; without it, neither
    host-launched families nor simt (the GPU and the compiler faked: every render compiles)."""
    import types

    import bench.eval_overhead as eo
    import evo.compile
    import evo.gpu.device

    monkeypatch.setattr(evo.gpu.device, "gpu_info", lambda i: types.SimpleNamespace(arch="sm_90a"))

    class Compiler:
        @staticmethod
        def from_config(cfg):
            return Compiler()

        def compile(self, ks, arch):
            return types.SimpleNamespace(ok=True, cubin_path="x.cubin")

    monkeypatch.setattr(evo.compile, "Compiler", Compiler)
    named = {k["name"] for k in eo.prepare(["1024x1024x1024"], 3, str(tmp_path), ["cutlass_sm90", "simt"])}
    assert named == {"cutlass_sm90", "simt"}
    default = {k["name"] for k in eo.prepare(["1024x1024x1024"], 9, str(tmp_path))}
    assert default and "cutlass_sm90" not in default and "simt" not in default


def test_eval_overhead_table_compares_trees(tmp_path, monkeypatch, capsys):
    import bench.eval_overhead as eo

    for name in ("old", "new"):
        (tmp_path / name / "evo").mkdir(parents=True)
        (tmp_path / name / "evo" / "__init__.py").write_text("")
    monkeypatch.setattr(eo, "prepare", lambda shapes, per_shape, cache, families: [{"shape": "64x64x64", "name": "naive"}])
    secs = {"old": 1.0, "new": 1.1}
    monkeypatch.setattr(eo, "run_tree", lambda repo, spec, rounds, tmp, tag: {
        "64x64x64 naive": [{"wall": 1.0, "seconds": secs[Path(repo).name], "ok": True, "error": "", "time_us": 5.0}]})
    out = tmp_path / "o.json"
    assert eo.main(["--repo", str(tmp_path / "old"), "--repo", str(tmp_path / "new"), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1.100" in text.splitlines()[-1] and out.is_file()  # total line: new / old

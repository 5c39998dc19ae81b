"""evo.rerender: a table's evo kernels rendered from today's templates replace the old ones only where they are
correct and measured faster side by side (fake GPU worker and compiler)."""
import io
import json
import shutil
from pathlib import Path

import pytest

import fakes
from evo.config import load_config
from evo.errors import EvoError
from evo.export import TableRow, read_table, write_table
from evo.families import load_families
from evo.kernel import KernelSource
from evo.problem import parse_shape
from evo.records import BaselineResult
from evo.rerender import decide, plan, rerender, summary
from fakes import FakeCompiler, FakeWorker

TOY = Path(__file__).parent / "data" / "families"
SHAPE = "256x256x256"
PARAMS = {"TILE": 16, "UNROLL": 4, "PAD": 0}


def make_table(tmp_path: Path, params=PARAMS, gpu="Fake_GPU") -> Path:
    """A one-row table whose kernel is the toy family rendered from tests/data/families."""
    ks = load_families(TOY, names=["toy"])[0].render(params)
    out = tmp_path / "kernels_out"
    rel = f"{gpu}/TN/{SHAPE}.cu"
    (out / rel).parent.mkdir(parents=True)
    (out / rel).write_text(ks.text)
    p = parse_shape(SHAPE)
    row = TableRow(gpu=gpu, shape=SHAPE, layout="TN", m=p.m, n=p.n, k=p.k, winner="cublas", family="toy", hash=ks.hash,
                   kernel_path=rel, time_us=20.0, tflops=1.0, cublas_us=19.0, cublaslt_heuristic_us=21.0,
                   cublaslt_autotune_us=19.5, speedup_cublas=0.95, speedup_cublaslt_heuristic=1.05,
                   speedup_cublaslt_autotune=0.975, speedup_best_library=0.95, best_library="cublas", roofline_us=1.0,
                   pct_of_roofline=5.0, timing_source="confirm", lineage=f"{ks.hash[:10]}(mutate)", cuda="13.0",
                   driver="0.0", date="2026-01-01", library_algorithms={})
    write_table(out / gpu, {"gpu": gpu, "layout": "TN", "noise_floor": 0.02}, [row])
    return out / gpu


def templates(tmp_path: Path, marker: str | None) -> Path:
    """A copy of the toy family; with a marker, its kernel text changed (a 'better' template)."""
    root = tmp_path / "templates"
    shutil.copytree(TOY, root)
    if marker:
        src = root / "toy" / "kernel.cu"
        src.write_text(src.read_text().replace("float acc = 0.f;", f"float acc = 0.f;  /* */ int {marker} = 0; (void){marker};"))
    return root


def cfg_for(root: Path):
    return load_config(overrides={"paths": {"templates": str(root)}, "check": {"sanitize": False}})


def started():
    w = FakeWorker(None)
    w.start()
    return w


@pytest.fixture
def fast_marker(monkeypatch):
    """The fake worker times a kernel whose text holds FAST at 10 us, any other at 20 us."""
    monkeypatch.setattr(fakes, "fake_time", lambda ks: 10.0 if "FAST" in ks.text else 20.0)


def test_plan_lists_rows_whose_rendering_differs(tmp_path):
    table = make_table(tmp_path)
    _, same = plan(table, TOY)
    assert [it.note for it in same] == ["same source"]
    _, items = plan(table, templates(tmp_path, "FAST"))
    assert items[0].note == "" and items[0].new.hash != items[0].old.hash and "FAST" in items[0].new.text
    assert items[0].new.meta.params == items[0].old.meta.params


def publish(table: Path, text: str) -> None:
    """Rewrite the one row's kernel file with this text, and the row's hash with it (as an export would)."""
    doc, rows = read_table(table)
    (table.parent / rows[0].kernel_path).write_text(text)
    rows[0].hash = KernelSource.parse(text).hash
    write_table(table, doc, rows)


def test_plan_drops_a_removed_switch_at_zero_but_not_a_set_one(tmp_path):
    table = make_table(tmp_path)
    kpath = table.parent / read_table(table)[1][0].kernel_path
    publish(table, kpath.read_text().replace("params: {", "params: {GONE: 0, ", 1))
    _, items = plan(table, templates(tmp_path, "FAST"))
    assert items[0].note == "" and "GONE" not in items[0].new.meta.params
    publish(table, kpath.read_text().replace("GONE: 0", "GONE: 2", 1))
    _, items = plan(table, tmp_path / "templates")
    assert items[0].new is None and "no parameter GONE" in items[0].note


def test_plan_skips_a_row_whose_file_is_not_its_kernel(tmp_path):
    table = make_table(tmp_path)
    kpath = table.parent / read_table(table)[1][0].kernel_path
    kpath.write_text(kpath.read_text().replace("float acc = 0.f;", "float acc = 0.f; acc += 0.f;"))
    _, items = plan(table, templates(tmp_path, "FAST"))
    assert items[0].new is None and "is not the row's kernel" in items[0].note
    kpath.unlink()
    _, items = plan(table, tmp_path / "templates")
    assert items[0].new is None and "unreadable" in items[0].note


def test_decide_needs_a_win_beyond_the_band():
    assert decide(20.0, 0.0, 10.0, 0.0, 0.02) == (True, 0.02)
    assert decide(20.0, 0.0, 19.8, 0.0, 0.02)[0] is False  # 1 % inside the 2 % floor
    assert decide(20.0, 0.2, 18.5, 0.2, 0.02) == (False, 0.1)  # the spreads widen the band to 10 %
    assert decide(20.0, 0.0, 25.0, 0.0, 0.02)[0] is False


def test_rerender_replaces_a_faster_rendering_and_rewrites_the_row(tmp_path, fast_marker):
    table = make_table(tmp_path)
    root = templates(tmp_path, "FAST")
    out = io.StringIO()
    res = rerender(table, cfg_for(root), started(), FakeCompiler(tmp_path / "cache"), out=out)
    assert [o.action for o in res] == ["replaced"] and res[0].old_us == 20.0 and res[0].new_us == 10.0
    doc, rows = read_table(table)
    r = rows[0]
    assert r.timing_source == "rerender" and r.time_us == 10.0 and r.hash == plan(table, root)[1][0].old.hash
    assert r.lineage.startswith(f"{r.hash[:10]}(rerender) <- ") and r.lineage.endswith("(mutate)")
    # this window's library times (the fake worker's), and the verdict recomputed from them: 45 / 10
    assert r.cublaslt_autotune_us == 45.0 and r.best_library == "cublaslt_autotune"
    assert r.speedup_best_library == pytest.approx(4.5) and r.winner == "evo" and r.verdict == "win"
    assert "FAST" in (table.parent / r.kernel_path).read_text()
    meta = json.loads((table.parent / r.kernel_path).with_suffix(".json").read_text())
    assert meta["hash"] == r.hash and meta["lineage"][0].endswith("(rerender)") and meta["params"] == PARAMS
    assert "replaced" in out.getvalue() and "replaced" in summary(res)


def test_rerender_keeps_the_old_kernel_when_not_faster(tmp_path, monkeypatch):
    monkeypatch.setattr(fakes, "fake_time", lambda ks: 20.0)
    table = make_table(tmp_path)
    before = (table / "table.json").read_text()
    old_src = (table.parent / read_table(table)[1][0].kernel_path).read_text()
    res = rerender(table, cfg_for(templates(tmp_path, "SAME")), started(), FakeCompiler(tmp_path / "cache"),
                   out=io.StringIO())
    assert [o.action for o in res] == ["kept"]
    assert read_table(table)[1][0].hash == json.loads(before)["rows"][0]["hash"]
    assert (table.parent / read_table(table)[1][0].kernel_path).read_text() == old_src


def test_rerender_does_not_time_a_rendering_that_compiles_to_the_same_kernel(tmp_path, monkeypatch):
    table = make_table(tmp_path)
    before = read_table(table)[1][0]
    root = templates(tmp_path, None)
    src = root / "toy" / "kernel.cu"
    src.write_text(src.read_text().replace("float acc = 0.f;", "float acc = 0.f; acc += 0.f;"))
    assert plan(table, root)[1][0].note == ""  # the code differs ...
    monkeypatch.setattr(fakes, "fake_machine_code", lambda ks: "\x7fELF")  # ... and the compiler sees through it
    calls = []
    monkeypatch.setattr(FakeWorker, "call", lambda self, op, timeout_s, **kw: calls.append(op))
    out = io.StringIO()
    res = rerender(table, cfg_for(root), started(), FakeCompiler(tmp_path / "cache"), out=out)
    assert [o.action for o in res] == ["same machine code (not timed)"] and "not timed" in out.getvalue()
    after = read_table(table)[1][0]
    assert calls == [] and (after.hash, after.time_us, after.timing_source) == (before.hash, 20.0, "confirm")


def test_rerender_times_the_same_code_launched_differently(tmp_path, fast_marker):
    table = make_table(tmp_path)
    root = templates(tmp_path, None)
    src = root / "toy" / "kernel.cu"
    src.write_text(src.read_text().replace("smem: 0", "smem: 1024  # FAST"))  # front matter only: same cubin bytes
    res = rerender(table, cfg_for(root), started(), FakeCompiler(tmp_path / "cache"), out=io.StringIO())
    assert [o.action for o in res] == ["replaced"]


def test_same_machine_code_compares_bytes_launch_and_host_code(tmp_path):
    from evo.rerender import same_machine_code

    fam = load_families(TOY, names=["toy"])[0]
    a, b = fam.render(PARAMS), fam.render({**PARAMS, "TILE": 8})
    p = parse_shape(SHAPE)
    one, two, three = (tmp_path / f"{n}.cubin" for n in ("one", "two", "three"))
    one.write_bytes(b"\x7fELF same"), two.write_bytes(b"\x7fELF same"), three.write_bytes(b"\x7fELF other")
    assert same_machine_code(a, str(one), a, str(two), p, 132)
    assert not same_machine_code(a, str(one), a, str(three), p, 132)  # other bytes
    assert not same_machine_code(a, str(one), b, str(two), p, 132)  # same bytes, another block and grid
    assert not same_machine_code(a, str(one), a, str(tmp_path / "missing.cubin"), p, 132)
    host = KernelSource.parse(a.text.replace("workspace: 0", "workspace: 0\nlaunch: host", 1).replace(
        "__global__ void evo_gemm", 'int evo_host_query(); extern "C" int evo_host_params(); extern "C" '
        '__global__ void evo_gemm', 1).replace("int evo_host_query", 'extern "C" int evo_host_query', 1))
    assert not same_machine_code(a, str(one), host, str(two), p, 132)  # launched another way
    one.with_suffix(".so").write_bytes(b"host 1"), two.with_suffix(".so").write_bytes(b"host 2")
    assert not same_machine_code(host, str(one), host, str(two), p, 132)  # the same kernel, other host code
    two.with_suffix(".so").write_bytes(b"host 1")
    assert same_machine_code(host, str(one), host, str(two), p, 132)


def test_plan_compiled_marks_the_rows_a_run_would_not_time(tmp_path, monkeypatch):
    from evo.rerender import compiled_same

    table = make_table(tmp_path)
    root = templates(tmp_path, "FAST")
    doc, items = plan(table, root)
    compiled_same(doc, items, FakeCompiler(tmp_path / "cache"))
    assert items[0].note == ""  # other code: to be timed
    monkeypatch.setattr(fakes, "fake_machine_code", lambda ks: "\x7fELF")
    doc, items = plan(table, root)
    compiled_same(doc, items, FakeCompiler(tmp_path / "cache2"))
    assert items[0].note == "same machine code (not timed)"


def test_compile_all_says_how_far_it_got(tmp_path):
    from evo.rerender import compile_all

    fam = load_families(TOY, names=["toy"])[0]
    kernels = [fam.render({**PARAMS, "TILE": t}) for t in (8, 16, 32)]  # the fake compiler fails TILE 32
    out = io.StringIO()
    got = compile_all(FakeCompiler(tmp_path / "cache"), [(ks, "sm_90a") for ks in kernels], out, every_s=0.0)
    assert sorted(got) == sorted(ks.hash for ks in kernels) and not got[kernels[2].hash].ok
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["  compiled 1 of 3 (0 s)", "  compiled 2 of 3 (0 s)"]
    assert lines[2].startswith("compiled 3 kernels in ") and lines[2].endswith("(1 failed)")
    assert compile_all(FakeCompiler(tmp_path / "cache"), [], out) == {}


def test_rerender_cli_compile_goes_with_plan_only(tmp_path, capsys):
    from evo.rerender import main

    assert main([str(make_table(tmp_path)), "--compile"]) == 2
    assert "--compile goes with --plan-only" in capsys.readouterr().err


def sanitized_cfg(root: Path):
    return load_config(overrides={"paths": {"templates": str(root)}, "check": {"sanitize": True}})


def test_rerender_runs_the_sanitizer_only_on_the_kernel_it_writes(tmp_path, fast_marker, monkeypatch):
    import evo.sanitize

    seen = []
    monkeypatch.setattr(evo.sanitize, "sanitize", lambda *a, **kw: pytest.fail("the sanitizer ran in vet_kernel"))
    monkeypatch.setattr(evo.sanitize, "sanitize_kernel", lambda p, text, cubin, cfg, out: seen.append(text) or "")
    table = make_table(tmp_path)
    kept = rerender(table, sanitized_cfg(templates(tmp_path, "SAME")), started(), FakeCompiler(tmp_path / "cache"),
                    out=io.StringIO())
    assert [o.action for o in kept] == ["kept"] and seen == []  # not written: not sanitized
    res = rerender(table, sanitized_cfg(templates(tmp_path / "b", "FAST")), started(),
                   FakeCompiler(tmp_path / "cache"), out=io.StringIO())
    assert [o.action for o in res] == ["replaced"] and len(seen) == 1 and "FAST" in seen[0]


def test_rerender_rejects_a_faster_rendering_the_sanitizer_fails(tmp_path, fast_marker, monkeypatch):
    import evo.sanitize

    monkeypatch.setattr(evo.sanitize, "sanitize_kernel",
                        lambda p, text, cubin, cfg, out: "compute-sanitizer memcheck: Invalid __global__ read" if "FAST" in text else "")
    table = make_table(tmp_path)
    h = read_table(table)[1][0].hash
    res = rerender(table, sanitized_cfg(templates(tmp_path, "FAST")), started(), FakeCompiler(tmp_path / "cache"),
                   out=io.StringIO())
    assert res[0].action == "rejected (compute-sanitizer memcheck: Invalid __global__ read)"
    assert read_table(table)[1][0].hash == h and read_table(table)[1][0].timing_source == "confirm"


def test_port_takes_the_slower_contender_where_the_faster_fails_the_sanitizer(tmp_path, fast_marker, monkeypatch):
    import evo.sanitize

    monkeypatch.setattr(evo.sanitize, "sanitize_kernel",
                        lambda p, text, cubin, cfg, out: "compute-sanitizer racecheck: hazard" if "FAST" in text else "")
    src = make_table(tmp_path, gpu="NVIDIA_H200")
    res = rerender(src, sanitized_cfg(templates(tmp_path, "FAST")), started(), FakeCompiler(tmp_path / "cache"),
                   out=io.StringIO(), port=True)
    assert [o.action for o in res] == ["ported (as published)"]
    assert "FAST" not in (src.parent / read_table(src.parent / "Fake_GPU")[1][0].kernel_path).read_text()
    monkeypatch.setattr(evo.sanitize, "sanitize_kernel", lambda p, text, cubin, cfg, out: "compute-sanitizer memcheck: x")
    other = make_table(tmp_path / "o", gpu="NVIDIA_H200")
    res = rerender(other, sanitized_cfg(templates(tmp_path / "o", "FAST")), started(),
                   FakeCompiler(tmp_path / "cache"), out=io.StringIO(), port=True)
    assert res[0].action.startswith("rejected (compute-sanitizer memcheck: x")


def test_rerender_rejects_a_rendering_that_fails_its_recheck(tmp_path, fast_marker, monkeypatch):
    monkeypatch.setattr(FakeWorker, "fail_recheck", staticmethod(lambda p: True))
    table = make_table(tmp_path)
    h = read_table(table)[1][0].hash
    res = rerender(table, cfg_for(templates(tmp_path, "FAST")), started(), FakeCompiler(tmp_path / "cache"),
                   out=io.StringIO())
    assert res[0].action.startswith("rejected (re-check failed") and read_table(table)[1][0].hash == h


def test_rerender_rejects_a_rendering_wrong_in_the_timed_window(tmp_path, fast_marker, monkeypatch):
    real = FakeWorker.call

    def call(self, op, timeout_s, **kw):
        r = real(self, op, timeout_s, **kw)
        if op == "baselines":
            r["results"]["new"] = BaselineResult("new", 10.0, detail="WRONG: checksum of call 3")
        return r

    monkeypatch.setattr(FakeWorker, "call", call)
    table = make_table(tmp_path)
    h = read_table(table)[1][0].hash
    res = rerender(table, cfg_for(templates(tmp_path, "FAST")), started(), FakeCompiler(tmp_path / "cache"),
                   out=io.StringIO())
    assert res[0].action.startswith("rejected (WRONG") and read_table(table)[1][0].hash == h


def test_rerender_refuses_another_gpus_table(tmp_path):
    table = make_table(tmp_path, gpu="NVIDIA_H200")
    with pytest.raises(EvoError, match="table of NVIDIA_H200; this GPU is Fake_GPU"):
        rerender(table, cfg_for(templates(tmp_path, "FAST")), started(), FakeCompiler(tmp_path / "cache"), out=io.StringIO())


def test_rerender_plan_only_cli_needs_no_gpu(tmp_path, capsys):
    from evo.rerender import main

    table = make_table(tmp_path)
    root = templates(tmp_path, "FAST")
    cfgf = tmp_path / "c.yaml"
    cfgf.write_text(f"paths: {{templates: {root}}}\n")
    assert main([str(table), "--plan-only", "--config", str(cfgf)]) == 0
    assert "1 of 1 evo rows render differently" in capsys.readouterr().out
    assert main([str(tmp_path / "nowhere"), "--plan-only"]) == 2
    assert "no kernel table at" in capsys.readouterr().err


def test_port_seeds_this_gpus_table_with_the_faster_contender(tmp_path, fast_marker):
    src = make_table(tmp_path, gpu="NVIDIA_H200")
    root = templates(tmp_path, "FAST")
    res = rerender(src, cfg_for(root), started(), FakeCompiler(tmp_path / "cache"), out=io.StringIO(), port=True)
    assert [o.action for o in res] == ["ported"]
    dest = src.parent / "Fake_GPU"
    doc, rows = read_table(dest)
    r = rows[0]
    assert doc["gpu"] == "Fake_GPU" and doc["ceilings"]["peak_tflops"] == 800.0
    assert r.gpu == "Fake_GPU" and r.timing_source == "port" and r.time_us == 10.0
    assert r.kernel_path == f"Fake_GPU/TN/{SHAPE}.cu" and "FAST" in (src.parent / r.kernel_path).read_text()
    assert r.roofline_us == pytest.approx(parse_shape(SHAPE).roofline_us(800.0, 4000.0), abs=1e-3)
    assert "(port) <- NVIDIA_H200: " in r.lineage and r.cublas_us == 50.0
    assert read_table(src)[1][0].gpu == "NVIDIA_H200"  # the source table is untouched


def test_port_keeps_the_published_kernel_where_the_rendering_is_slower(tmp_path, monkeypatch):
    monkeypatch.setattr(fakes, "fake_time", lambda ks: 30.0 if "SLOW" in ks.text else 20.0)
    src = make_table(tmp_path, gpu="NVIDIA_H200")
    res = rerender(src, cfg_for(templates(tmp_path, "SLOW")), started(), FakeCompiler(tmp_path / "cache"),
                   out=io.StringIO(), port=True)
    assert [o.action for o in res] == ["ported (as published)"]
    r = read_table(src.parent / "Fake_GPU")[1][0]
    assert r.time_us == 20.0 and r.hash == read_table(src)[1][0].hash


def test_port_leaves_shapes_the_destination_has_and_refuses_its_own_table(tmp_path, fast_marker):
    src = make_table(tmp_path, gpu="NVIDIA_H200")
    mine = make_table(tmp_path / "x", gpu="Fake_GPU")
    shutil.copytree(mine, src.parent / "Fake_GPU")
    shutil.copytree(mine.parent / "Fake_GPU" / "TN", src.parent / "Fake_GPU" / "TN", dirs_exist_ok=True)
    res = rerender(src, cfg_for(templates(tmp_path, "FAST")), started(), FakeCompiler(tmp_path / "cache"),
                   out=io.StringIO(), port=True)
    assert [o.action for o in res] == ["Fake_GPU has its own row"]
    with pytest.raises(EvoError, match="already this GPU's table"):
        rerender(src.parent / "Fake_GPU", cfg_for(TOY), started(), FakeCompiler(tmp_path / "cache"), out=io.StringIO(), port=True)


def test_port_takes_the_published_kernel_where_the_rendering_does_not_compile(tmp_path, fast_marker):
    class Failing(FakeCompiler):
        def compile(self, ks, arch):
            if "FAST" in ks.text:
                from evo.records import CompileResult
                return CompileResult(ks.hash, arch, False, error="error: today's template breaks here")
            return super().compile(ks, arch)

    src = make_table(tmp_path, gpu="NVIDIA_H200")
    out = io.StringIO()
    res = rerender(src, cfg_for(templates(tmp_path, "FAST")), started(), Failing(tmp_path / "cache"), out=out, port=True)
    assert [o.action for o in res] == ["ported"] and "the published kernel alone" in out.getvalue()
    r = read_table(src.parent / "Fake_GPU")[1][0]
    assert r.hash == read_table(src)[1][0].hash and r.time_us == 20.0
    # rerendering its own table, a rendering that does not compile leaves the row alone
    res = rerender(src.parent / "Fake_GPU", cfg_for(tmp_path / "templates"), started(), Failing(tmp_path / "cache2"),
                   out=io.StringIO())
    assert res[0].action.startswith("not compiled for sm_90a: error: today's template") and \
        read_table(src.parent / "Fake_GPU")[1][0].hash == r.hash


def test_set_tries_a_parameter_on_the_rows_whose_family_has_it(tmp_path):
    table = make_table(tmp_path)
    _, items = plan(table, TOY, overrides={"PAD": 2})
    assert items[0].note == "" and items[0].new.meta.params == {**PARAMS, "PAD": 2}
    assert items[0].old.meta.params == PARAMS
    _, same = plan(table, TOY, overrides={"PAD": 0})  # the row's own value: nothing to time
    assert same[0].note == "same source"
    _, bad = plan(table, TOY, overrides={"PAD": 7})  # outside the space: named, not rendered
    assert bad[0].new is None and bad[0].note.startswith("with PAD=7: ") and "PAD=7 is not one of" in bad[0].note
    assert plan(table, TOY, overrides={"STAGES": 3})[1] == []  # the family has no such parameter: not its row


def test_where_picks_rows_by_parameters_and_shape(tmp_path):
    table = make_table(tmp_path)
    assert len(plan(table, TOY, overrides={"PAD": 2}, where="TILE == 16 and K >= 256")[1]) == 1
    assert plan(table, TOY, overrides={"PAD": 2}, where="TILE == 32")[1] == []
    assert plan(table, TOY, overrides={"PAD": 2}, where="M * N > 65536")[1] == []  # 256 x 256 is not
    with pytest.raises(EvoError, match="unknown name 'FOO'"):
        plan(table, TOY, overrides={"PAD": 2}, where="FOO == 1")
    with pytest.raises(EvoError, match="give a --set"):
        plan(table, TOY, where="TILE == 16")


def test_family_env_fills_defaults_and_the_shape():
    fam = load_families(TOY, names=["toy"])[0]
    # a kernel from before PAD existed reads PAD at its default, as render completes it; switches are ints
    assert fam.env({"TILE": 32, "UNROLL": True}) == {"TILE": 32, "UNROLL": 1, "PAD": 0}
    assert fam.env({"TILE": 8}, parse_shape("100x200x300")) == {"TILE": 8, "UNROLL": 1, "PAD": 0, "M": 100, "N": 200,
                                                                 "K": 300}


def test_where_reads_a_parameter_the_published_kernel_lacks_at_its_default(tmp_path):
    table = make_table(tmp_path)
    kpath = table.parent / read_table(table)[1][0].kernel_path
    publish(table, kpath.read_text().replace("PAD: 0, ", "", 1))  # published before PAD existed
    assert "PAD" not in plan(table, TOY)[1][0].old.meta.params
    assert len(plan(table, TOY, overrides={"UNROLL": 8}, where="PAD == 0")[1]) == 1
    assert plan(table, TOY, overrides={"UNROLL": 8}, where="PAD == 1")[1] == []


def test_parse_set_reads_integer_pairs_and_nothing_else():
    from evo.rerender import parse_set

    assert parse_set("RING_SPLIT=2, EPI=1") == {"RING_SPLIT": 2, "EPI": 1} and parse_set("") == {}
    for bad in ("RING_SPLIT", "RING_SPLIT=two", "=2", "A B=1"):
        with pytest.raises(EvoError, match="KEY=VALUE"):
            parse_set(bad)


def test_set_replaces_a_row_only_where_the_variant_is_faster(tmp_path, monkeypatch):
    monkeypatch.setattr(fakes, "fake_time", lambda ks: 10.0 if "PAD: 3" in ks.text else 20.0)
    table = make_table(tmp_path)
    worse = rerender(table, cfg_for(TOY), started(), FakeCompiler(tmp_path / "cache"), out=io.StringIO(),
                     overrides={"PAD": 1})
    assert [o.action for o in worse] == ["kept"] and read_table(table)[1][0].hash == plan(table, TOY)[1][0].old.hash
    res = rerender(table, cfg_for(TOY), started(), FakeCompiler(tmp_path / "cache"), out=io.StringIO(),
                   overrides={"PAD": 3}, where="UNROLL == 4")
    r = read_table(table)[1][0]
    assert [o.action for o in res] == ["replaced"] and r.time_us == 10.0
    assert json.loads((table.parent / r.kernel_path).with_suffix(".json").read_text())["params"] == {**PARAMS, "PAD": 3}


def test_rerender_cli_set_and_where_plan_without_a_gpu(tmp_path, capsys):
    from evo.rerender import main

    table = make_table(tmp_path)
    cfgf = tmp_path / "c.yaml"
    cfgf.write_text(f"paths: {{templates: {TOY}}}\n")
    assert main([str(table), "--plan-only", "--config", str(cfgf), "--set", "PAD=2", "--where", "TILE == 16"]) == 0
    assert "1 of 1 evo rows render differently" in capsys.readouterr().out
    assert main([str(table), "--plan-only", "--set", "PAD"]) == 2
    assert main([str(table), "--plan-only", "--where", "TILE == 16"]) == 2
    err = capsys.readouterr().err
    assert "KEY=VALUE" in err and "give a --set" in err and "Traceback" not in err

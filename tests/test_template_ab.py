"""bench.template_ab without a GPU: rendering both sides, the widened space, one-line errors."""
import shutil
from pathlib import Path

import pytest

from bench import template_ab

ROOT = Path(__file__).resolve().parent.parent


def test_plan_renders_old_and_new_and_widens_the_space(tmp_path, capsys):
    old = tmp_path / "templates"
    shutil.copytree(ROOT / "templates" / "wgmma_sm90", old / "wgmma_sm90")
    cu = old / "wgmma_sm90" / "kernel.cu"
    cu.write_text(cu.read_text().replace("namespace evo_sm90 {", "namespace evo_sm90 {\nconstexpr int OLD_TEMPLATE = 1;", 1))
    items = template_ab.plan("wgmma_sm90", str(old), [{"BM": 256, "BN": 128, "STAGES": 3, "EPI": 2}, {"BM": 128, "BN": 64, "SPLIT_K": 128}])
    labels = [lb for lb, _ in items]
    assert labels == ["old BM256/BN128/STAGES3/EPI2", "new BM256/BN128/STAGES3/EPI2", "old BM128/BN64/SPLIT_K128", "new BM128/BN64/SPLIT_K128"]
    assert items[0][1].hash != items[1][1].hash  # different template text, different kernels
    assert items[2][1].meta.params["SPLIT_K"] == 128  # outside the declared space: widened for this run
    assert template_ab.main(["--family", "wgmma_sm90", "--old", str(old), "--shapes", "2048x12288x128", "--plan-only",
                             '{"BM": 128}']) == 0
    assert "old BM128" in capsys.readouterr().out


def test_bad_input_is_one_line(capsys):
    assert template_ab.main(["--family", "wgmma_sm90", "--shapes", "64x64x64", "{}"]) == 2
    assert template_ab.main(["--family", "wgmma_sm90", "--new-only", "--shapes", "64x64", "{}"]) == 2
    assert template_ab.main(["--family", "wgmma_sm90", "--new-only", "--shapes", "64x64x64", "{not json"]) == 2
    assert template_ab.main(["--family", "wgmma_sm90", "--new-only", "--shapes", "64x64x64", "--profile", "128x128x128",
                             "{}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("error: ") for line in err)
    assert "not one of --shapes" in err[-1]


def test_a_shape_specialized_family_is_rendered_per_timed_shape():
    from evo.problem import parse_shape

    p = {"BM": 32, "BN": 32, "BK": 64, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "STAGES": 8, "SPLIT_K": 1, "CLK": 16}
    items = template_ab.plan("mma_small_sm80", None, [p], ["64x128x2048", "128x64x4096"])
    assert [lb for lb, _ in items] == ["new " + "/".join(f"{k}{v}" for k, v in p.items())] * 2
    (_, a), (_, b) = items
    assert a.hash != b.hash
    assert a.accepts(parse_shape("64x128x2048")) and not a.accepts(parse_shape("128x64x4096"))
    assert b.accepts(parse_shape("128x64x4096")) and not b.accepts(parse_shape("64x128x2048"))


def test_an_instance_that_hangs_the_worker_is_left_out_and_the_rest_go_on():
    """A kernel that hangs (the worker's watchdog kills and restarts it) is one failed instance, not the end of the A/B."""
    from types import SimpleNamespace

    from evo.gpu.worker import WorkerFault

    items = template_ab.plan("wgmma_sm90", None, [{"BM": 128, "BN": 128}, {"BM": 128, "BN": 64}], [])
    hung, fine = items[0][1].hash, items[1][1].hash
    calls = []

    class Worker:
        def call(self, op, timeout_s, problem, source, cubin, h):
            calls.append((h, f"{problem.m}x{problem.n}x{problem.k}"))
            if h == hung:
                raise WorkerFault("timeout: no answer within 20 s (hung kernel?); worker killed and restarted")
            return SimpleNamespace(ok=True)

    said = []
    compiled = {ks.hash: SimpleNamespace(ok=True, cubin_path="k.cubin") for _, ks in items}
    bad = template_ab.check_instances(Worker(), items, compiled, ["200x136x72", "1030x4104x136"], 132, 20.0, said.append)
    assert bad == {hung}
    assert calls == [(hung, "200x136x72"), (fine, "200x136x72"), (fine, "1030x4104x136")]  # never retried
    assert any("hung or crashed" in s and "left out" in s for s in said)
    assert said[-1] == "1030x4104x136: checked"


def test_timing_lines_name_the_verdict_beyond_the_noise_band():
    """An instance's line says win / tie / loss against the best library, inside the band of their two spreads
    (at least the floor); a library's line and a wrong instance's line carry none."""
    from types import SimpleNamespace

    def t(us, spread, detail=""):
        return SimpleNamespace(time_us=us, spread=spread, detail=detail)

    lib = t(10.0, 0.02)
    assert template_ab.timing_line("new A", t(9.0, 0.02), lib, True, 0.02).endswith("new A  win (2.0 %)")
    assert template_ab.timing_line("new B", t(9.9, 0.02), lib, True, 0.02).endswith("new B  tie (2.0 %)")
    assert template_ab.timing_line("new C", t(11.0, 0.02), lib, True, 0.02).endswith("new C  loss (2.0 %)")
    # wide spreads widen the band: 10 % faster is a tie when the two timings spread 30 % (band 15 %)
    assert template_ab.timing_line("new D", t(9.0, 0.30), t(10.0, 0.30), True, 0.02).endswith("new D  tie (15.0 %)")
    assert template_ab.timing_line("cublas", lib, lib, False, 0.02).endswith("spread 0.020  cublas")
    assert template_ab.timing_line("new E", t(9.0, 0.02, "WRONG: rel err"), lib, True, 0.02).endswith("new E WRONG")
    assert " 1.111x " in template_ab.timing_line("new A", t(9.0, 0.02), lib, True, 0.02)
    assert "      -" in template_ab.timing_line("new F", t(9.0, 0.02), None, True, 0.02)


@pytest.mark.nvcc
def test_compile_only_fills_the_cache_it_is_given_without_a_gpu(tmp_path, capsys):
    """Instances compiled on a CPU machine into --cache-dir: the folder a GPU machine's run then reuses."""
    cache = tmp_path / "cache"
    assert template_ab.main(["--family", "simt", "--new-only", "--compile-only", "--cache-dir", str(cache),
                             "--shapes", "64x64x64", '{"BM": 64, "BN": 64}']) == 0
    assert "compiled new BM64/BN64" in capsys.readouterr().out
    assert list((cache / "sm_90a").glob("*.cubin")) and list((cache / "sm_90a").glob("*.json"))

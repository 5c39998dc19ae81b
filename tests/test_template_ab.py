"""bench.template_ab without a GPU: rendering both sides, the widened space, one-line errors."""
import shutil
from pathlib import Path

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

"""evo.report from a fake archive (a sweep with the fake worker over two toy families): files exist, PNGs are real."""
from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from evo.problem import parse_shape  # noqa: E402
from evo.report import main  # noqa: E402
from evo.sweep import run_sweep  # noqa: E402
from test_sweep import TOY, CachingFakeCompiler, ShapeFake, make_cfg  # noqa: E402

SHAPES = ["64x64x64", "128x256x512", "256x256x256", "512x512x2048", "1024x1024x1024", "2048x512x4096",
          "4096x4096x1024", "64x8192x8192", "8192x8192x512", "16384x1024x1024"]
PNGS = ["speedups.png", "noise.png", "roofline.png", "wins.png", "gpu_minutes.png", "lineage.png"]
TABLE_ONLY = ["speedups.png", "noise.png", "roofline.png", "wins.png"]
COMMITTED = Path(__file__).resolve().parent.parent / "kernels_out" / "NVIDIA_H200"


class MixedFake(ShapeFake):
    """Libraries win the shallow-K shapes; each toy family is better on one half of the shapes."""

    @staticmethod
    def _kernel_us(p, ks):
        f = 1.25 if p.k <= 512 else 1.0
        f *= 0.93 if (ks.meta.family == "toy") == (p.m >= p.n) else 1.0
        return ShapeFake._kernel_us(p, ks) * f


def fake_archive(tmp_path: Path):
    templates = tmp_path / "templates"
    shutil.copytree(TOY / "toy", templates / "toy")
    shutil.copytree(TOY / "toy", templates / "toy_wide")  # a second family, so wins split by family
    for f in ("family.yaml", "kernel.cu"):
        p = templates / "toy_wide" / f
        p.write_text(p.read_text().replace("name: toy", "name: toy_wide").replace("family: toy", "family: toy_wide")
                     .replace("TILE: [16, 8, 32]", "TILE: [16, 8]"))
    cfg = make_cfg(tmp_path, templates=templates, max_candidates=10)
    run_sweep([parse_shape(s) for s in SHAPES], cfg, device_ids=[0], worker_factory=MixedFake,
              compiler=CachingFakeCompiler(), out=io.StringIO())
    return cfg


def test_report_renders(tmp_path, capsys):
    cfg = fake_archive(tmp_path)
    assert main(["--db", cfg.paths.db, "--out", cfg.paths.out]) == 0
    rep = Path(cfg.paths.out) / "Fake_GPU" / "report"
    page = (rep / "index.html").read_text()
    for png in PNGS:
        data = (rep / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, png
        assert f'src="{png}"' in page
    assert "evo wins" in page and "Geomean speedup" in page and "Lineage of the winner" in page
    assert all(s in page for s in SHAPES)
    assert "report:" in capsys.readouterr().out
    # a chosen shape's lineage
    assert main(["--db", cfg.paths.db, "--out", cfg.paths.out, "--shape", "256x256x256"]) == 0
    assert "Lineage of the winner on 256x256x256" in (rep / "index.html").read_text()
    # without --db and --out the config's paths are used
    conf = tmp_path / "paths.yaml"
    conf.write_text(f"paths:\n  db: {cfg.paths.db}\n  out: {cfg.paths.out}\n")
    (rep / "index.html").unlink()
    assert main(["--config", str(conf)]) == 0
    assert (rep / "index.html").is_file()


def test_report_from_the_committed_table_alone(tmp_path, capsys):
    """A fresh clone has no archive: the report renders from table.json, says what it leaves out, and bounds the
    roofline by the datasheet (not cuBLAS's own rate), with the launch floor and noise bands."""
    out = tmp_path / "kernels_out"
    (out / "NVIDIA_H200").mkdir(parents=True)
    shutil.copy(COMMITTED / "table.json", out / "NVIDIA_H200" / "table.json")
    assert main(["--db", str(tmp_path / "none.db"), "--out", str(out)]) == 0
    rep = out / "NVIDIA_H200" / "report"
    page = (rep / "index.html").read_text()
    for png in TABLE_ONLY:
        assert (rep / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f'src="{png}"' in page
    assert not (rep / "lineage.png").exists() and "no archive at" in page
    doc = __import__("json").loads((COMMITTED / "table.json").read_text())
    launch = (doc.get("ceilings") or {}).get("launch_us") or 3.42  # the table's measured floor, else this model's
    assert "datasheet H200 SXM" in page and "989 TFLOP/s" in page and f"launch floor {launch:.2f}" in page
    wins = sum(r["winner"] == "evo" for r in doc["rows"])
    ties = sum(r["verdict"] == "tie" for r in doc["rows"])
    assert wins >= 3 and f"evo wins {wins}</b> beyond the noise band ({ties} ties" in page
    assert all(f"<td>{r['shape']}</td>" in page for r in doc["rows"])
    assert main(["--db", str(tmp_path / "none.db"), "--out", str(out), "--shape", "1x4096x4096"]) == 2
    assert "needs the archive" in capsys.readouterr().err


def test_report_errors(tmp_path, capsys):
    assert main(["--db", str(tmp_path / "none.db"), "--out", str(tmp_path / "empty")]) == 2
    assert "no archive at" in capsys.readouterr().err
    cfg = fake_archive(tmp_path)
    assert main(["--db", cfg.paths.db, "--out", cfg.paths.out, "--gpu", "Other GPU"]) == 2
    assert "no results for Other_GPU" in capsys.readouterr().err
    assert main(["--db", cfg.paths.db, "--out", cfg.paths.out, "--shape", "3x3x3"]) == 2
    assert "not in the table" in capsys.readouterr().err

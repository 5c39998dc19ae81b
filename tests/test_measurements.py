"""The measurements shipped beside a table: written from an archive, merged, read back, and what a search with an
empty archive trains its cost model on."""
import gzip
import json
import random
from pathlib import Path

import pytest

from evo.config import load_config
from evo.cost_model import Sample, main, train_from_store
from evo.errors import EvoError
from evo.families import load_families
from evo.guide import Guide
from evo.measurements import load, merged, save, shipped_path
from evo.prior import GpuSpec, Prior
from evo.problem import parse_shape
from evo.store import Store
from fakes import FAKE_GPU


def _samples(n_shapes=3, per_shape=30, seed=0):
    fams = [f for f in load_families() if f.name in ("wgmma_sm90", "mma_sm80")]
    prior = Prior(fams, GpuSpec(), sample=40, seed=1)
    rng = random.Random(seed)
    out = []
    for shape in ["1024x1024x1024", "512x2048x4096", "4096x4096x1024"][:n_shapes]:
        for r in prior.rank(parse_shape(shape))[:per_shape]:
            out.append(Sample(shape, f"{shape}-{len(out)}", r.family, r.params, r.est.us * rng.uniform(0.8, 1.25)))
    return fams, out


def test_save_load_round_trip_merge_and_same_bytes(tmp_path):
    _, samples = _samples(2, 10)
    p = tmp_path / "G" / "measurements.csv.gz"
    assert load(p) == []  # none yet
    assert save(p, samples[:15]) == 15
    first = p.read_bytes()
    assert save(p, samples[:15]) == 15 and p.read_bytes() == first  # the same rows give the same bytes
    newer = Sample(samples[0].shape, samples[0].hash, samples[0].family, samples[0].params, 1.5, False)
    assert save(p, [newer] + samples[15:]) == 20  # merged over the file: the new row of a kernel wins
    back = {(s.shape, s.hash): s for s in load(p)}
    assert len(back) == 20 and back[(newer.shape, newer.hash)] == newer
    assert back[(samples[3].shape, samples[3].hash)].params == samples[3].params
    assert merged(samples[:2], [newer, samples[5]]) == samples[:2] + [samples[5]]  # the first list wins


def test_an_unreadable_file_is_one_error(tmp_path):
    p = tmp_path / "measurements.csv.gz"
    p.write_bytes(b"not gzip")
    with pytest.raises(EvoError, match="cannot read the measurements"):
        load(p)
    with gzip.open(p, "wt") as f:
        f.write("shape,hash\n1x1x1,ab\n")
    with pytest.raises(EvoError):
        load(p)


def test_a_search_with_an_empty_archive_trains_on_the_shipped_rows(tmp_path):
    fams, samples = _samples()
    cfg = load_config(overrides={"paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out")}})
    save(shipped_path(cfg.paths.out, FAKE_GPU.key), samples)
    g = Guide(cfg, fams, FAKE_GPU, Store(cfg.paths.db), parse_shape("2048x2048x2048"))
    assert g.model.ready and g.model.rows == len(samples) and g.model.shipped_rows == len(samples)
    assert f"({len(samples)} of them shipped beside the table)" in g.intro()
    # the archive's own measurement of a kernel wins over the shipped one
    store = Store(cfg.paths.db)
    s = samples[0]
    store.db.execute("INSERT INTO candidates (hash, family, params) VALUES (?,?,?)", (s.hash, s.family, json.dumps(s.params)))
    store.db.execute("INSERT INTO evaluations (hash, shape, layout, gpu, ok, time_us) VALUES (?,?,?,?,?,?)",
                     (s.hash, s.shape, "TN", FAKE_GPU.key, 1, s.time_us))
    m = train_from_store(store, FAKE_GPU.key, fams, GpuSpec(), shipped=samples)
    assert m.rows == len(samples) and m.shipped_rows == len(samples) - 1
    store.close()
    off = load_config(overrides={"paths": {"db": str(tmp_path / "evo2.db"), "out": str(tmp_path / "out")},
                                 "search": {"cost_model": False}})
    assert not Guide(off, fams, FAKE_GPU, Store(off.paths.db), parse_shape("2048x2048x2048")).model.ready
    other = load_config(overrides={"paths": {"db": str(tmp_path / "evo3.db"), "out": str(tmp_path / "elsewhere")}})
    assert not Guide(other, fams, FAKE_GPU, Store(other.paths.db), parse_shape("2048x2048x2048")).model.ready
    broken = shipped_path(tmp_path / "broken", FAKE_GPU.key)
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not gzip")
    bad = load_config(overrides={"paths": {"db": str(tmp_path / "evo4.db"), "out": str(tmp_path / "broken")}})
    g = Guide(bad, fams, FAKE_GPU, Store(bad.paths.db), parse_shape("2048x2048x2048"))
    assert not g.model.ready and "cannot read the measurements" in g.intro() and "not used" in g.intro()


def test_cli_saves_an_archives_measurements(tmp_path, capsys):
    _, samples = _samples(2, 10)
    db = tmp_path / "evo.db"
    store = Store(db)
    for s in samples:
        store.db.execute("INSERT INTO candidates (hash, family, params) VALUES (?,?,?)", (s.hash, s.family, json.dumps(s.params)))
        store.db.execute("INSERT INTO evaluations (hash, shape, layout, gpu, ok, time_us) VALUES (?,?,?,?,?,?)",
                         (s.hash, s.shape, "TN", "Fake_GPU", 1, s.time_us))
    store.db.commit()
    store.close()
    out = tmp_path / "kernels_out" / "Fake_GPU" / "measurements.csv.gz"
    assert main(["--db", str(db), "--save", str(out)]) == 0
    assert "20 measurements of Fake_GPU" in capsys.readouterr().out
    assert {(s.shape, s.hash) for s in load(out)} == {(s.shape, s.hash) for s in samples}


def test_the_committed_tables_measurements_are_readable():
    root = Path(__file__).resolve().parent.parent / "kernels_out"
    files = sorted(root.glob("*/measurements.csv.gz"))
    assert files, "a committed table ships its measurements"
    for f in files:
        rows = load(f)
        assert len(rows) >= 40 and len({r.shape for r in rows}) >= 2  # enough to train on (cost_model.MIN_ROWS)

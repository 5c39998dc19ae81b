"""The learned cost model on a synthetic archive whose 'measured' times differ from the prior in ways it can learn."""
import json
import random

import pytest

from evo.cost_model import CostModel, Sample, compiles_saved, evaluate_held_out, history, main, spearman
from evo.families import load_families
from evo.prior import GpuSpec, Prior
from evo.problem import parse_shape
from evo.store import Store

SHAPES = ["4096x4096x1024", "512x2048x4096", "64x4096x4096", "128x128x16384", "1024x1024x1024", "2048x512x2048",
          "256x1024x8192", "8192x1024x512"]


def truth(family: str, params: dict, est_us: float, rng: random.Random) -> float:
    """A 'GPU' the prior gets wrong: mma_sm80 is twice as slow, 2-stage rings lose 40%, ping-pong wins 15%."""
    t = est_us * (2.0 if family == "mma_sm80" else 1.0)
    t *= 1.4 if params.get("STAGES") == 2 else 1.0
    t *= 0.85 if params.get("PINGPONG") == 1 else 1.0
    return t * rng.uniform(0.97, 1.03)


def truth_stores(family: str, params: dict, est_us: float, rng: random.Random) -> float:
    """`truth`, and ordinary C stores (EPI 0) lose 25 %: a cost the prior does not see and its first picks often
    carry, so they miss each shape's best by more than the noise."""
    return truth(family, params, est_us, rng) * (1.25 if params.get("EPI") == 0 else 1.0)


def families():
    return [f for f in load_families() if f.name in ("wgmma_sm90", "mma_sm80", "wgmma_skinny_sm90")]


def archive(seed: int, measure=truth) -> list[Sample]:
    """The prior's first 60 candidates of a 40-instance sample per shape (the sample drawn with `seed`), measured."""
    prior = Prior(families(), GpuSpec(), sample=40, seed=seed)
    rng = random.Random(0)
    samples = []
    for shape in SHAPES:
        for r in prior.rank(parse_shape(shape))[:60]:
            samples.append(Sample(shape, f"{shape}-{len(samples)}", r.family, r.params, measure(r.family, r.params, r.est.us, rng)))
    return samples


@pytest.fixture(scope="module")
def synthetic():
    return families(), GpuSpec(), archive(1)


def test_spearman_and_compiles_saved():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # the best (1.0) is ranked 2nd of 4 by pred: 2 of 4 compiled, half saved
    assert compiles_saved([0.5, 0.7, 0.9, 0.8], [3.0, 1.0, 2.0, 4.0]) == pytest.approx(0.5)
    assert compiles_saved([0.1, 0.7, 0.9, 0.8], [1.0, 5.0, 2.0, 4.0]) == pytest.approx(0.75)


def test_unfitted_model_ranks_by_the_prior(synthetic):
    fams, spec, samples = synthetic
    m = CostModel(fams, spec).fit(samples[:10])
    assert not m.ready
    p = parse_shape(SHAPES[0])
    items = [(s.family, s.params) for s in samples if s.shape == SHAPES[0]][:5]
    prior = [m.prior.estimate(f, par, p).us for f, par in items]
    assert m.predict_us(items, p) == pytest.approx(prior)


def test_model_beats_the_prior_on_held_out_shapes(synthetic):
    fams, spec, samples = synthetic
    res = evaluate_held_out(samples, fams, spec, folds=4)
    assert len(res) == len(SHAPES)
    rho_model = sum(r.spearman_model for r in res) / len(res)
    rho_prior = sum(r.spearman_prior for r in res) / len(res)
    assert rho_model > rho_prior + 0.05 and rho_model > 0.7, (rho_model, rho_prior)
    assert sum(r.saved_model for r in res) / len(res) > 0.3


def test_held_out_folds_share_features(synthetic, monkeypatch):
    """Each fold's fit featurizes rows the other folds featurized already: the prior sizes every row once."""
    fams, spec, samples = synthetic
    calls = []
    real = Prior.estimate
    monkeypatch.setattr(Prior, "estimate", lambda self, *a: calls.append(a) or real(self, *a))
    evaluate_held_out(samples, fams, spec, folds=4)
    fitted = len(calls)
    assert fitted <= 2 * len(samples), (fitted, len(samples))  # fits once per row + the held-out prior column


def test_cli_reports_on_an_archive(tmp_path, synthetic, capsys):
    fams, spec, samples = synthetic
    db = tmp_path / "evo.db"
    store = Store(db)
    for s in samples[:200]:
        store.db.execute("INSERT INTO candidates (hash, family, params) VALUES (?,?,?)", (s.hash, s.family, json.dumps(s.params)))
        store.db.execute("INSERT INTO evaluations (hash, shape, layout, gpu, ok, time_us) VALUES (?,?,?,?,?,?)",
                         (s.hash, s.shape, "TN", "Fake_GPU", 1, s.time_us))
    assert len(history(store, "Fake_GPU")) == 200
    store.close()
    assert main(["--db", str(db), "--folds", "2"]) == 0
    out = capsys.readouterr().out
    assert "Spearman" in out and "compiles saved" in out and "Fake_GPU" in out
    assert main(["--db", str(tmp_path / "none.db")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"paths: {{db: {db}}}\n")
    assert main(["--config", str(cfg), "--folds", "2"]) == 0  # without --db: the config's paths.db
    assert "Fake_GPU" in capsys.readouterr().out


def test_likely_failures_rank_last(synthetic):
    """Candidates of a kind that always failed in the archive (here: 2-stage rings) are ranked behind the others."""
    fams, spec, samples = synthetic
    mixed = [Sample(s.shape, s.hash, s.family, s.params, 0.0 if s.params.get("STAGES") == 3 else s.time_us,
                    s.params.get("STAGES") != 3) for s in samples]
    assert sum(not s.ok for s in mixed) >= 20
    m = CostModel(fams, spec).fit(mixed)
    assert m.ready and m.failure_model is not None and m.failures >= 20
    p = parse_shape(SHAPES[2])
    rows = [s for s in samples if s.shape == SHAPES[2]]
    pred = m.predict_us([(s.family, s.params) for s in rows], p)
    bad = [x for x, s in zip(pred, rows) if s.params.get("STAGES") == 3]
    good = [x for x, s in zip(pred, rows) if s.params.get("STAGES") != 3]
    assert bad and good and sorted(pred)[: len(good) // 2] == sorted(good)[: len(good) // 2]
    assert min(bad) > sorted(good)[len(good) // 2]


@pytest.mark.parametrize("seed", [1, 2])
def test_generation_zeros_ties_in_the_models_order(seed):
    """The best of the prior's first three picks, against the same picks with the prior's ties (here a generous 30 %)
    in the held-out model's order, on an archive where the prior's picks miss the best by more than the +-3 % noise
    (ordinary stores 25 % slower than it thinks): the model, fitted on the other shapes, has learned it and closes most
    of the gap, on two samples of the space. (On `truth` alone the prior's first picks already hold the best on most
    shapes and the model's order won 7 of 12 samples: no property to test there; docs/perf-search.md.)"""
    fams, spec, samples = families(), GpuSpec(), archive(seed, truth_stores)
    res = evaluate_held_out(samples, fams, spec, folds=4, ties=0.3, first=3)
    assert all(r.first_prior >= 1.0 and r.first_ties >= 1.0 for r in res)
    prior = sum(r.first_prior for r in res) / len(res)
    ties = sum(r.first_ties for r in res) / len(res)
    assert ties < prior - 0.03, (ties, prior)  # measured 1.005 / 1.000 against 1.081 / 1.064 (seeds 1, 2)


def test_no_tie_tolerance_keeps_the_priors_order(synthetic):
    fams, spec, samples = synthetic
    off = evaluate_held_out(samples, fams, spec, folds=4, ties=0.0, first=3)
    assert [r.first_ties for r in off] == [r.first_prior for r in off]  # no tolerance: the prior's own order


def test_cli_reports_on_shipped_measurements(tmp_path, synthetic, capsys):
    from evo.measurements import save

    fams, spec, samples = synthetic
    f = tmp_path / "Fake_GPU" / "measurements.csv.gz"
    f.parent.mkdir()
    save(f, samples[:200])
    assert main(["--measurements", str(f), "--folds", "2"]) == 0
    out = capsys.readouterr().out
    assert "Fake_GPU" in out and "Spearman" in out and "generation 0's picks" in out
    for argv in (["--measurements", str(tmp_path / "none.csv.gz")], ["--measurements", str(f), "--save", str(f)],
                 ["--measurements", str(f), "--worst", "-1"]):
        assert main(argv) == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_cli_lists_the_shapes_generation_0_ranks_worst(tmp_path, synthetic, capsys):
    from evo.cost_model import report
    from evo.measurements import load, save

    _, _, samples = synthetic
    f = tmp_path / "Fake_GPU" / "measurements.csv.gz"
    f.parent.mkdir()
    save(f, samples)
    assert main(["--measurements", str(f), "--folds", "2", "--worst", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, x in enumerate(lines) if "farthest from their best" in x)
    rows = [x.split() for x in lines[head + 2:]]
    assert len(rows) == 3 and all(r[0] in SHAPES for r in rows)
    gen0 = [float(r[6]) for r in rows]
    assert gen0 == sorted(gen0, reverse=True) and all(g >= 1.0 for g in gen0)
    # what the CLI evaluates: the archive as read back (its own order, times rounded as stored)
    results = evaluate_held_out(load(f), load_families(), GpuSpec(), folds=2)
    assert float(rows[0][6]) == pytest.approx(max(r.first_ties for r in results), abs=1e-3)  # the worst comes first
    assert "farthest" not in report(results, False)  # only when asked


def test_geomean_leaves_out_what_has_no_log():
    from evo.stats import geomean

    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([2.0, None, float("nan"), 0.0, -1.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) == 0.0 and geomean([float("nan")]) == 0.0


def test_a_shared_model_is_trained_again_only_as_its_measurements_grow():
    from evo.cost_model import SharedModel

    shared, made = SharedModel(0.05), []

    def train():
        made.append(object())
        return made[-1]

    key = ("GPU", "sm_90a", ("wgmma_sm90",), 0)
    first = shared.get(key, 1000, train)
    assert shared.get(key, 1050, train) is first and shared.trained == 1  # +5 %: reused
    second = shared.get(key, 1051, train)  # beyond 5 % of the rows it was trained on
    assert second is not first and shared.trained == 2
    assert shared.get(key, 1100, train) is second  # within 5 % of 1051
    assert shared.get(("Other_GPU",) + key[1:], 1100, train) is not second  # another GPU, families or seed: trained
    assert shared.get(("Other_GPU",) + key[1:], 900, train) is not made[-2]  # fewer rows (another archive): trained
    assert shared.trained == 4


@pytest.mark.parametrize("regrow,trained", [(100.0, 2), (0.0, 3)])
def test_a_sweeps_searches_share_the_cost_model(tmp_path, monkeypatch, regrow, trained):
    """One sweep process reuses its cost model while the archive grows by less than search.cost_model_regrow; with 0
    every shape whose search added measurements trains it again. (This archive starts empty, so the second shape
    trains on the first's measurements and the third reuses that.)"""
    import io

    import evo.guide as guide_mod
    from evo.problem import parse_shape
    from evo.sweep import run_sweep
    from test_sweep import CachingFakeCompiler, ShapeFake, make_cfg

    calls = []
    real = guide_mod.train_from_store

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(guide_mod, "train_from_store", counting)
    cfg = make_cfg(tmp_path, cost_model_regrow=regrow)
    run_sweep([parse_shape(s) for s in ("256x256x256", "512x512x256", "256x512x512")], cfg, device_ids=[0],
              worker_factory=ShapeFake, compiler=CachingFakeCompiler(), out=io.StringIO())
    assert len(calls) == trained


def test_every_family_parameter_is_a_feature():
    """The model sees every choice a family offers (its tile's size through the estimate): a parameter left out is a
    switch whose effect the model cannot learn (wgmma_sm90's SPLIT_RS, EARLY_STORE, PANEL, DYN were left out until
    docs/perf-search.md's shared-memory section)."""
    from evo.cost_model import PARAM_FEATURES

    tile = {"BM", "BN", "TILE_M", "TILE_N", "TILE"}
    for fam in load_families():
        missing = set(fam.space) - tile - set(PARAM_FEATURES)
        assert not missing, (fam.name, sorted(missing))


def test_an_instance_measured_twice_is_one_candidate_at_its_median(synthetic):
    """Repeats of one instance (several sweeps timed it) are ranked once, at their median: otherwise its copies
    fill generation 0's picks, and the shape's best is the luckiest of them."""
    from evo.cost_model import instances

    fams, spec, samples = synthetic
    rows = [s for s in samples if s.ok][:3]
    twice = rows + [Sample(rows[0].shape, "h2", rows[0].family, dict(rows[0].params), rows[0].time_us * 3),
                    Sample(rows[0].shape, "h3", rows[0].family, dict(rows[0].params), rows[0].time_us * 5)]
    out = instances(twice)
    assert len(out) == len(rows)
    assert out[0].time_us == pytest.approx(rows[0].time_us * 3)  # the median of x1, x3, x5
    assert [o.time_us for o in out[1:]] == [r.time_us for r in rows[1:]]
    res = evaluate_held_out(samples + twice[3:], fams, spec, folds=4)
    shape = next(r for r in res if r.shape == rows[0].shape)
    assert shape.n == len(instances([s for s in samples + twice[3:] if s.shape == rows[0].shape and s.ok]))


def test_a_row_without_a_newer_parameter_is_the_instance_with_its_default():
    """A row measured before its family gained a parameter (stored without it) is the same instance as a newer row
    that gives the parameter its default: one candidate, at the median of both."""
    from evo.cost_model import instances

    fam = next(f for f in load_families() if f.name == "wgmma_sm90")
    full = fam.default_params()
    older = {k: v for k, v in full.items() if k != "DYN"}
    rows = [Sample("4096x4096x1024", "old", fam.name, older, 50.0),
            Sample("4096x4096x1024", "new", fam.name, dict(full), 52.0),
            Sample("4096x4096x1024", "other", fam.name, {**full, "DYN": 1}, 55.0)]
    out = instances(rows, [fam])
    assert sorted(o.time_us for o in out) == [51.0, 55.0]
    assert all(o.params["DYN"] in (0, 1) for o in out)
    assert len(instances(rows)) == 3  # without the family, the stored parameters are the instance


def test_cli_explains_one_shapes_generation_0(tmp_path, synthetic, capsys):
    """--explain SHAPE: generation 0's first picks and the shape's fastest measured, each with the prior's estimate,
    the held-out model's prediction and the measured time over the best; a shape without measurements is one line."""
    from evo.cost_model import instances
    from evo.measurements import save

    _, _, samples = synthetic
    f = tmp_path / "Fake_GPU" / "measurements.csv.gz"
    f.parent.mkdir()
    save(f, samples)
    shape = "256x1024x8192"
    assert main(["--measurements", str(f), "--explain", "256x1024x8192"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{shape}: ")
    gen0 = [x.split() for x in lines if x.startswith("gen0 ")]
    best = [x.split() for x in lines if x.startswith("best ")]
    assert len(gen0) == 6 and len(best) == 4
    fastest = min(s.time_us for s in instances([s for s in samples if s.shape == shape]))
    assert float(best[0][4]) == pytest.approx(fastest, abs=0.01) and best[0][5] == "1.000"
    assert [float(b[4]) for b in best] == sorted(float(b[4]) for b in best)
    assert all(float(g[5]) >= 1.0 for g in gen0)
    assert main(["--measurements", str(f), "--explain", "100x100x100"]) == 2
    assert "100x100x100: 0 correct instance(s)" in capsys.readouterr().err

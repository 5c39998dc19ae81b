"""What a search compiles (cost model + bandit), when it stops (convergence), and Optuna on viable families only."""
import io
import random
from pathlib import Path

from evo.config import load_config
from evo.families import load_families
from evo.guide import Guide
from evo.kernel import KernelSource
from evo.problem import Problem, parse_shape
from evo.proposers.base import Proposal, ProposalContext, is_start
from evo.proposers.optuna_tpe import OptunaProposer
from evo.records import Individual
from evo.search import Search
from evo.store import Store
from fakes import FAKE_GPU, FakeCompiler, FakeWorker

TOY = str(Path(__file__).parent / "data" / "families")


def _cfg(tmp_path, **search):
    s = {"budget_minutes": 0, "max_candidates": 30, "children": 6, "population": 6, "elites": 2, "initial_random": 2, "seed": 1}
    s.update(search)
    return load_config(overrides={"search": s, "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"),
                                                          "templates": TOY}})


def test_choose_keeps_seeds_and_picks_the_fastest_predicted(tmp_path):
    cfg = _cfg(tmp_path, explore=0.0)
    (fam,) = load_families(Path(TOY))
    p = parse_shape("256x256x256")
    g = Guide(cfg, [fam], FAKE_GPU, Store(cfg.paths.db), p)
    assert g.model.prior is g.prior  # one prior per shape: the cost model sizes instances with the guide's
    props = []
    for tile in (8, 16, 32):
        for unroll in (1, 2, 4, 8):
            ks = fam.render({"TILE": tile, "UNROLL": unroll, "PAD": 0})
            props.append(Proposal(ks.text, "mutate", ("x",), f"mutate TILE {tile}"))
    seed = fam.render({"TILE": 8, "UNROLL": 1, "PAD": 2})
    props.append(Proposal(seed.text, "mutate", (), "toy default instance"))
    chosen = g.choose(props, 4)
    assert len(chosen) == 4 and any(c.idea == "toy default instance" for c in chosen)
    preds = g.model.predict_us([(KernelSource.parse(c.source).meta.family, KernelSource.parse(c.source).meta.params)
                                for c in props[:-1]], p)
    picked = sorted(g.model.predict_us([(fam.name, KernelSource.parse(c.source).meta.params) for c in chosen if c.idea != "toy default instance"], p))
    assert picked == sorted(preds)[:3]
    assert g.proposed == len(props) and g.chosen == 4
    assert "left out" in g.lines()[0]


def test_a_start_predicted_far_slower_than_the_best_loses_its_priority(tmp_path, monkeypatch):
    """Family starts are compiled first and timed past the budget; one the model predicts more than
    search.start_slack x slower than the generation's fastest proposal is ranked like any proposal instead."""
    (fam,) = load_families(Path(TOY))

    def run(slack, n=3):
        cfg = _cfg(tmp_path, explore=0.0, start_slack=slack)
        g = Guide(cfg, [fam], FAKE_GPU, Store(cfg.paths.db), parse_shape("256x256x256"))
        us = {(1, 0): 10.0, (2, 0): 20.0, (4, 0): 40.0, (8, 0): 80.0, (1, 1): 25.0, (1, 2): 200.0}  # (UNROLL, PAD)
        monkeypatch.setattr(g.model, "predict_us", lambda items, problem: [us[(p["UNROLL"], p["PAD"])] for _, p in items])
        props = [Proposal(fam.render({"TILE": 16, "UNROLL": u, "PAD": 0}).text, "mutate", ("x",), f"mutate {u}")
                 for u in (1, 2, 4, 8)]
        near = Proposal(fam.render({"TILE": 16, "UNROLL": 1, "PAD": 1}).text, "mutate", (), "toy start instance 1")
        far = Proposal(fam.render({"TILE": 16, "UNROLL": 1, "PAD": 2}).text, "mutate", (), "toy start instance 2")
        return g.choose(props + [near, far], n), near, far

    chosen, near, far = run(3.0)
    assert chosen[0] is near and is_start(chosen[0])  # within 3x the best (25 vs 10 us): still first
    assert far.source not in [c.source for c in chosen]  # 200 us predicted: lost its slot to 10 and 20 us
    assert [c.idea for c in chosen[1:]] == ["mutate 1", "mutate 2"]
    chosen, near, far = run(3.0, n=6)  # slots for every proposal: the demoted start is compiled last, as predicted
    assert chosen[0] is near and chosen[-1].source == far.source and chosen[-1].demoted
    assert "predicted slow here: 200.0 us, the best 10.0 us" in chosen[-1].idea
    assert not is_start(chosen[-1])  # nor is it timed past the budget (evo.search.timed_past_budget)
    chosen, near, far = run(0.0)  # off: every start first, whatever its prediction
    assert [c.source for c in chosen[:2]] == [near.source, far.source] and all(is_start(c) for c in chosen[:2])


def test_a_start_the_model_says_cannot_run_is_still_compiled(tmp_path, monkeypatch):
    """A start whose kernel takes the shape but whose prediction is infinite (the model's mistake, as a register guess
    that ignored setmaxnreg was) keeps its place as a start, marked, and the guide's summary counts it."""
    (fam,) = load_families(Path(TOY))
    cfg = _cfg(tmp_path, explore=0.0, start_slack=3.0)
    g = Guide(cfg, [fam], FAKE_GPU, Store(cfg.paths.db), parse_shape("256x256x256"))
    us = {0: 10.0, 1: 12.0, 2: float("inf")}  # by PAD
    monkeypatch.setattr(g.model, "predict_us", lambda items, problem: [us[p["PAD"]] for _, p in items])
    props = [Proposal(fam.render({"TILE": 16, "UNROLL": 1, "PAD": d}).text, "mutate", ("x",), f"mutate {d}") for d in (0, 1)]
    start = Proposal(fam.render({"TILE": 16, "UNROLL": 1, "PAD": 2}).text, "mutate", (), "toy start instance 2")
    chosen = g.choose(props + [start], 1)
    assert chosen[0].source == start.source and is_start(chosen[0]) and not chosen[0].demoted
    assert "the cost model predicts it cannot run here" in chosen[0].idea
    assert g.unpredicted_starts == 1 and "1 family starts compiled although the model predicted" in g.lines()[0]
    other = Proposal(fam.render({"TILE": 8, "UNROLL": 1, "PAD": 2}).text, "mutate", ("x",), "mutate 2")
    assert other.source not in [c.source for c in g.choose(props + [other], 3)]  # a proposal that cannot run: never


def test_the_tables_nearest_rows_are_compiled_beside_the_priors_picks(tmp_path):
    """Generation 0 keeps the prior's picks whatever the slot count; the table's kernels of the nearest shapes are
    kept with them, not left to slots those picks have filled."""
    cfg = _cfg(tmp_path, explore=0.0)
    (fam,) = load_families(Path(TOY))
    g = Guide(cfg, [fam], FAKE_GPU, Store(cfg.paths.db), parse_shape("256x256x256"))
    props = [Proposal(fam.render({"TILE": 16, "UNROLL": u, "PAD": d}).text, "mutate", (), f"prior {u} {d}")
             for u in (1, 2, 4, 8) for d in (0, 1)]
    table = Proposal(fam.render({"TILE": 8, "UNROLL": 1, "PAD": 3}).text, "table", (), "the X table's kernel for 64x64x64")
    chosen = g.choose(props + [table], 4)
    assert table in chosen and len(chosen) == len(props) + 1


def test_explore_slots_take_proposals_outside_the_ranking(tmp_path):
    cfg = _cfg(tmp_path, explore=1.0)
    (fam,) = load_families(Path(TOY))
    g = Guide(cfg, [fam], FAKE_GPU, Store(cfg.paths.db), parse_shape("256x256x256"))
    props = [Proposal(fam.render({"TILE": 16, "UNROLL": u, "PAD": d}).text, "mutate", ("x",), "mutate") for u in (1, 2, 4, 8) for d in (0, 1, 2)]
    picks = [g.choose(props, 3) for _ in range(6)]
    assert len({tuple(x.source for x in pick) for pick in picks}) > 1  # random, not the ranking


def test_search_prints_the_guide_and_stops_when_converged(tmp_path):
    cfg = _cfg(tmp_path, max_candidates=0, patience_seconds=0.05, min_seconds=0.0)
    out = io.StringIO()
    s = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=FakeCompiler())
    summary = s.run()
    text = out.getvalue()
    assert "guide: cost model not trained" in text
    assert summary.stop_reason.startswith("converged") or "exhausted" in summary.stop_reason
    assert "best so far vs GPU-seconds" in text and "bandit" in text
    assert " mutate " in text  # the proposer tag on each candidate line


def test_convergence_ends_a_search_early(tmp_path, monkeypatch):
    import evo.search as search_mod

    clock = [0.0]
    monkeypatch.setattr(search_mod.time, "monotonic", lambda: clock.__setitem__(0, clock[0] + 1.0) or clock[0])
    cfg = _cfg(tmp_path, max_candidates=0, patience_seconds=20, min_seconds=0.0)
    s = Search(parse_shape("256x256x256"), cfg, out=io.StringIO(), worker_factory=FakeWorker, compiler=FakeCompiler())
    summary = s.run()
    assert summary.stop_reason.startswith("converged"), summary.stop_reason
    store = Store(cfg.paths.db)
    n = store.db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    assert n < 48  # stopped before the toy space (48 instances) was exhausted


def test_optuna_only_on_viable_families():
    fams = [f for f in load_families() if f.name in ("mma_sm80", "simt")]
    opt = OptunaProposer(0)
    opt.only_families = {"mma_sm80"}
    ctx = ProposalContext(Problem(4096, 4096, 1024), "sm_90a", None, fams, [], [], random.Random(0))
    out = opt.propose(ctx, 6)
    assert out and all(KernelSource.parse(p.source).meta.family == "mma_sm80" for p in out)
    opt.drop_pending()


def test_bandit_is_paid_by_improvement(tmp_path):
    cfg = _cfg(tmp_path)
    (fam,) = load_families(Path(TOY))
    g = Guide(cfg, [fam], FAKE_GPU, Store(cfg.paths.db), parse_shape("256x256x256"))
    kids = [Individual("a", "toy", {}, "", proposer="mutate", correct=True, time_us=50.0),
            Individual("b", "toy", {}, "", proposer="optuna", correct=True, time_us=120.0),
            Individual("c", "toy", {}, "", proposer="optuna", correct=False)]
    g.observe(kids, 3.0, 100.0, 10.0)
    assert g.bandit.arms[("toy", "mutate")].gain > 0.69 and g.bandit.arms[("toy", "optuna")].gain == 0.0
    assert g.bandit.arms[("toy", "optuna")].seconds == 2.0
    assert g.conv.best_us == 50.0


def test_staged_timing_is_asked_for_with_the_best_so_far(tmp_path):
    seen = []

    class Recording(FakeWorker):
        def call(self, op, timeout_s, **kw):
            if op == "evaluate":
                seen.append((kw.get("screen_reps"), kw.get("screen_vs_us")))
            return super().call(op, timeout_s, **kw)

    cfg = _cfg(tmp_path, max_candidates=12, screen_reps=4)
    Search(parse_shape("256x256x256"), cfg, out=io.StringIO(), worker_factory=Recording, compiler=FakeCompiler()).run()
    assert seen and all(r == 4 for r, _ in seen)
    assert seen[0][1] == 0.0 and any(b > 0 for _, b in seen[1:])  # no best yet: full timing; later: the best so far


def test_llm_is_not_asked_for_more(tmp_path):
    cfg = _cfg(tmp_path, propose_factor=3)
    (fam,) = load_families(Path(TOY))
    g = Guide(cfg, [fam], FAKE_GPU, Store(cfg.paths.db), parse_shape("256x256x256"))

    class P:
        def __init__(self, name):
            self.name = name

    assert g.propose_counts([P("mutate"), P("llm"), P("optuna")], [4, 2, 3]) == [12, 2, 9]


def test_the_priors_ties_are_ordered_by_a_trained_model_only(tmp_path, monkeypatch):
    """Generation 0's ties of the prior go in the cost model's order once it is trained (evo.prior.order_ties); the
    search hands the guide's choice to the mutate proposer, which asks it for its prior picks."""
    cfg = _cfg(tmp_path)
    (fam,) = load_families(Path(TOY))
    g = Guide(cfg, [fam], FAKE_GPU, Store(cfg.paths.db), parse_shape("256x256x256"))
    assert not g.model.ready and g.tie_order() is None
    monkeypatch.setattr(g.model, "model", object())  # as if fitted
    assert g.tie_order() == g.model.predict_us
    g.use_model = False
    assert g.tie_order() is None

    asked = []

    def predict(items, problem):
        asked.append(len(items))
        return [1.0] * len(items)

    monkeypatch.setattr(Guide, "tie_order", lambda self: predict)
    s = Search(parse_shape("256x256x256"), _cfg(tmp_path / "s", max_candidates=4), out=io.StringIO(),
               worker_factory=FakeWorker, compiler=FakeCompiler())
    s.run()
    assert asked and max(asked) > 1  # the prior's ranking of the toy family, ordered within its ties

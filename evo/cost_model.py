"""A cost model learned from every measurement in the archive: features of (shape, instance) -> log device time.

scikit-learn's HistGradientBoostingRegressor on the prior's terms (waves, padding, residency, bytes, split),
the shape, the family and the instance's parameters. It is trained on every correct evaluation of the archive
for one GPU (all shapes), so it improves as the archive grows; a search trains it when it starts (in a sweep:
before every shape, i.e. at sweep start and after each shape). With too few measurements it stays unfitted and
the prior ranks alone.

    python -m evo.cost_model --db .evo/evo.db [--gpu NVIDIA_H200] [--per-shape]

reports, on held-out shapes (leave-shapes-out: the model never saw a measurement of the shape it ranks), the
Spearman rank correlation of predicted and measured time, the prior's own correlation for comparison, and the
share of compiles the model would have saved: for each held-out shape, the share of its candidates ranked below
the first one within 2% of the shape's best.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .errors import EvoError, cli_entry
from .families import Family
from .prior import INFEASIBLE, Estimate, GpuSpec, Prior, order_ties
from .problem import Problem, parse_shape
from .measurements import merged, save as save_measurements
from .records import Sample
from .stats import geomean

# one column per parameter name, shared by the families that use it; every family parameter but the tile's size (the
# estimate's tile_m, tile_n) has one (tests/test_cost_model.py). Adding wgmma_sm90's split, store and scheduling
# switches, mma_small_sm80's and wgmma_skinny_sm90's, and the estimate's ring term: held-out Spearman 0.949 -> 0.953
# on the shipped H200 measurements, 0.902 -> 0.913 on the H100's (docs/perf-search.md)
PARAM_FEATURES = ("STAGES", "BK", "PERSISTENT", "PINGPONG", "SWAP_AB", "CONSUMERS", "GROUP", "GROUP_M", "KI", "MC",
                  "NC", "CLK", "G", "SPLIT_K", "WARPS_M", "WARPS_N", "WARPS", "WN", "KS", "UNROLL", "TM", "TN",
                  "TILE_K", "CLUSTER_M", "CLUSTER_N", "SCHEDULE", "EPI", "SCHEDULER", "RASTER", "SWIZZLE", "DECOMP",
                  "SPLITS", "CLUSTER", "RING_SPLIT", "DYN", "EARLY_STORE", "EPI_HINT", "EPI_WIDE", "PANEL",
                  "SPLIT_CLUSTER", "SPLIT_MAJOR", "SPLIT_OWNER", "SPLIT_RS", "SPLIT_SKEW", "STREAMK", "PUSH", "OCC",
                  "RED", "WARPS_K")
MIN_ROWS = 40  # fewer correct measurements than this: no model, the prior ranks
MIN_FAILS = 20  # failures needed before a classifier of "will it compile and be correct" is fitted
MAX_ROWS = 50000  # a larger archive is subsampled (seeded) for training: featurizing costs ~60 us a row
MIN_SHAPES = 2


def features(family_index: int, params: dict[str, Any], problem: Problem, est: Estimate) -> list[float]:
    def lg(x: float) -> float:
        return math.log2(x) if x > 0 and x < INFEASIBLE else -1.0

    row = [float(family_index), lg(problem.m), lg(problem.n), lg(problem.k), lg(problem.flops), lg(problem.min_bytes),
           lg(est.us), lg(est.compute_us), lg(est.memory_us), est.overhead_us, float(est.tile_m), float(est.tile_n),
           float(est.split), lg(est.units), float(est.resident), float(est.cluster), est.waves, est.wave_eff,
           est.pad_eff, est.intensity, float(est.threads), float(est.smem), lg(est.ctas), lg(est.ring_us)]
    for name in PARAM_FEATURES:
        v = params.get(name)
        row.append(float(v) if isinstance(v, (int, float, bool)) else -1.0)  # -1: the family has no such parameter
    return row


class CostModel:
    """Predicts log2 device time of (family instance, shape); ``ready`` once fitted on enough measurements."""

    def __init__(self, families: list[Family], gpu: GpuSpec, seed: int = 0, prior: Prior | None = None,
                 cache: dict | None = None):
        self.prior = prior if prior is not None else Prior(families, gpu, seed=seed)  # a search's guide shares its own
        self.cache = cache  # features by (family, params, shape), shared by the fits of evaluate_held_out's folds
        self.families = sorted(f.name for f in families)
        self.seed = seed
        self.model: Any = None
        self.failure_model: Any = None  # P(compiles, checks and times) when the archive has enough failures
        self.failures = 0
        self.rows = 0
        self.shapes = 0
        self.shipped_rows = 0  # correct measurements among the training rows that came from beside the table

    @property
    def ready(self) -> bool:
        return self.model is not None

    def _fi(self, family: str) -> int:
        return self.families.index(family) if family in self.families else len(self.families)

    def featurize(self, family: str, params: dict[str, Any], problem: Problem) -> list[float] | None:
        if self.cache is None:
            return self._featurize(family, params, problem)
        key = (family, json.dumps(params, sort_keys=True, default=str), problem.key)
        if key not in self.cache:
            self.cache[key] = self._featurize(family, params, problem)
        return self.cache[key]

    def _featurize(self, family: str, params: dict[str, Any], problem: Problem) -> list[float] | None:
        est = self.prior.estimate(family, params, problem)
        if est is None or est.us >= INFEASIBLE:
            return None
        return features(self._fi(family), params, problem, est)

    def fit(self, samples: list[Sample]) -> "CostModel":
        """Fit on the samples whose instance the prior can size; stays unfitted with too few. Correct samples train
        the time regressor; with MIN_FAILS failures among them, all samples train a classifier of success."""
        from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

        X, y, shapes = [], [], set()
        XF, yf = [], []
        problems: dict[str, Problem] = {}
        if len(samples) > MAX_ROWS:
            import random

            samples = random.Random(self.seed).sample(samples, MAX_ROWS)
        for s in samples:
            if s.ok and s.time_us <= 0:
                continue
            p = problems.setdefault(s.shape, parse_shape(s.shape))
            f = self.featurize(s.family, s.params, p)
            if f is None:
                continue
            XF.append(f)
            yf.append(int(s.ok))
            if not s.ok:
                continue
            X.append(f)
            y.append(math.log2(s.time_us))
            shapes.add(s.shape)
        self.rows, self.shapes = len(X), len(shapes)
        self.failures = len(yf) - sum(yf)
        self.model = self.failure_model = None
        if len(X) < MIN_ROWS or len(shapes) < MIN_SHAPES:
            return self
        if self.failures >= MIN_FAILS:
            c = HistGradientBoostingClassifier(max_iter=150, learning_rate=0.1, max_leaf_nodes=15, min_samples_leaf=8,
                                               categorical_features=[0], random_state=self.seed)
            with _threads(len(XF)):
                c.fit(np.asarray(XF, dtype=np.float64), np.asarray(yf))
            self.failure_model = c
        m = HistGradientBoostingRegressor(max_iter=300, learning_rate=0.08, max_leaf_nodes=31, min_samples_leaf=8,
                                          l2_regularization=1e-3, categorical_features=[0], random_state=self.seed)
        with _threads(len(X)):
            m.fit(np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64))
        self.model = m
        return self

    def predict_us(self, items: list[tuple[str, dict[str, Any]]], problem: Problem) -> list[float]:
        """Predicted time per (family, params); the prior's estimate while unfitted; inf for what cannot run."""
        feats, idx = [], []
        out = [INFEASIBLE] * len(items)
        for i, (fam, params) in enumerate(items):
            f = self.featurize(fam, params, problem)
            if f is None:
                continue
            if self.model is None:
                out[i] = 2.0 ** f[6]  # the prior's estimate (log2 us column)
                continue
            feats.append(f)
            idx.append(i)
        if feats:
            arr = np.asarray(feats, dtype=np.float64)
            with _threads(len(feats)):
                pred = self.model.predict(arr)
                # expected time per success: a likely failure costs its compile and check for nothing
                p_ok = self.failure_model.predict_proba(arr)[:, 1] if self.failure_model is not None else np.ones(len(feats))
            for i, v, q in zip(idx, pred, p_ok):
                out[i] = float(2.0 ** v) / max(float(q), 0.1)
        return out


def _threads(rows: int):
    """One OpenMP thread for small data: the trees' threads cost more than they save below ~20k rows (measured:
    a 480-row leave-shapes-out run took 13 s on 2 busy cores with the default threads, 1.7 s with one)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1 if rows < 20000 else None)


def history(store: Any, gpu: str, layout: str = "TN", failures: bool = False) -> list[Sample]:
    """Every correct measurement of one GPU in the archive (all shapes); with failures, the failed candidates too."""
    q = """SELECT e.shape, e.hash, c.family, c.params, e.time_us, e.ok FROM evaluations e JOIN candidates c ON c.hash=e.hash
           WHERE e.gpu=? AND e.layout=? AND (e.ok=1 AND e.time_us > 0 OR ?)"""
    return [Sample(r[0], r[1], r[2], json.loads(r[3] or "{}"), float(r[4] or 0.0), bool(r[5]))
            for r in store.rows(q, (gpu, layout, int(failures)))]


def measurement_count(store: Any, gpu: str, layout: str = "TN") -> int:
    """How many measurements (failures too) of one GPU the archive holds: what train_from_store would read."""
    return int(next(iter(store.rows("SELECT COUNT(*) FROM evaluations WHERE gpu=? AND layout=?", (gpu, layout))))[0])


def train_from_store(store: Any, gpu: str, families: list[Family], spec: GpuSpec, seed: int = 0,
                     exclude_shape: str = "", prior: Prior | None = None, shipped: list[Sample] = ()) -> CostModel:
    """A model of this GPU from the archive and the ``shipped`` measurements beside its table (evo.measurements; the
    archive's own row wins for a kernel both hold); ``exclude_shape`` leaves one shape's measurements out."""
    own = [s for s in history(store, gpu, failures=True) if s.shape != exclude_shape]
    extra = [s for s in merged(own, shipped)[len(own):] if s.shape != exclude_shape]
    model = CostModel(families, spec, seed, prior=prior).fit(own + extra)
    model.shipped_rows = sum(1 for s in extra if s.ok)
    return model


class SharedModel:
    """One trained cost model shared by the searches of a sweep (one per GPU process): trained again only when the
    measurements it would train on grew by more than `regrow` (a share) or the GPU, families or seed changed. A
    shape's search adds a few dozen measurements to thousands, and training before every shape cost 5-56 s of an idle
    GPU on an H200 with compiles running (docs/perf-search.md)."""

    def __init__(self, regrow: float):
        self.regrow = regrow
        self.key: tuple = ()
        self.rows = 0
        self.model: CostModel | None = None
        self.trained = 0  # times trained (the rest reused)

    def get(self, key: tuple, rows: int, train) -> CostModel:
        """The model for `key` (GPU, families, seed, ...) over `rows` measurements: the shared one, or train()."""
        if self.model is None or key != self.key or rows > self.rows * (1.0 + self.regrow) or rows < self.rows:
            self.model, self.key, self.rows = train(), key, rows
            self.trained += 1
        return self.model


# --- accuracy on held-out shapes ---------------------------------------------------------------------------

def spearman(a: list[float], b: list[float]) -> float:
    if len(a) < 3:
        return float("nan")
    from scipy.stats import spearmanr

    r = spearmanr(a, b).statistic
    return float(r) if r == r else float("nan")


def compiles_saved(pred: list[float], meas: list[float], tol: float = 0.02) -> float:
    """Share of a shape's candidates a ranking by ``pred`` would not have compiled before reaching one within
    ``tol`` of the measured best."""
    best = min(meas)
    order = sorted(range(len(pred)), key=lambda i: pred[i])
    for rank, i in enumerate(order):
        if meas[i] <= best * (1 + tol):
            return 1.0 - (rank + 1) / len(pred)
    return 0.0


@dataclass
class HeldOut:
    shape: str
    n: int
    spearman_model: float
    spearman_prior: float
    saved_model: float
    saved_prior: float
    first_prior: float = float("nan")  # the best of the prior's first few, over the shape's best (1.0: it is there)
    first_ties: float = float("nan")  # the same with the prior's ties in the model's order (generation 0's picks)


def instances(rows: list[Sample], families: list[Family] | None = None) -> list[Sample]:
    """One row per instance (family and parameters, completed with the family's defaults where it is among
    ``families``: a row measured before the family gained a parameter is the instance with its default), timed at the
    median of its measurements. A search times an instance once, so an instance measured in several sweeps is one
    candidate, not several (on the H200 measurements shipped with the table, 47311 instances in 49288 rows; repeats
    read 2.3 % apart at the median, 10 % at the 90th percentile; ranked as separate rows, one instance's repeats
    filled generation 0's six picks on 2048x12288x128)."""
    known = {f.name: f for f in families or []}
    groups: dict[tuple, list[Sample]] = {}
    for s in rows:
        f = known.get(s.family)
        params = {**f.default_params(), **s.params} if f is not None else s.params
        groups.setdefault((s.family, json.dumps(params, sort_keys=True, default=str)), []).append(replace(s, params=params))
    return [replace(g[0], time_us=statistics.median(s.time_us for s in g)) for g in groups.values()]


def best_of_first(order: list[int], meas: list[float], first: int) -> float:
    """The fastest measured time among the first ``first`` of an order, over the fastest of all."""
    return min(meas[i] for i in order[:first]) / min(meas)


@dataclass
class Ranking:
    """One held-out shape's measured instances, as a model fitted without them ranks them: the prior's estimate and
    the model's prediction per instance (us), the prior's order, and generation 0's order (the prior's, its ties in
    the model's order); orders are indices into rows."""

    rows: list[Sample]
    prior_us: list[float]
    model_us: list[float]
    by_prior: list[int]
    gen0: list[int]

    @property
    def measured(self) -> list[float]:
        return [r.time_us for r in self.rows]


def rank_held_out(model: CostModel, rows: list[Sample], shape: str, ties: float) -> Ranking | None:
    """The ranking of one shape's instances (evo.cost_model.instances) by a model that never saw the shape; None with
    fewer than 3 the prior and the model can both size."""
    p = parse_shape(shape)
    pred = model.predict_us([(s.family, s.params) for s in rows], p)
    prior = [model.prior.estimate(s.family, s.params, p) for s in rows]
    keep = [i for i, (x, e) in enumerate(zip(pred, prior)) if x < INFEASIBLE and e is not None]
    if len(keep) < 3:
        return None
    kept = [rows[i] for i in keep]
    pm = [pred[i] for i in keep]
    pp = [prior[i].us for i in keep]  # type: ignore[union-attr]
    by_prior = sorted(range(len(kept)), key=lambda j: (pp[j], kept[j].family, str(sorted(kept[j].params.items()))))
    gen0 = [by_prior[j] for j in order_ties([pp[i] for i in by_prior], [pm[i] for i in by_prior], ties)]
    return Ranking(kept, pp, pm, by_prior, gen0)


def evaluate_held_out(samples: list[Sample], families: list[Family], spec: GpuSpec, folds: int = 5,
                      per_shape: bool = False, seed: int = 0, ties: float = 0.02, first: int = 6) -> list[HeldOut]:
    """Leave-shapes-out: shapes split into folds (or one shape at a time), a model fitted on the others ranks their
    instances (evo.cost_model.instances: repeats are one instance at their median).
    Also the best of the first ``first`` instances in the prior's order, and in the prior's order with its ties
    (within ``ties``) in the model's order, as generation 0 picks them (evo.prior.order_ties)."""
    shapes = sorted({s.shape for s in samples if s.ok})
    if len(shapes) < 2:
        raise EvoError(f"the archive has measurements of {len(shapes)} shape(s) on this GPU; held-out accuracy needs 2 or more")
    groups = [[s] for s in shapes] if per_shape else [shapes[i::folds] for i in range(min(folds, len(shapes)))]
    out = []
    shared, cache = Prior(families, spec, seed=seed), {}  # every fold's fit featurizes the same rows: once
    for held in groups:
        hs = set(held)
        model = CostModel(families, spec, seed, prior=shared, cache=cache).fit([s for s in samples if s.shape not in hs])
        for shape in held:
            r = rank_held_out(model, instances([s for s in samples if s.shape == shape and s.ok], families), shape, ties)
            if r is None:
                continue
            meas = r.measured
            out.append(HeldOut(shape, len(r.rows), spearman(r.model_us, meas) if model.ready else float("nan"),
                               spearman(r.prior_us, meas),
                               compiles_saved(r.model_us, meas) if model.ready else float("nan"),
                               compiles_saved(r.prior_us, meas), best_of_first(r.by_prior, meas, first),
                               best_of_first(r.gen0, meas, first) if model.ready else float("nan")))
    return out


def explain(samples: list[Sample], families: list[Family], spec: GpuSpec, shape: str, ties: float = 0.02,
            first: int = 6, best: int = 4, seed: int = 0) -> str:
    """Why generation 0 lands where it does on one shape: a model fitted on every other shape ranks the shape's
    measured instances; the lines are generation 0's first picks and the fastest measured, each with the prior's
    estimate, the model's prediction and the measured time (over the shape's best)."""
    own = instances([s for s in samples if s.shape == shape and s.ok], families)
    model = CostModel(families, spec, seed).fit([s for s in samples if s.shape != shape])
    if not model.ready:
        raise EvoError(f"too few measurements of other shapes to fit a model ({model.rows} rows)")
    r = rank_held_out(model, own, shape, ties)
    if r is None:
        raise EvoError(f"{shape}: {len(own)} correct instance(s) measured; explaining generation 0 needs 3 or more")
    meas = r.measured
    top = min(meas)
    defaults = {f.name: f.default_params() for f in families}

    def line(tag: str, i: int) -> str:
        s = r.rows[i]
        base = defaults.get(s.family, {})
        params = ", ".join(f"{k}={v}" for k, v in sorted(s.params.items()) if base.get(k, object()) != v)
        return (f"{tag:<7}{r.prior_us[i]:>9.2f}{r.model_us[i]:>9.2f}{meas[i]:>9.2f}{meas[i] / top:>7.3f}  "
                f"{s.family} {params or '(its defaults)'}")

    head = (f"{'':<7}{'prior':>9}{'model':>9}{'meas':>9}{'x best':>7}  instance: the parameters other than its "
            f"family's defaults (us; the model never saw {shape})")
    lines = [f"{shape}: {len(r.rows)} instances measured, best {top:.2f} us; generation 0's first {first} "
             f"(the prior's order, ties within {ties:.0%} in the model's), then the fastest {best} measured", head]
    lines += [line(f"gen0 {j + 1}", i) for j, i in enumerate(r.gen0[:first])]
    lines += [line(f"best {j + 1}", i) for j, i in enumerate(sorted(range(len(meas)), key=lambda i: meas[i])[:best])]
    return "\n".join(lines)


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else float("nan")


SHAPE_HEADER = (f"{'shape':<18}{'n':>6}{'rho model':>11}{'rho prior':>11}{'saved model':>13}{'saved prior':>13}"
                f"{'gen 0':>8}{'prior 6':>9}")


def shape_row(r: HeldOut) -> str:
    """One held-out shape: Spearman and compiles saved (model, prior), and its generation-0 picks over its best (the
    prior's first few with ties in the model's order; the prior's alone)."""
    return (f"{r.shape:<18}{r.n:>6}{r.spearman_model:>11.3f}{r.spearman_prior:>11.3f}{r.saved_model:>13.2f}"
            f"{r.saved_prior:>13.2f}{r.first_ties:>8.3f}{r.first_prior:>9.3f}")


def report(results: list[HeldOut], per_shape: bool, first: int = 6, worst: int = 0) -> str:
    """The held-out accuracy; every shape with per_shape; with worst, the shapes whose generation-0 picks land
    farthest from their best measured (where the prior or the model ranks a class of shapes wrong)."""
    lines = [SHAPE_HEADER] + [shape_row(r) for r in results] if per_shape else []
    n = sum(r.n for r in results)
    lines.append(f"held-out shapes: {len(results)} ({n} measurements); mean Spearman rank correlation with measured time: "
                 f"model {_mean([r.spearman_model for r in results]):.3f}, prior alone {_mean([r.spearman_prior for r in results]):.3f}; "
                 f"compiles saved before reaching a kernel within 2% of each shape's best: "
                 f"model {_mean([r.saved_model for r in results]):.0%}, prior {_mean([r.saved_prior for r in results]):.0%}")
    ties, alone = [r.first_ties for r in results], [r.first_prior for r in results]
    if any(x == x for x in ties):  # (a model was fitted)
        lines.append(f"generation 0's picks (the first {first} by the prior, its ties in the model's order): the best of "
                     f"them over each shape's best measured, geomean {geomean(ties):.3f}, within 2 % on {_share(ties):.0%} "
                     f"of shapes; by the prior alone {geomean(alone):.3f}, {_share(alone):.0%}")
        far = sorted((r for r in results if r.first_ties == r.first_ties), key=lambda r: -r.first_ties)[:worst]
        if far:
            lines += [f"the {len(far)} shapes whose generation 0's picks land farthest from their best:", SHAPE_HEADER]
            lines += [shape_row(r) for r in far]
    return "\n".join(lines)


def _share(xs: list[float], tol: float = 0.02) -> float:
    xs = [x for x in xs if x == x]
    return sum(x <= 1 + tol for x in xs) / len(xs) if xs else float("nan")


@cli_entry
def main(argv: list[str] | None = None) -> int:
    from .cli import _Parser
    from .store import Store

    ap = _Parser(prog="python -m evo.cost_model",
                                 description="Accuracy of the learned cost model on shapes it was not trained on.")
    ap.add_argument("--db", default="", help="the archive (default: paths.db of the config, .evo/evo.db)")
    ap.add_argument("--measurements", metavar="FILE", help="evaluate on the measurements shipped beside a table "
                    "(kernels_out/<GPU>/measurements.csv.gz) instead of an archive; the prior at its default rates")
    ap.add_argument("--config", help="YAML file overriding evo/defaults.yaml")
    ap.add_argument("--gpu", help="GPU key as stored (default: the GPU with the most measurements)")
    ap.add_argument("--per-shape", action="store_true", help="leave one shape out at a time and print every shape")
    ap.add_argument("--folds", type=int, default=5, help="shape folds without --per-shape (default 5)")
    ap.add_argument("--worst", type=int, default=0, metavar="N", help="also list the N shapes whose generation-0 picks "
                    "land farthest from their best measured kernel")
    ap.add_argument("--explain", metavar="SHAPE", help="list one shape's generation-0 picks and its fastest measured "
                    "instances, each with the prior's estimate and the prediction of a model fitted on every other shape")
    ap.add_argument("--save", metavar="FILE", help="write the GPU's measurements (correct and failed) merged into FILE, "
                    "e.g. kernels_out/<GPU>/measurements.csv.gz, where searches on a machine with an empty archive "
                    "train on them (evo.measurements), and skip the accuracy report")
    args = ap.parse_args(argv)
    from pathlib import Path

    from .config import load_config

    cfg = load_config(args.config)
    if args.folds < 2:
        raise EvoError("--folds must be at least 2")
    if args.worst < 0:
        raise EvoError("--worst must be 0 or more")
    if args.measurements:
        if args.save:
            raise EvoError("--save writes an archive's measurements; --measurements reads a shipped file")
        from .measurements import load as load_measurements

        samples = load_measurements(args.measurements)
        if not any(s.ok for s in samples):
            raise EvoError(f"{args.measurements} holds no correct measurement")
        return _print_report(samples, GpuSpec(), args, cfg, str(args.measurements), Path(args.measurements).parent.name)
    if not args.db:
        args.db = cfg.paths.db
    if not Path(args.db).is_file():
        raise EvoError(f"no archive at {args.db}")
    store = Store(args.db)
    try:
        gpus = list(store.rows("SELECT gpu, COUNT(*) FROM evaluations WHERE ok=1 GROUP BY gpu ORDER BY 2 DESC"))
        if not gpus:
            raise EvoError(f"{args.db} holds no correct measurement")
        gpu = args.gpu or gpus[0][0]
        if gpu not in {g[0] for g in gpus}:
            raise EvoError(f"no measurement of GPU {gpu!r} in {args.db}; it holds {', '.join(g[0] for g in gpus)}")
        ceil = store.ceilings(gpu)
        spec = GpuSpec(peak_tflops=ceil[0], bw_gbs=ceil[1]) if ceil else GpuSpec()
        samples = history(store, gpu, failures=True)
    finally:
        store.close()
    if args.save:
        n = save_measurements(args.save, samples)
        print(f"{args.save}: {n} measurements of {gpu} ({len(samples)} from {args.db}, merged over the file's rows)")
        return 0
    return _print_report(samples, spec, args, cfg, args.db, gpu)


def _print_report(samples: list[Sample], spec: GpuSpec, args: Any, cfg: Any, source: str, gpu: str) -> int:
    from .families import load_families

    first = max(1, cfg.search.fit_starts)
    if args.explain:
        print(explain(samples, load_families(), spec, parse_shape(args.explain).key, cfg.search.prior_ties, first))
        return 0
    results = evaluate_held_out(samples, load_families(), spec, args.folds, args.per_shape,
                                ties=cfg.search.prior_ties, first=first)
    ok = [s for s in samples if s.ok]
    print(f"cost model on {gpu}: {len(ok)} correct measurements and {len(samples) - len(ok)} failures of "
          f"{len({s.shape for s in ok})} shapes in {source} (failures train the success classifier)")
    print(report(results, args.per_shape, first, args.worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Noise bands: when is one measured time really faster than another?

A timing's spread is (p90 - min) / median over its repetitions (evo.records.Timing.spread). Two medians differ
"beyond noise" only when their ratio clears a band of half their mean spread, and never less than a floor: the
floor is the run-to-run variation that no single run's spread shows (docs/evaluator.md: identical kernels agree to
0.1 % within a run, speedups under ~2 % do not survive a new process; docs/perf-notes.md: at ~10 µs with a 10 %
spread, differences under ~5 % are noise).

    band(0.02, 0.10, floor=0.02)     -> 0.03    (half the mean spread, at least the floor)
    wins(lib_us=10.0, evo_us=9.5, band=0.03)  -> True  (10.0 / 9.5 = 1.053 > 1.03)
"""
from __future__ import annotations

def band(*spreads: float, floor: float) -> float:
    """Relative half-width of the noise band of a ratio of medians whose timings had these spreads; the floor is
    evo/defaults.yaml dispatch.noise_floor (evo.config) wherever a caller has no other."""
    known = [float(s) for s in spreads if s is not None and s > 0]
    half_mean = (sum(known) / len(known)) / 2 if known else 0.0
    return max(float(floor), half_mean)


def ratio(lib_us: float, evo_us: float) -> float:
    """lib / evo: > 1 means evo is faster; 0 when either time is missing."""
    return lib_us / evo_us if lib_us > 0 and evo_us > 0 else 0.0


def wins(lib_us: float, evo_us: float, band_: float) -> bool:
    """evo is faster than the library beyond the noise band."""
    r = ratio(lib_us, evo_us)
    return r > 1.0 + band_


def verdict(lib_us: float, evo_us: float, band_: float) -> str:
    """'win', 'loss' or 'tie' (inside the band)."""
    r = ratio(lib_us, evo_us)
    if not r:
        return ""
    if r > 1.0 + band_:
        return "win"
    if r < 1.0 / (1.0 + band_):
        return "loss"
    return "tie"


def paired_ratio(num: "list[float]", den: "list[float]", seed: int = 0, resamples: int = 500) -> tuple[float, float]:
    """Two contenders timed once per round (index i = round i): the median over rounds of num / den, and the
    half-width of a bootstrap 95 % interval of that median (pairing cancels clock drift between rounds)."""
    import numpy as np

    r = np.asarray(num, dtype=np.float64) / np.asarray(den, dtype=np.float64)
    if not len(r):
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    meds = np.median(r[rng.integers(0, len(r), size=(resamples, len(r)))], axis=1)
    lo, hi = np.percentile(meds, [2.5, 97.5])
    return float(np.median(r)), float(hi - lo) / 2

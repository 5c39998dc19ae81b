"""The bandit over (family, proposer) arms and the convergence rule."""
import math

from evo.bandit import Bandit
from evo.convergence import Convergence


def test_unpulled_arms_first_then_the_paying_arm():
    b = Bandit(c=1.0)
    picks = b.allocate({"a": [1, 2, 3], "b": [4, 5], "c": [6]}, 3)
    assert sorted(a for a, _ in picks) == ["a", "b", "c"]  # every new arm once
    for _ in range(5):
        b.update("a", 0.2, 10.0)
        b.update("b", 0.15, 10.0)
        b.update("c", 0.0, 10.0)
    picks = b.allocate({"a": list(range(10)), "b": list(range(10)), "c": list(range(10))}, 12)
    counts = {k: sum(1 for a, _ in picks if a == k) for k in "abc"}
    assert counts["a"] > counts["b"] >= 2 and counts["a"] >= 6  # a close second still gets slots
    assert counts["c"] <= counts["b"]
    assert [x for a, x in picks if a == "a"] == sorted(x for a, x in picks if a == "a")  # each arm's order kept
    assert b.allocate({"a": [1]}, 5) == [("a", 1)]
    assert "a: 5 children" in b.lines()[0]


def test_rate_is_per_gpu_second():
    b = Bandit(c=0.0)
    b.update("fast", 0.1, 1.0)
    b.update("slow", 0.1, 100.0)
    v = b.values(["fast", "slow"])
    assert v["fast"] == 1.0 and math.isclose(v["slow"], 0.01)
    b.update("neg", -5.0, 1.0)  # a slower child is no gain, not a loss
    assert b.arms["neg"].gain == 0.0


def test_convergence_stops_after_a_plateau_beyond_noise():
    c = Convergence(patience_s=60, min_s=10)
    assert c.observe(1, 100.0, spread=0.02)
    assert not c.converged(5)
    assert c.observe(20, 90.0, spread=0.02)
    # 0.5% better: within the noise (1%), not a counted improvement; the plateau runs from 20 s
    assert not c.observe(50, 89.6, spread=0.02)
    assert c.best_us == 89.6
    assert not c.converged(79)
    assert c.converged(80)
    assert "not improved" in c.reason(80)
    assert c.reason(80).startswith(Convergence.REASON)  # how a search tells this stop from the others
    assert c.observe(81, 80.0)
    assert not c.converged(100)
    assert c.curve[0] == (1, 100.0) and c.curve[-1] == (81, 80.0)
    assert "1s 100.00us" in c.curve_line() and "81s 80.00us" in c.curve_line()
    assert not Convergence(patience_s=0).converged(1e9)


def test_noise_follows_the_measured_spread():
    c = Convergence(patience_s=30)
    c.observe(0, 100.0, spread=0.08)  # noisy measurement: 4% needed
    assert c.noise == 0.04
    assert not c.observe(10, 97.0)
    assert c.observe(11, 95.0)


def test_store_best_so_far(tmp_path):
    from evo.records import EvalResult
    from evo.store import Store

    store = Store(tmp_path / "evo.db")
    for h, ok, t, sec in (("a", True, 50.0, 2.0), ("b", False, 0.0, 1.0), ("c", True, 60.0, 2.0), ("d", True, 40.0, 3.0)):
        store.add_evaluation("64x64x64", "TN", "G", EvalResult(h, ok, "done" if ok else "check", time_us=t, seconds=sec))
    assert store.best_so_far("64x64x64", "TN", "G") == [(2.0, 50.0), (8.0, 40.0)]
    assert store.best_so_far("64x64x64", "TN", "other") == []

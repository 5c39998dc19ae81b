"""The cuBLASLt autotune baseline's choice: chosen on the even repetitions, reported on the odd ones."""
import random
from statistics import median

import pytest

from evo.autotune_pick import pick_fastest


def test_chosen_on_even_reported_on_odd():
    # "b" has the lowest even-repetition median (10, 10, 10) though its odd repetitions are slow
    samples = {"a": [11.0, 11.0, 11.0, 11.0, 11.0, 11.0], "b": [10.0, 20.0, 10.0, 20.0, 10.0, 20.0]}
    pick = pick_fastest(samples)
    assert pick.name == "b"
    assert pick.samples == [20.0, 20.0, 20.0]  # the reported time is not the lucky half that chose it
    assert pick.choice_us == {"a": 11.0, "b": 10.0}


def test_no_winners_curse_on_ties():
    """Eight identical algorithms with independent noise: the reported median is not biased low the way the
    minimum of eight medians is."""
    rng = random.Random(1)
    biased, split = [], []
    for _ in range(300):
        s = {f"alg{i}": [100.0 + rng.gauss(0, 1) for _ in range(30)] for i in range(8)}
        biased.append(min(median(v) for v in s.values()))
        split.append(median(pick_fastest(s).samples))
    assert sum(biased) / len(biased) < 99.7  # the minimum of eight medians: about one median's noise low
    assert abs(sum(split) / len(split) - 100.0) < 0.1


def test_ties_and_edges():
    assert pick_fastest({"y": [5.0, 5.0], "x": [5.0, 5.0]}).name == "x"  # a tie goes to the first name
    assert pick_fastest({"only": [7.0]}).samples == [7.0]  # one repetition both chooses and reports
    with pytest.raises(ValueError):
        pick_fastest({})
    with pytest.raises(ValueError):
        pick_fastest({"a": []})


@pytest.mark.parametrize("sets", [2, 4])
def test_over_sets_the_first_half_chooses_and_the_second_reports(sets):
    """Repetition r ran on set r mod sets. "b" is fast on the even sets only, which with an even number of sets are
    exactly the even repetitions: chosen on even repetitions it would win; over halves of whole rotations "a" (11 on
    every set) beats b's median of 10s and 20s."""
    reps = 4 * sets
    samples = {"a": [11.0] * reps, "b": [10.0 if (r % sets) % 2 == 0 else 20.0 for r in range(reps)]}
    pick = pick_fastest(samples, sets=sets)
    assert pick.name == "a" and pick.samples == [11.0] * (reps // 2)
    assert pick_fastest(samples).name == "b"  # the even / odd split sees b on its fast sets only
    b = [float(r) for r in range(reps)]
    assert pick_fastest({"b": b}, sets=sets).samples == b[reps // 2:]  # the second half reports
    assert pick_fastest({"only": [7.0]}, sets=sets).samples == [7.0]

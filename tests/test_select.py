import random

from evo.records import Individual
from evo.select import Diversity, Selector, cell_of


def ind(h, t, family="f", parent="", correct=True, **params):
    return Individual(hash=h, family=family, params=params, source="", parent=parent, correct=correct, time_us=t)


def test_survivors_keep_elites_and_drop_failures():
    pop = [ind(f"{i:08x}", 10.0 + i) for i in range(30)] + [ind("bad00000", 1.0, correct=False)]
    s = Selector(population=8, elites=3, tournament=3).survivors(pop)
    assert len(s) == 8
    assert [i.time_us for i in s[:3]] == [10.0, 11.0, 12.0]
    assert all(i.correct for i in s)


def test_tournament_prefers_fast():
    pop = [ind(f"{i:08x}", float(i + 1)) for i in range(20)]
    sel = Selector(population=20, elites=2, tournament=4)
    rng = random.Random(0)
    picks = [sel.parent(pop, rng).time_us for _ in range(400)]
    assert sum(picks) / len(picks) < 8.0  # the mean of a uniform pick would be 10.5


def test_cells():
    a = ind("a0000000", 1, family="mma", BM=128, BN=128, SPLIT_K=1)
    b = ind("b0000000", 1, family="mma", BM=128, BN=128, SPLIT_K=4)
    c = ind("c0000000", 1, family="mma", BM=64, BN=64, SPLIT_K=1)
    assert len({cell_of(a), cell_of(b), cell_of(c)}) == 3


def test_islands_pool_and_migration():
    d = Diversity(islands=2, migrate_every=2, elites=1)
    roots = [ind(f"{i:08x}", 100.0 + i) for i in range(8)]
    kids = [ind(f"c{i:07x}", 50.0 + i, parent=r.hash) for i, r in enumerate(roots)]
    pop = roots + kids
    by = {i.hash: i for i in pop}
    for k in kids:  # children live on their root's island
        assert d.island_of(k, by) == d.island_of(by[k.parent], by)
    island, pool = d.pool(pop, generation=1)
    others = [i for i in pop if d.island_of(i, by) != island]
    # no migration on an odd generation: only the global elite / cell champion come from other islands
    assert {i.hash for i in pool} & {i.hash for i in others} <= {min(pop, key=lambda i: i.time_us).hash}
    island2, pool2 = d.pool(pop, generation=2)
    prev = (island2 - 1) % 2
    assert any(d.island_of(i, by) == prev for i in pool2)  # migrants arrived
    assert pool2 == sorted(pool2, key=lambda i: (i.time_us, i.hash))

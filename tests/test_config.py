import pytest

from evo.config import load_config
from evo.errors import EvoError


def test_defaults_load():
    c = load_config()
    assert c.search.budget_minutes == 10.0
    assert c.timing.reps >= 30
    assert c.search.proposers == ["mutate"]


def test_file_and_override(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("search:\n  population: 5\n  elites: 2\ntiming:\n  reps: 40\n")
    c = load_config(f, {"search": {"seed": 7, "population": None}})
    assert c.search.population == 5 and c.search.seed == 7 and c.timing.reps == 40


@pytest.mark.parametrize("text,msg", [
    ("search:\n  populaton: 5\n", "unknown config key search.populaton"),
    ("bogus: {}\n", "unknown config key bogus"),
    ("search:\n  population: many\n", "must be an integer"),
    ("search: [1, 2\n", "not valid YAML"),
    ("- 1\n- 2\n", "must be a YAML mapping"),
    ("search:\n  proposers: [mutate, oracle]\n", "unknown proposer oracle"),
    ("search:\n  elites: 50\n", "elites cannot exceed"),
    ("check:\n  exact: 3\n", "true or false"),
    ("timing:\n  flush_mode: evict\n", "flush_mode must be one of read, write"),
    ("baselines:\n  placements: 0\n", "baselines.placements must be 1 to 11"),
    ("compile:\n  ahead_nice: -5\n", "compile.ahead_nice must not be negative"),
    ("compile:\n  ahead_nice: 20\n", "compile.ahead_nice must be 0 to 19"),
    ("baselines:\n  placements: 12\n", "baselines.placements must be 1 to 11"),
    ("search:\n  cross_family_rate: 1.5\n", "search.cross_family_rate must be between 0 and 1"),
    ("search:\n  crossover_rate: 2\n", "search.crossover_rate must be between 0 and 1"),
])
def test_bad_config(tmp_path, text, msg):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(EvoError, match=msg):
        load_config(f)


def test_missing_file(tmp_path):
    with pytest.raises(EvoError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")

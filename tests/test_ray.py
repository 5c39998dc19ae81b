"""evo.sweep --ray on a local Ray instance: CPU actors with the fake worker; the head merges every shape's rows."""
from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from evo.problem import parse_shape  # noqa: E402
from evo.store import Store  # noqa: E402
from evo.sweep import SweepLog, run_sweep  # noqa: E402
from test_sweep import SHAPES, CachingFakeCompiler, ShapeFake, make_cfg  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def local_ray():
    path = os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()


def test_ray_sweep_merges_into_the_head_archive(tmp_path, local_ray):
    cfg = make_cfg(tmp_path)
    out = io.StringIO()
    outcome = run_sweep([parse_shape(s) for s in SHAPES], cfg, shapes_file="test.yaml", ray=True, ray_actors=2,
                        gpus_per_actor=0, worker_factory=ShapeFake, compiler=CachingFakeCompiler(), out=out)
    text = out.getvalue()
    assert outcome.exit_code == 0 and outcome.done == 4, text
    assert "(2 GPUs)" in outcome.summary
    head = Store(cfg.paths.db)
    rows = {r.shape: r for r in SweepLog(head).results("Fake_GPU")}
    assert set(rows) == set(SHAPES) and all(r.status == "done" for r in rows.values())
    for s in SHAPES:  # everything a node measured is in the head's archive, linked to a run of that shape
        assert head.best(s, "TN", "Fake_GPU")["hash"] == rows[s].best_hash
        assert len(head.baselines(s, "TN", "Fake_GPU")) == 3 and head.confirm(s, "TN", "Fake_GPU") is not None
        q = "SELECT COUNT(*) FROM evaluations e LEFT JOIN runs r ON r.id=e.run_id WHERE e.shape=? AND (r.shape IS NULL OR r.shape<>?)"
        assert head.db.execute(q, (s, s)).fetchone()[0] == 0
    assert head.ceilings("Fake_GPU") is not None
    # later shapes were seeded from the head's winners of earlier ones
    assert sum(r.seeds_offered for r in rows.values()) > 0
    assert (tmp_path / "sweep_logs" / f"Fake_GPU_{SHAPES[0]}.log").is_file()
    assert (Path(cfg.paths.out) / "Fake_GPU" / "table.csv").is_file()
    head.close()
    # idempotent: a rerun on the cluster searches nothing
    out = io.StringIO()
    again = run_sweep([parse_shape(s) for s in SHAPES], cfg, ray=True, ray_actors=1, gpus_per_actor=0,
                      worker_factory=ShapeFake, compiler=CachingFakeCompiler(), out=out)
    assert again.this_run == [] and again.exit_code == 0

"""Errors that must end in one line, exit 2, within seconds: Ray without a cluster or at a dead address, an archive
path into nowhere (refused, nothing created), and no --compile-only hint from commands without that flag."""
from __future__ import annotations

import socket
import time

import pytest

from conftest import HAVE_GPU
from evo.distributed import connect_ray, probe
from evo.errors import EvoError
from evo.store import Store
from test_cli_errors import ROOT, one_line, run


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def test_probe_refuses_a_dead_address_fast():
    t0 = time.monotonic()
    with pytest.raises(EvoError, match=r"cannot reach a Ray cluster at 127\.0\.0\.1:\d+ \(.*within 10 s\)"):
        probe(f"127.0.0.1:{_dead_port()}")
    assert time.monotonic() - t0 < 5
    with pytest.raises(EvoError, match="is not HOST:PORT"):
        probe("localhost")


def test_connect_ray_turns_ray_errors_into_one_line():
    class FakeRay:
        def init(self, address, log_to_driver):
            raise ConnectionError("Could not find any running Ray instance.\nPlease specify the one to connect to")

    with pytest.raises(EvoError) as e:
        connect_ray(FakeRay(), None)
    assert "\n" not in str(e.value) and "ray start --head" in str(e.value) and "auto" in str(e.value)


def test_sweep_ray_at_a_dead_address_is_one_line_in_seconds(tmp_path):
    pytest.importorskip("ray")
    t0 = time.monotonic()
    res = run("evo.sweep", "--shapes", "shapes/llm.yaml", "--ray", "--ray-address", f"127.0.0.1:{_dead_port()}",
              "--db", str(tmp_path / "s.db"), "--out", str(tmp_path / "out"), timeout=60)
    one_line(res, "cannot reach a Ray cluster")
    assert time.monotonic() - t0 < 30


def test_archive_path_into_nowhere_is_refused_and_nothing_is_created(tmp_path):
    db = tmp_path / "missing" / "deeper" / "x.db"
    with pytest.raises(EvoError, match="does not exist"):
        Store(db)
    assert not (tmp_path / "missing").exists()
    res = run("evo.search", "--shape", "64x64x64", "--compile-only", "--arch", "sm_80", "--db", str(db))
    one_line(res, "cannot create the archive")
    assert not (tmp_path / "missing").exists()
    Store(tmp_path / "one_level" / "x.db").close()  # .evo/evo.db style: one missing folder is made


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is visible here")
def test_compile_only_is_suggested_only_where_it_exists(tmp_path):
    from evo.errors import NoGpuError
    from evo.gpu.device import COMPILE_ONLY_HINT, gpu_info, require_gpu

    with pytest.raises(NoGpuError) as e:
        require_gpu()
    assert "--compile-only" not in str(e.value)
    with pytest.raises(NoGpuError, match="--compile-only"):
        require_gpu(COMPILE_ONLY_HINT)
    with pytest.raises(NoGpuError) as e:
        gpu_info()
    assert "--compile-only" not in str(e.value)
    line = one_line(run("evo.evaluate", str(ROOT / "tests" / "data" / "naive.cu"), "--shape", "64x64x64",
                        "--db", str(tmp_path / "e.db")), "no CUDA GPU is visible")
    assert "--compile-only" not in line
    line = one_line(run("bench.compare", "--shapes", "shapes/bench.yaml"), "no CUDA GPU is visible")
    assert "--compile-only" not in line
    assert "--compile-only" in one_line(run("evo.search", "--shape", "64x64x64", "--db", str(tmp_path / "s.db")),
                                        "no CUDA GPU")


@pytest.mark.parametrize("module", ["bench.small_smoke", "bench.eval_overhead", "bench.cutlass_smoke"])
def test_bench_scripts_refuse_a_malformed_shape_in_one_line(module):
    one_line(run(module, "--shapes", "1x2"), "malformed shape '1x2'")


def test_evaluate_honest_usage_error_is_one_line():
    one_line(run("bench.evaluate_honest", "--jobs", "x"), "invalid int value")

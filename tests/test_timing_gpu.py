"""The timer measures device work only, and its L2 flush leaves the inputs cold (GPU only).

    python -m pytest -m gpu -q tests/test_timing_gpu.py
"""
import time

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def env():
    import cupy

    from evo.gpu.device import gpu_info
    from evo.timing import Timer

    info = gpu_info(0)
    empty = cupy.RawKernel('extern "C" __global__ void evo_empty() {}', "evo_empty")
    return info, Timer, empty


def test_host_time_before_the_launch_stays_out_of_the_window(env):
    # a call whose host side takes 100 us (as slow argument preparation would) before a trivial launch:
    # the spin grows to cover it, so the window holds the kernel only, not the host's 100 us
    info, Timer, empty = env

    def slow_host():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 100e-6:
            pass
        empty((1,), (32,), ())

    timer = Timer(info.l2_bytes, True, flush_mode="read", sms=info.sm_count)
    t = timer.measure({"slow host": slow_host, "fast host": lambda: empty((1,), (32,), ())}, reps=20)
    assert t["slow host"].median_us < 30.0, t["slow host"]
    assert t["slow host"].median_us < 3 * t["fast host"].median_us + 5.0



def test_one_off_setup_of_a_first_call_does_not_size_the_spin(env):
    # a call whose first run takes 0.3 s of host time (module load, handle creation), later runs ~nothing: the spin
    # is sized on the later runs, so measuring 10 reps takes well under the 10 x 4 x 0.3 s a first-run spin would
    info, Timer, empty = env
    runs = []

    def first_slow():
        if not runs:
            time.sleep(0.3)
        runs.append(1)
        empty((1,), (32,), ())

    timer = Timer(info.l2_bytes, True, flush_mode="read", sms=info.sm_count)
    assert timer.warm_up({"first slow": first_slow}, 3) < 50_000_000  # ns
    t0 = time.perf_counter()
    timer.measure({"first slow": first_slow}, reps=10)
    assert time.perf_counter() - t0 < 3.0

@pytest.mark.parametrize("mode", ["read", "write"])
def test_flush_leaves_the_inputs_cold(env, mode):
    # 16 MiB fit in L2: read back to back they come from L2; after either flush they come from HBM
    import cupy

    info, Timer, _ = env
    buf = cupy.ones(16 << 18, dtype=cupy.int32)
    reader = Timer(info.l2_bytes, False, sms=info.sm_count)
    warm = reader.measure({"read": lambda: reader.read(buf, None)}, reps=20)["read"].median_us
    cold = Timer(info.l2_bytes, True, flush_mode=mode, sms=info.sm_count).measure(
        {"read": lambda: reader.read(buf, None)}, reps=20)["read"].median_us
    assert cold > 1.3 * warm, (mode, cold, warm)


def test_read_flush_leaves_no_write_back_in_the_window(env):
    # after a write flush the timed read also pays the write-back of the flush's dirty lines
    import cupy

    info, Timer, _ = env
    buf = cupy.ones(64 << 18, dtype=cupy.int32)  # 64 MiB, more than the L2
    reader = Timer(info.l2_bytes, False, sms=info.sm_count)
    t = {m: Timer(info.l2_bytes, True, flush_mode=m, sms=info.sm_count, seed=i).measure(
        {"read": lambda: reader.read(buf, None)}, reps=20)["read"].median_us for i, m in enumerate(("read", "write"))}
    assert t["write"] > 1.1 * t["read"], t

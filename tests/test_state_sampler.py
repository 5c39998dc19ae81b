"""The GPU's clock and power sampled over a timing window (evo/gpu/state_sampler.py), from nvidia-smi's lines; no GPU
needed."""
import subprocess

from evo.gpu.state_sampler import INTERVAL_MS, reasons_field, sample_states, summarize

CAPPED = "00000000:19:00.0, {mhz}, 1980, {w}, 700.00, {t}, 0x0000000000000004"
FREE = "00000000:19:00.0, {mhz}, 1980, {w}, 700.00, {t}, 0x0000000000000000"
OTHER = "00000000:3B:00.0, 345, 1980, 80.00, 700.00, 30, 0x0000000000000001"


def test_a_window_under_a_power_cap_is_summarized():
    lines = [FREE.format(mhz=1980, w=420.5, t=50), CAPPED.format(mhz=1755, w=699.9, t=61),
             CAPPED.format(mhz=1650, w=700.4, t=63), OTHER, CAPPED.format(mhz=1710, w=698.0, t=62), "", "garbage"]
    s = summarize(lines, "0000:19:00.0")  # CUDA's 4-digit domain against nvidia-smi's 8; 3B is another GPU
    assert (s.samples, s.sm_mhz_median, s.sm_mhz_min, s.max_sm_mhz) == (4, 1732, 1650, 1980)
    assert (round(s.power_w_max, 1), s.power_limit_w, s.temperature_c_max) == (700.4, 700.0, 63)
    assert round(s.power_w_median, 2) == 698.95  # (698.0 + 699.9) / 2
    assert s.reasons == (("software power cap", 3),) and s.held_back()
    assert s.describe() == ("SM clock median 1732 MHz (lowest 1650) of 1980; power up to 700 of 700 W; 63 C at most; "
                            "clock held back by software power cap in 3 of 4 samples")


def test_a_free_window_and_what_is_not_reported():
    s = summarize([FREE.format(mhz=1980, w="[N/A]", t="[N/A]")] * 3, "")  # one GPU listed: its lines, whatever the bus
    assert not s.held_back() and s.power_w_max == -1 == s.power_w_median and s.temperature_c_max == -1
    assert s.describe() == "SM clock median 1980 MHz (lowest 1980) of 1980; no clock limit in 3 samples"
    assert summarize([OTHER, FREE.format(mhz=1980, w=1, t=1)], "0000:5E:00.0") is None  # two GPUs, neither this one
    assert summarize([], "0000:19:00.0") is None
    one = summarize([FREE.format(mhz=1980, w=120, t=40)], "")  # a small shape's short window: one reading
    assert one.describe().endswith("no clock limit in 1 sample")


class FakeProc:
    def __init__(self, args, stdout, stderr, lines=(), hang=False):
        self.args, self.hang, self.signals = args, hang, []
        stdout.write("".join(x + "\n" for x in lines))

    def terminate(self):
        self.signals.append("term")

    def wait(self, timeout=None):
        if self.hang and self.signals == ["term"]:
            raise subprocess.TimeoutExpired(self.args, timeout)

    def kill(self):
        self.signals.append("kill")


def test_the_sampler_runs_nvidia_smi_in_loop_mode_beside_the_block_and_stops_it():
    procs = []

    def popen(args, stdout, stderr, hang=False):
        procs.append(FakeProc(args, stdout, stderr, [CAPPED.format(mhz=1700, w=699, t=60)] * 2, hang=hang))
        return procs[-1]

    with sample_states("0000:19:00.0", "clocks_event_reasons.active", 50, popen=popen) as st:
        assert st.summary is None  # nothing before the block ends
    assert procs[0].args[-2:] == ["-lms", "50"] and "clocks_event_reasons.active" in procs[0].args[1]
    assert procs[0].signals == ["term"] and st.summary.samples == 2 and st.summary.held_back()
    with sample_states("0000:19:00.0", "f", popen=lambda *a, **k: popen(*a, **k, hang=True)) as st:
        pass
    assert procs[1].signals == ["term", "kill"] and st.summary.samples == 2  # a sampler that will not stop is killed
    assert procs[1].args[-2:] == ["-lms", str(INTERVAL_MS)] and INTERVAL_MS == 50  # one default, the period pages print


def test_no_nvidia_smi_samples_nothing_and_never_raises():
    def missing(*a, **k):
        raise FileNotFoundError("nvidia-smi")

    with sample_states("0000:19:00.0", "clocks_event_reasons.active", popen=missing) as st:
        pass
    assert st.summary is None
    started = []
    with sample_states("0000:19:00.0", None, popen=lambda *a, **k: started.append(a)) as st:
        pass
    assert st.summary is None and not started  # no working nvidia-smi found: nothing started


def test_the_clock_limit_field_this_driver_answers():
    asked = []

    def run(args, timeout_s):
        asked.append(args[1])
        return None if "clocks_event_reasons" in args[1] else "00000000:19:00.0, 1980, ..."  # an older driver

    assert reasons_field(run) == "clocks_throttle_reasons.active" and len(asked) == 2
    assert reasons_field(lambda args, t: None) is None

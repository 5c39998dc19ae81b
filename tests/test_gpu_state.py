"""What the GPU reports after a slow timing window (evo/gpu/gpu_state.py), from nvidia-smi's output; no GPU needed."""
import os
import subprocess

from evo.gpu.gpu_state import GpuState, bus_id_of, own_pids, parse_gpu_line, parse_reasons, query_gpu_state

LINE = "00000000:19:00.0, 1410, 1980, 698.52, 700.00, 61, 0x0000000000000004"
OTHER = "00000000:3B:00.0, 1980, 1980, 120.10, 700.00, 40, 0x0000000000000000"


def smi(gpu_out, apps_out="", fail_first=False):
    """A stand-in for nvidia-smi: the GPU query (the newer reasons field refused when fail_first), the apps query."""
    calls = []

    def run(args, timeout_s):
        calls.append(args)
        if args[1].startswith("--query-gpu"):
            if fail_first and "clocks_event_reasons" in args[1]:
                return None  # an older driver: "Field ... is not a valid field to query"
            return gpu_out
        return apps_out
    return run, calls


def test_a_line_and_its_clock_limits():
    bus, s = parse_gpu_line(LINE)
    assert bus == "19:00.0" and (s.sm_mhz, s.max_sm_mhz, s.temperature_c) == (1410, 1980, 61)
    assert s.reasons == ("software power cap",)
    assert parse_reasons("0x0000000000000001") == ()  # idle: the GPU between windows, not a cause
    assert parse_reasons("0x48") == ("hardware slowdown", "hardware thermal slowdown")
    assert parse_reasons("[N/A]") == () and parse_gpu_line("garbage") is None
    assert parse_gpu_line("00000000:19:00.0, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]") is None


def test_the_visible_gpu_is_picked_by_its_bus_and_other_processes_are_counted():
    apps = "00000000:19:00.0, 4242\n00000000:19:00.0, 777\n00000000:3B:00.0, 555\n"
    run, _ = smi(OTHER + "\n" + LINE + "\n", apps)
    s = query_gpu_state("0000:19:00.0", own={"4242"}, run=run)  # CUDA's 4-digit domain against nvidia-smi's 8
    assert s.sm_mhz == 1410 and (s.processes, s.own) == (2, 1)  # 4242 (the worker) and 777; 555 is elsewhere
    assert s.describe() == ("SM clock 1410 of 1980 MHz; 699 of 700 W; 61 C; clock held back by software power cap; "
                            "1 other process on the GPU")


def test_older_drivers_and_missing_readings():
    run, calls = smi(LINE + "\n", "", fail_first=True)
    s = query_gpu_state("0000:19:00.0", own={"1"}, run=run)
    assert s.sm_mhz == 1410 and "clocks_throttle_reasons" in calls[1][1] and s.processes == 0
    assert s.describe().endswith("no other process on the GPU")
    run, _ = smi(LINE + "\n", "00000000:19:00.0, 91234\n")  # a container: host PIDs, the worker's not among them
    assert query_gpu_state("0000:19:00.0", own={"12"}, run=run).describe().endswith(
        "1 compute process listed on the GPU (the worker's own PID is not visible here)")
    run, _ = smi(None)
    assert query_gpu_state("0000:19:00.0", run=run) is None  # no nvidia-smi, or it failed
    run, _ = smi(OTHER + "\n" + LINE + "\n")
    assert query_gpu_state("0000:AA:00.0", run=run) is None  # two GPUs, neither ours: no guess
    run, _ = smi(LINE + "\n", None)
    s = query_gpu_state("0000:AA:00.0", run=run)
    assert s.sm_mhz == 1410 and s.processes == -1 and "process" not in s.describe()  # one GPU in view: it; apps unknown


def test_other_processes_besides_the_worker_and_its_sandbox():
    def state(processes, own):
        return GpuState(1980, 1980, 100.0, 700.0, 40, (), processes=processes, own=own)
    assert [state(n, 1).others() for n in (1, 2, 3)] == [0, 1, 2]
    assert state(2, 2).others() == 0 and state(2, 2).describe().endswith("no other process on the GPU")  # + sandbox
    assert [state(n, 0).others() for n in (0, 1, 2)] == [0, 0, 1]  # PIDs hidden: the worker is taken to be listed
    assert state(-1, 0).others() == -1


def test_own_pids_are_the_process_and_its_children(tmp_path):
    for pid, ppid, comm in (("10", "1", "python3"), ("11", "10", "python (sandbox) x"), ("12", "11", "grandchild"),
                            ("13", "10", "other")):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_text(f"{pid} ({comm}) S {ppid} 0 0 0")
    (tmp_path / "self").mkdir()
    assert own_pids(10, tmp_path) == {"10", "11", "13"}
    assert own_pids(99, tmp_path / "missing") == {"99"}
    assert str(os.getpid()) in own_pids()


def test_describe_leaves_out_what_is_not_reported():
    s = GpuState(sm_mhz=1755, max_sm_mhz=0, power_w=-1, power_limit_w=-1, temperature_c=-1, reasons=())
    assert s.describe() == "SM clock 1755 MHz; no clock limit active"


def test_the_real_command_never_raises(monkeypatch):
    def boom(*a, **k):
        raise subprocess.TimeoutExpired("nvidia-smi", 3)
    monkeypatch.setattr(subprocess, "run", boom)
    assert query_gpu_state("0000:19:00.0") is None
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(FileNotFoundError("nvidia-smi")))
    assert query_gpu_state("0000:19:00.0") is None


def test_bus_id_from_device_properties():
    assert bus_id_of({"pciDomainID": 0, "pciBusID": 0x19, "pciDeviceID": 0}) == "0000:19:00.0"

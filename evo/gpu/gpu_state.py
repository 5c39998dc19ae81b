"""What the GPU was doing when a timing window ran slow: clocks, power, temperature, why the driver held the clock
back, and other processes on the device (nvidia-smi, which ships with every NVIDIA driver).

The worker asks for it only after a window where cuBLAS, timed beside the candidate, ran more than
timing.drift_tol slower than its quiet time in this run (evo/drift.py), so a log that says "timed while the GPU ran
slow" also says what the GPU reported then. A diagnostic: any failure (no nvidia-smi, a timeout, output it cannot
read) gives None, never an exception.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# nvidia-smi's clocks_event_reasons.active bits (clocks_throttle_reasons.active before driver 535)
REASONS = {
    0x1: "idle",
    0x2: "application clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}
FIELDS = "pci.bus_id,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,{reasons}"
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")


@dataclass(frozen=True)
class GpuState:
    sm_mhz: int
    max_sm_mhz: int
    power_w: float
    power_limit_w: float
    temperature_c: int
    reasons: tuple[str, ...]  # why the driver holds the SM clock below its maximum now (empty: nothing)
    processes: int = -1  # compute processes nvidia-smi lists on this GPU (-1: unknown)
    own: int = 0  # of those, the worker and its children (a host-code sandbox); 0: none visible (own PID namespace)

    def others(self) -> int:
        """Compute processes on this GPU besides the worker and its children (-1: unknown). Where none of their PIDs
        is listed (a container with its own PID namespace), the worker is taken to be one of those listed."""
        if self.processes < 0:
            return -1
        return self.processes - self.own if self.own > 0 else max(0, self.processes - 1)

    def describe(self) -> str:
        """One line: clocks, power, temperature, why the clock is held back, other processes."""
        parts = [f"SM clock {self.sm_mhz} of {self.max_sm_mhz} MHz" if self.max_sm_mhz else f"SM clock {self.sm_mhz} MHz"]
        if self.power_w >= 0:
            parts.append(f"{self.power_w:.0f} of {self.power_limit_w:.0f} W" if self.power_limit_w > 0 else f"{self.power_w:.0f} W")
        if self.temperature_c >= 0:
            parts.append(f"{self.temperature_c} C")
        parts.append("clock held back by " + ", ".join(self.reasons) if self.reasons else "no clock limit active")
        others = self.others()
        if self.processes >= 0 and (self.own > 0 or self.processes == 0):
            parts.append(f"{others} other process{'es' if others > 1 else ''} on the GPU" if others else "no other process on the GPU")
        elif self.processes > 0:  # PIDs of another namespace: the worker may be one of them
            parts.append(f"{self.processes} compute process{'es' if self.processes > 1 else ''} listed on the GPU "
                         "(the worker's own PID is not visible here)")
        return "; ".join(parts)


def _num(x: str, cast: Callable = float, missing=-1):
    try:
        return cast(float(x.strip()))
    except ValueError:  # "[N/A]", "[Not Supported]"
        return missing


def bus_key(bus_id: str) -> str:
    """The bus:device.function part of a PCI id, upper case: nvidia-smi writes an 8-digit domain, CUDA a 4-digit one."""
    return bus_id.strip().upper().split(":", 1)[-1] if bus_id.count(":") >= 2 else bus_id.strip().upper()


def parse_reasons(mask: str) -> tuple[str, ...]:
    try:
        bits = int(mask.strip(), 16)
    except ValueError:
        return ()
    return tuple(name for bit, name in REASONS.items() if bits & bit and bit != 0x1)


def parse_gpu_line(line: str) -> tuple[str, GpuState] | None:
    """One line of `nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits`: (bus id, state)."""
    cols = [c.strip() for c in line.split(",")]
    if len(cols) != 7:
        return None
    bus, sm, max_sm, power, limit, temp, reasons = cols
    sm_mhz = _num(sm, int)
    if sm_mhz < 0:
        return None
    return bus_key(bus), GpuState(sm_mhz=sm_mhz, max_sm_mhz=max(0, _num(max_sm, int)), power_w=_num(power),
                                  power_limit_w=_num(limit), temperature_c=_num(temp, int), reasons=parse_reasons(reasons))


def run_command(args: list[str], timeout_s: float) -> str | None:
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def own_pids(pid: int | None = None, proc: Path = Path("/proc")) -> set[str]:
    """`pid` (default: this process) and its children (the worker's host-code sandboxes hold CUDA contexts too)."""
    pid = os.getpid() if pid is None else pid
    out = {str(pid)}
    try:
        for d in proc.iterdir():
            if d.name.isdigit():
                try:
                    stat = (d / "stat").read_text()
                except OSError:
                    continue
                fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
                if len(fields) > 1 and fields[1] == str(pid):
                    out.add(d.name)
    except OSError:
        pass
    return out


def gpu_query(reasons: str) -> list[str]:
    """nvidia-smi's arguments for one reading of every GPU (FIELDS with `reasons`, the clock-limit field's name)."""
    return ["nvidia-smi", f"--query-gpu={FIELDS.format(reasons=reasons)}", "--format=csv,noheader,nounits"]


def query_gpus(run: Callable[[list[str], float], str | None] = run_command,
               timeout_s: float = 3.0) -> tuple[str, str] | None:
    """One reading of every GPU: (the clock-limit field this driver answers, nvidia-smi's output); the newer field
    name is tried first. None when nvidia-smi is missing, slow or refuses both."""
    for reasons in REASON_FIELDS:
        out = run(gpu_query(reasons), timeout_s)
        if out:
            return reasons, out
    return None


def parse_gpu_lines(lines: list[str]) -> list[tuple[str, GpuState]]:
    """(bus id, state) of every line nvidia-smi's GPU query wrote that reads as one."""
    return [r for r in (parse_gpu_line(x) for x in lines if x.strip()) if r]


def query_gpu_state(bus_id: str, own: set[str] | None = None, run: Callable[[list[str], float], str | None] = run_command,
                    timeout_s: float = 3.0) -> GpuState | None:
    """The state of the GPU at PCI `bus_id` now, with the compute processes listed there and how many of them are
    `own` (PIDs; default: this process and its children). None when nvidia-smi is missing, slow or says something
    else."""
    own = own_pids() if own is None else own
    reading = query_gpus(run, timeout_s)
    if reading is None:
        return None
    want = bus_key(bus_id)
    rows = parse_gpu_lines(reading[1].splitlines())
    state = next((s for b, s in rows if b == want), rows[0][1] if len(rows) == 1 else None)
    if state is None:
        return None
    apps = run(["nvidia-smi", "--query-compute-apps=gpu_bus_id,pid", "--format=csv,noheader"], timeout_s)
    if apps is None:
        return state
    pids = [cols[1] for cols in ([c.strip() for c in x.split(",")] for x in apps.splitlines())
            if len(cols) == 2 and (bus_key(cols[0]) == want or len(rows) == 1)]
    return GpuState(**{**state.__dict__, "processes": len(pids), "own": sum(p in own for p in pids)})


def bus_id_of(props: dict) -> str:
    """The PCI id of a device from cudaGetDeviceProperties (cupy's dict)."""
    return f"{props.get('pciDomainID', 0):04X}:{props.get('pciBusID', 0):02X}:{props.get('pciDeviceID', 0):02X}.0"


def describe_state(state: GpuState | None) -> str:
    return state.describe() if state is not None else "no reading from nvidia-smi"

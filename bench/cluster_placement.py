"""Where a grid's CTAs land, launched singly and as thread-block clusters: SM per blockIdx, and start skew.

    python -m bench.cluster_placement [--grid 132] [--smem-kb 200] [--threads 384] [--spin-us 20] [--policy 0,1,2]
        [--cluster 2] [--grid2d 8,16]

One kernel, compiled twice (plain and with __cluster_dims__(--cluster, 1, 1); 16 is non-portable), takes --smem-kb of dynamic shared memory
(so one CTA fits an SM, as a GEMM's ring does), records %smid and %globaltimer at entry and spins --spin-us. Prints,
per launch kind, the SMs of the first 24 blockIdx, how many SMs were used, and how late the last CTA started; for
the clusters also the SMs of each cluster (a cluster runs inside one GPC, so these sets show how this die's GPCs were
floor-swept) and cuOccupancyMaxActiveClusters (how many such clusters the GPU holds at once).
--policy: the cluster launch again under each cluster scheduling policy preference (the function attribute
CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: 0 default, 1 spread, 2 load balancing).

--grid2d: the plain kernel on 2-D grids, CTAs read in linear order (x fastest), against the 1-D launch. On an H100
(docs/perf-hopper.md Run 100) 16 x 8 and 8 x 16 grids of 128 CTAs land where the 1-D grid's do, but for the order
within the first 8 CTAs (8 x 16: 120 of 128 on the same SM).

On an H100 (docs/perf-hopper.md Run 19): a plain launch deals consecutive blockIdx out two at a time over the GPCs
(SMs 0, 1, 16, 17, 32, 33, ...); a cluster launch fills one GPC with consecutive clusters (SMs 0, 1, 2, ..., 15).
A kernel that gives raster-neighbour tiles to consecutive blockIdx therefore runs them in one GPC when launched in
clusters: wgmma_sm90's CTA pairs ran 17-25 % slower for it until they took their units in a GPC-spread order.
"""
from __future__ import annotations

import argparse

from evo.errors import cli_entry

_SRC = r"""
#define PROBE(NAME, ATTR)                                                                                    \
  extern "C" __global__ void ATTR NAME(unsigned long long* out, long long spin) {                           \
    extern __shared__ char smem[];                                                                           \
    unsigned long long t0, t;                                                                                \
    unsigned sm;                                                                                             \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));                                                   \
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));                                                          \
    smem[threadIdx.x] = 1;                                                                                   \
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)spin); \
    const unsigned b = blockIdx.x + blockIdx.y * gridDim.x; /* linear: a 2-D grid's x fastest */            \
    if (threadIdx.x == 0) { out[b * 2] = t0; out[b * 2 + 1] = sm; }                                          \
  }
PROBE(evo_place_plain, )
PROBE(evo_place_pair, __cluster_dims__(EVO_CLUSTER, 1, 1))
"""


POLICY_ATTR = 15  # CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE (cuda.h)
POLICIES = {0: "default", 1: "spread", 2: "load balancing"}  # CUclusterSchedulingPolicy


def probe(kind: str, cluster: int, smem: int):
    """The probe kernel ("plain", or "pair": in clusters of `cluster` CTAs), allowed `smem` bytes of dynamic shared
    memory and, past 8 CTAs, a non-portable cluster."""
    import cupy

    from evo.gpu.module import allow_large_cluster

    fn = cupy.RawModule(code=_SRC, options=("-arch=sm_90a", f"-DEVO_CLUSTER={cluster}")).get_function(f"evo_place_{kind}")
    fn.max_dynamic_shared_size_bytes = smem
    allow_large_cluster(int(fn.kernel.ptr))
    return fn


def max_active_clusters(cluster: int, grid: int, threads: int, smem: int) -> int:
    """cuOccupancyMaxActiveClusters of the probe in clusters of `cluster` CTAs: how many of them the GPU can hold at
    once (an error reads as -1)."""
    import ctypes

    from evo.gpu.host_launch import _LaunchConfig, driver

    fn = probe("pair", cluster, smem)
    n = ctypes.c_int(0)
    cfg = _LaunchConfig(grid, 1, 1, threads, 1, 1, smem, None, None, 0)
    rc = driver().cuOccupancyMaxActiveClusters(ctypes.byref(n), ctypes.c_void_p(int(fn.kernel.ptr)), ctypes.byref(cfg))
    return n.value if rc == 0 else -1


def place(grid: int, smem: int, threads: int, spin_ns: int, policies: tuple[int, ...] = (),
          cluster: int = 2, grid2d: tuple[int, ...] = ()) -> dict[str, tuple[list[int], float]]:
    """{launch kind: (SM of each blockIdx, last CTA's start after the first's, us)}, the third of three launches;
    "pair" is the launch in clusters of `cluster` CTAs; with policies, that kernel once more under each cluster
    scheduling policy ("pair/spread", ...); for each x in grid2d, the plain kernel on an x by grid / x grid
    ("plain/2-D x by y", CTAs in linear order: blockIdx.x + blockIdx.y * gridDim.x)."""
    import cupy
    import numpy as np

    out = {}
    runs = [("plain", None, (grid, 1)), ("pair", None, (grid, 1))] + [("pair", p, (grid, 1)) for p in policies]
    runs += [("plain", None, (x, grid // x)) for x in grid2d]
    for kind, policy, dims in runs:
        fn = probe(kind, cluster, smem)
        if policy is not None:
            cupy.cuda.driver.funcSetAttribute(fn.kernel.ptr, POLICY_ATTR, policy)
            kind = f"pair/{POLICIES[policy]}"
        if dims[1] > 1:
            kind = f"plain/2-D {dims[0]} by {dims[1]}"
        buf = cupy.zeros(2 * grid, dtype=cupy.uint64)
        for _ in range(3):
            fn(dims, (threads,), (buf, np.int64(spin_ns)), shared_mem=smem)
        cupy.cuda.runtime.deviceSynchronize()
        rec = buf.get().reshape(grid, 2).astype(np.int64)
        out[kind] = ([int(x) for x in rec[:, 1]], float(rec[:, 0].max() - rec[:, 0].min()) / 1000.0)
    return out


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cluster_placement", description=__doc__.splitlines()[0])
    ap.add_argument("--grid", type=int, default=132, help="CTAs (even: clusters of 2)")
    ap.add_argument("--smem-kb", type=int, default=200, help="dynamic shared memory per CTA, KiB")
    ap.add_argument("--threads", type=int, default=384)
    ap.add_argument("--spin-us", type=float, default=20.0)
    ap.add_argument("--policy", default="", help="comma list of cluster scheduling policies to launch the pairs under")
    ap.add_argument("--cluster", type=int, default=2, choices=(2, 4, 8, 16), help="CTAs per cluster")
    ap.add_argument("--grid2d", default="", help="comma list of x: the plain kernel again on an x by grid / x grid")
    a = ap.parse_args(argv)
    from evo.errors import EvoError

    try:
        policies = tuple(int(x) for x in a.policy.split(",") if x)
        if not set(policies) <= set(POLICIES):
            raise ValueError(a.policy)
    except ValueError:
        raise EvoError(f"--policy takes a comma list of {sorted(POLICIES)}, not {a.policy!r}") from None
    grid = a.grid - a.grid % a.cluster
    try:
        grid2d = tuple(int(x) for x in a.grid2d.split(",") if x)
        if any(x < 1 or x >= grid or grid % x for x in grid2d):
            raise ValueError(a.grid2d)
    except ValueError:
        raise EvoError(f"--grid2d takes a comma list of divisors of the grid ({grid}) below it, not {a.grid2d!r}") from None
    from evo.gpu.device import require_gpu

    require_gpu()
    placed = place(grid, a.smem_kb * 1024, a.threads, int(a.spin_us * 1000), policies, a.cluster, grid2d)
    for kind, (sms, skew) in placed.items():
        print(f"{kind}: {len(set(sms))} SMs for {len(sms)} CTAs, last CTA started {skew:.2f} us after the first")
        print(f"  SM of blockIdx 0..23: {sms[:24]}")
        if kind.startswith("plain/2-D"):
            same = sum(x == y for x, y in zip(sms, placed["plain"][0]))
            print(f"  on the 1-D launch's SM, linear blockIdx by linear blockIdx: {same} of {len(sms)}")
        if kind.startswith("pair"):
            groups = [sorted(sms[i:i + a.cluster]) for i in range(0, len(sms), a.cluster)]
            print(f"  SMs of each cluster of {a.cluster}: {groups}")
    n = max_active_clusters(a.cluster, grid, a.threads, a.smem_kb * 1024)
    print(f"cuOccupancyMaxActiveClusters, clusters of {a.cluster} with {a.smem_kb} KiB each: {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

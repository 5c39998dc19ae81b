"""The tensor pipe's rate per wgmma width on this GPU, then fed from L2 as a GEMM feeds it (for the next engineer: docs/perf-hopper.md).

    python -m bench.wgmma_rate [--iters 4096] [--widths 64,96,112,120,128,144,160,192,256]

One CTA per SM issues back-to-back `wgmma.mma_async.m64nNk16.f32.f16.f16` from a fixed, 128-byte-swizzled
shared-memory tile (random fp16), k blocks of four k16 slices over MT 64-row blocks, committed per k block and
waited with `wgmma.wait_group 1` (the main loop of templates/wgmma_sm90), by one or two warpgroups at once. Each
warpgroup reads clock64 around its loop. Printed per width N, MT and warpgroups: SM clocks per wgmma, the tensor
rate in dense fp16 FLOP per clock per SM, and that rate relative to N = 128 of the same arrangement. Then the same
k blocks fed as a GEMM feeds them: one producer thread copies each stage (MT x 64 + N rows of 128 B, cp.async.bulk
from an L2-resident region) into a ring that the consumer waits on and frees, timed with the wgmmas and with the
copies alone. If a width's per-column rate equals 128's with fixed operands but not when fed, a tile of that width
pays for operand delivery (bytes per FLOP grow as (MT x 64 + N) / N), not for the tensor pipe.
What bounds the feed: the stage as several copies (--chunks), CTAs reading the same region at once (--share), and a
second path into shared memory beside the bulk copies: part of each stage through the load/store units (--lsu, 16-byte
cp.async by the producer warpgroup's 128 threads). If the two paths together deliver more bytes per clock than the
bulk copies alone, what binds is the copy engine, not L2.
"""
from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTHS = (64, 96, 112, 120, 128, 144, 160, 192, 256)
SMEM = 116 * 1024  # more than half of the SM's shared memory: one CTA per SM
MAX_ACC = 176      # fp32 accumulators per thread a variant may hold (MT * N / 2)


def variants(widths: tuple[int, ...]) -> list[tuple[int, int]]:
    """(N, MT) pairs built: every width with one 64-row block, and with two where the accumulators fit."""
    return [(n, mt) for n in widths for mt in (1, 2) if mt * n // 2 <= MAX_ACC]


def kernel_name(n: int, mt: int) -> str:
    return f"rate_n{n}_mt{mt}"


def feed_name(n: int, mt: int) -> str:
    return f"feed_n{n}_mt{mt}"


def stage_bytes(n: int, mt: int) -> int:
    return (mt * 64 + n) * 128


def feed_stages(n: int, mt: int) -> int:
    """Ring depth of a feed variant: as many stages as fit in 200 KB, at most 8 (the kernels' MAX_STAGES)."""
    return min(8, 200 * 1024 // stage_bytes(n, mt))


def lsu_bytes(fraction: float, stage: int) -> int:
    """The bytes of a stage the producer warpgroup copies with cp.async: ``fraction`` of it, in whole rounds of 128
    threads x 16 bytes."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"a fraction of the stage in 0..1, not {fraction}")
    return min(stage, int(round(fraction * stage / 2048)) * 2048)


def check_widths(widths: tuple[int, ...]) -> None:
    """ValueError unless every width is an m64nNk16 N: a multiple of 8 in 8..256."""
    for n in widths:
        if n % 8 or not 8 <= n <= 256:
            raise ValueError(f"wgmma width {n}: a multiple of 8 in 8..256")


def source(widths: tuple[int, ...]) -> str:
    """CUDA source with one kernel per (N, MT) of ``variants(widths)``."""
    check_widths(widths)
    out = [_PRELUDE]
    for n in dict.fromkeys(widths):
        acc = n // 2
        regs = ", ".join(f"%{i}" for i in range(acc))
        binds = ", ".join(f'"+f"(d[{i}])' for i in range(acc))
        out.append(f"""
__device__ __forceinline__ void wgmma_n{n}(float* d, uint64_t da, uint64_t db) {{
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc + 2}, 0;\\n"
               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, %{acc}, %{acc + 1}, p, 1, 1, 0, 0;\\n}}\\n"
               : {binds}
               : "l"(da), "l"(db), "r"(1));
}}
""")
    for n, mt in variants(tuple(dict.fromkeys(widths))):
        acc = n // 2
        out.append(f"""
extern "C" __global__ void __launch_bounds__(256, 1) {kernel_name(n, mt)}(unsigned long long* cyc, int iters, int wgs) {{
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  fill_random(smem, ({mt} * 64 + {n}) * 128);
  const int wg = threadIdx.x / 128;
  if (wg >= wgs) return;
  float d[{mt}][{acc}];
#pragma unroll
  for (int m = 0; m < {mt}; ++m)
#pragma unroll
    for (int i = 0; i < {acc}; ++i) d[m][i] = 0.f;
  const uint64_t da = desc_sw128(smem_u32(smem)), db = desc_sw128(smem_u32(smem + {mt} * 64 * 128));
  const unsigned long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {{
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int m = 0; m < {mt}; ++m) wgmma_n{n}(d[m], da + (m * 64 * 128 + k * 32) / 16, db + k * 32 / 16);
    wgmma_commit();
    wgmma_wait<1>();
  }}
  wgmma_wait<0>();
  const unsigned long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int m = 0; m < {mt}; ++m)
#pragma unroll
    for (int i = 0; i < {acc}; ++i) s += d[m][i];
  if (threadIdx.x % 128 == 0) {{
    cyc[(blockIdx.x * 2 + wg) * 2] = t0;
    cyc[(blockIdx.x * 2 + wg) * 2 + 1] = t1 + (s == 1.2345e30f);
  }}
}}
// The same k blocks fed through a ring: thread 128 copies each stage's {mt * 64 + n} rows x 128 B (in `chunks`
// cp.async.bulk copies) from its region of `src` (`wrap` stages long, so it stays in L2; `share` neighbouring CTAs
// read the same region at once) into stage it % stages; warpgroup 0 waits
// for it, runs the stage's wgmmas (compute 0: none) and frees the stage after the next one's wait_group 1.
// lsu > 0: the stage's last `lsu` bytes come instead through the load/store path, 16-byte cp.async.cg by all 128
// producer threads, each completing its share of the full barrier with cp.async.mbarrier.arrive.noinc.
extern "C" __global__ void __launch_bounds__(256, 1) {feed_name(n, mt)}(unsigned long long* cyc, const unsigned char* src,
                                                                       int iters, int wrap, int stages, int compute,
                                                                       int chunks, int share, int lsu, int* err) {{
  constexpr uint32_t STAGE = ({mt} * 64 + {n}) * 128;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ alignas(8) uint64_t full[MAX_STAGES], empty[MAX_STAGES];
  const uint32_t ring = (smem_u32(smem_raw) + 1023) & ~1023u;
  if (threadIdx.x == 0) {{
    for (int i = 0; i < stages; ++i) {{
      mbar_init(smem_u32(&full[i]), 1 + (lsu > 0 ? 128 : 0));
      mbar_init(smem_u32(&empty[i]), 1);
    }}
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }}
  __syncthreads();
  const unsigned char* mine = src + static_cast<size_t>(blockIdx.x / share) * wrap * STAGE;  // share CTAs per region
  const uint32_t bulk = STAGE - lsu;
  if (threadIdx.x == 128 || (threadIdx.x > 128 && lsu > 0)) {{  // producer: thread 128, or with lsu its warpgroup
    int s = 0;
    uint32_t ph = 0;
    for (int it = 0; it < iters; ++it) {{
      if (!mbar_wait(smem_u32(&empty[s]), ph ^ 1, err)) break;
      const unsigned char* from = mine + static_cast<size_t>(it % wrap) * STAGE;
      if (threadIdx.x == 128) {{
        mbar_arrive_expect_tx(smem_u32(&full[s]), bulk);
        for (int c = 0; bulk > 0 && c < chunks; ++c)  // the stage as `chunks` copies
          bulk_load(ring + s * STAGE + c * (bulk / chunks), from + c * (bulk / chunks), bulk / chunks, smem_u32(&full[s]));
      }}
      if (lsu > 0) {{
        for (uint32_t o = bulk + (threadIdx.x - 128) * 16; o < STAGE; o += 128 * 16)
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(ring + s * STAGE + o), "l"(from + o) : "memory");
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(&full[s])) : "memory");
      }}
      if (++s == stages) {{ s = 0; ph ^= 1; }}
    }}
    if (lsu > 0) asm volatile("cp.async.wait_all;" ::: "memory");
    return;
  }}
  if (threadIdx.x >= 128) return;
  float d[{mt}][{acc}];
#pragma unroll
  for (int m = 0; m < {mt}; ++m)
#pragma unroll
    for (int i = 0; i < {acc}; ++i) d[m][i] = 0.f;
  const unsigned long long t0 = clock64();
  int s = 0, prev = 0;
  uint32_t ph = 0;
  for (int it = 0; it < iters; ++it) {{
    if (!mbar_wait(smem_u32(&full[s]), ph, err)) break;
    if (compute) {{
      const uint64_t da = desc_sw128(ring + s * STAGE), db = desc_sw128(ring + s * STAGE + {mt} * 64 * 128);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int m = 0; m < {mt}; ++m) wgmma_n{n}(d[m], da + (m * 64 * 128 + k * 32) / 16, db + k * 32 / 16);
      wgmma_commit();
      wgmma_wait<1>();
    }}
    if (it > 0 && threadIdx.x == 0) mbar_arrive(smem_u32(&empty[prev]));
    prev = s;
    if (++s == stages) {{ s = 0; ph ^= 1; }}
  }}
  wgmma_wait<0>();
  const unsigned long long t1 = clock64();
  float acc_sum = 0.f;
#pragma unroll
  for (int m = 0; m < {mt}; ++m)
#pragma unroll
    for (int i = 0; i < {acc}; ++i) acc_sum += d[m][i];
  if (threadIdx.x == 0) {{
    cyc[blockIdx.x * 4] = t0;
    cyc[blockIdx.x * 4 + 1] = t1 + (acc_sum == 1.2345e30f);
  }}
}}
""")
    return "".join(out)


_PRELUDE = r"""// Generated by bench/wgmma_rate.py: the tensor pipe's rate per wgmma width, operands fixed in shared memory.
#include <cuda_fp16.h>
#include <stdint.h>
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// K-major tile with the 128-byte swizzle: rows of 128 B, 8-row atoms 1024 B apart, base 1024-aligned
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}
constexpr int MAX_STAGES = 8;
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// A bounded wait: false (and *err set) after ~2^26 polls, so a broken ring ends the launch instead of hanging it
__device__ __forceinline__ bool mbar_wait(uint32_t bar, uint32_t parity, int* err) {
  for (int i = 0; i < (1 << 26); ++i) {
    uint32_t ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    if (ok) return true;
  }
  atomicExch(err, 1);
  return false;
}
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// fp16 values in [-1, 1) from a hash of the byte offset, written by every thread, then made visible to the
// async proxy (wgmma reads shared memory through it)
__device__ __forceinline__ void fill_random(unsigned char* p, int bytes) {
  for (int i = threadIdx.x; i < bytes / 2; i += blockDim.x) {
    uint32_t h = (i + 1) * 2654435761u ^ blockIdx.x * 40503u;
    h ^= h >> 15;
    reinterpret_cast<__half_raw*>(p)[i].x = static_cast<unsigned short>(0x3800 | (h & 0x83ff));  // +-[0.5, 1)
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
}
"""


def compile_rate(cubin: Path, widths: tuple[int, ...] = WIDTHS) -> subprocess.CompletedProcess:
    """nvcc the rate kernels for ``widths`` into ``cubin`` (sm_90a)."""
    src = cubin.with_suffix(".cu")
    src.write_text(source(widths))
    return subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-o", str(cubin), str(src)],
                          capture_output=True, text=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=4096, help="k blocks (4 x MT wgmmas each) per warpgroup")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)), help="wgmma N values, comma-separated")
    ap.add_argument("--reps", type=int, default=5, help="launches per variant (the median's CTA is reported)")
    ap.add_argument("--chunks", default="1,4,16", help="copies per stage tried on N = 128, MT = 2 (divisors of 16)")
    ap.add_argument("--share", default="1,4,12", help="CTAs reading one region at once, tried with each --chunks")
    ap.add_argument("--lsu", default="0,0.5,1", help="fractions of the stage copied through the load/store path "
                    "(cp.async by the producer warpgroup) instead of cp.async.bulk, tried on N = 128, MT = 2 with each --share")
    args = ap.parse_args(argv)
    try:
        widths = tuple(int(w) for w in args.widths.split(","))
        check_widths(widths)
    except ValueError as e:
        print(f"error: --widths: {e}", file=sys.stderr)
        return 2
    try:
        args.chunks = [int(c) for c in args.chunks.split(",")]
        args.share = [int(c) for c in args.share.split(",")]
        if any(c not in (1, 2, 4, 8, 16) for c in args.chunks) or any(c < 1 for c in args.share):
            raise ValueError("copies per stage: 1, 2, 4, 8 or 16; CTAs per region >= 1")
    except ValueError as e:
        print(f"error: --chunks / --share: {e}", file=sys.stderr)
        return 2
    try:
        args.lsu = [float(f) for f in args.lsu.split(",") if f]
        for f in args.lsu:
            lsu_bytes(f, stage_bytes(128, 2))
    except ValueError as e:
        print(f"error: --lsu: {e}", file=sys.stderr)
        return 2
    try:
        import cupy as cp
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        if cp.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no device")
    except Exception as e:  # no driver / no device
        print(f"error: no GPU ({e})", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "rate.cubin"
        r = compile_rate(cubin, widths)
        if r.returncode:
            print(f"error: nvcc failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}", file=sys.stderr)
            return 2
        mod = cp.RawModule(path=str(cubin))
        funcs, feeds = {}, {}
        for n, mt in variants(widths):
            f = mod.get_function(kernel_name(n, mt))
            f.max_dynamic_shared_size_bytes = SMEM
            funcs[(n, mt)] = f
            g = mod.get_function(feed_name(n, mt))
            g.max_dynamic_shared_size_bytes = feed_stages(n, mt) * stage_bytes(n, mt) + 1024
            feeds[(n, mt)] = g
    import numpy as np

    props = cp.cuda.runtime.getDeviceProperties(0)
    sms = props["multiProcessorCount"]
    print(f"{props['name'].decode()}: {sms} SMs, one CTA each; {args.iters} k blocks per warpgroup, wait_group 1")
    cyc = cp.zeros(sms * 4, dtype=cp.uint64)
    rows = []
    for (n, mt), f in funcs.items():
        for wgs in (1, 2):
            per_launch = []
            for _ in range(args.reps):
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record()
                f((sms,), (128 * wgs,), (cyc, np.int32(args.iters), np.int32(wgs)), shared_mem=SMEM)
                b.record()
                b.synchronize()
                c = cyc.get().reshape(sms, 2, 2)[:, :wgs, :].astype(np.int64)
                span = (c[:, :, 1].max(axis=1) - c[:, :, 0].min(axis=1))  # per SM: first start to last end
                per_launch.append((float(np.median(span)), cp.cuda.get_elapsed_time(a, b) * 1e3))
            clocks, us = sorted(per_launch)[len(per_launch) // 2]
            wgmmas = args.iters * 4 * mt * wgs
            rate = wgmmas * 2 * 64 * n * 16 / clocks
            rows.append((n, mt, wgs, clocks / wgmmas, rate, us, clocks / us))
    base = {(mt, wgs): rate for n, mt, wgs, _, rate, _, _ in rows if n == 128}
    print("| N | MT | warpgroups | clocks per wgmma | FLOP / clock / SM | per column vs N = 128 | us | MHz |")
    print("|---|---|---|---|---|---|---|---|")
    for n, mt, wgs, cpw, rate, us, mhz in rows:
        rel = f"{rate / base[(mt, wgs)]:.3f}" if (mt, wgs) in base else "-"
        print(f"| {n} | {mt} | {wgs} | {cpw:.1f} | {rate:.0f} | {rel} | {us:.1f} | {mhz:.0f} |", flush=True)
    # the same k blocks fed through a ring from L2 (each CTA re-reading its own WRAP stages), with and without wgmmas
    wrap = 4
    src = cp.random.randint(0, 255, sms * wrap * max(stage_bytes(n, mt) for n, mt in feeds), dtype=cp.uint8)
    err = cp.zeros(1, dtype=cp.int32)

    @functools.cache  # the tables share rows (one copy per stage, no cp.async): each variant is launched once
    def feed_clocks(key: tuple[int, int], compute: int, chunks: int, share: int, lsu: int) -> float:
        """SM clocks per k block of one feed variant: the median launch's median CTA."""
        st, sb = feed_stages(*key), stage_bytes(*key)
        per_launch = []
        for _ in range(args.reps):
            feeds[key]((sms,), (256,), (cyc, src, np.int32(args.iters), np.int32(wrap), np.int32(st), np.int32(compute),
                                        np.int32(chunks), np.int32(share), np.int32(lsu), err), shared_mem=st * sb + 1024)
            cp.cuda.Device().synchronize()
            c = cyc.get().reshape(sms, 4).astype(np.int64)
            per_launch.append(float(np.median(c[:, 1] - c[:, 0])))
        return sorted(per_launch)[len(per_launch) // 2] / args.iters

    fed = []
    for n, mt in feeds:
        st, sb = feed_stages(n, mt), stage_bytes(n, mt)
        got = {compute: feed_clocks((n, mt), compute, 1, 1, 0) for compute in (1, 0)}
        if int(err.get()[0]):
            print(f"error: the feed ring of N = {n}, MT = {mt} timed out (a kernel bug)", file=sys.stderr)
            return 1
        fed.append((n, mt, st, got[1], got[0], sb))
    base = {mt: 2 * 64 * mt * 64 * n / clk for n, mt, _, clk, _, _ in fed if n == 128}
    print()
    print("Fed from L2 through a ring (cp.async.bulk, one producer thread), one consumer warpgroup:")
    print("| N | MT | stages | clocks per k block | FLOP / clock / SM | per column vs N = 128 | "
          "stage bytes per clock | clocks per k block, copies alone |")
    print("|---|---|---|---|---|---|---|---|")
    for n, mt, st, clk, clk0, sb in fed:
        rate = 2 * 64 * mt * 64 * n / clk
        rel = f"{rate / base[mt]:.3f}" if mt in base else "-"
        print(f"| {n} | {mt} | {st} | {clk:.1f} | {rate:.0f} | {rel} | {sb / clk:.1f} | {clk0:.1f} |", flush=True)
    # what bounds the feed: the copies' size (one copy per stage or several) and CTAs reading the same lines at once
    key = (128, 2) if (128, 2) in feeds else next(iter(feeds))
    sb = stage_bytes(*key)
    print()
    print(f"N = {key[0]}, MT = {key[1]} fed in chunks, CTAs sharing a region:")
    print("| copies per stage | CTAs per region | clocks per k block | stage bytes per clock |")
    print("|---|---|---|---|")
    for chunks in args.chunks:
        for share in args.share:
            clk = feed_clocks(key, 1, chunks, share, 0)
            print(f"| {chunks} | {share} | {clk:.1f} | {sb / clk:.1f} |", flush=True)
    if int(err.get()[0]):
        print("error: a chunked feed ring timed out (a kernel bug)", file=sys.stderr)
        return 1
    # a second path into shared memory: part of each stage through the load/store units (cp.async, 16 B per thread)
    print()
    print(f"N = {key[0]}, MT = {key[1]}, part of each stage copied by the producer warpgroup's cp.async:")
    print("| cp.async share of the stage | CTAs per region | clocks per k block | stage bytes per clock | "
          "clocks per k block, copies alone |")
    print("|---|---|---|---|---|")
    for frac in args.lsu:
        lsu = lsu_bytes(frac, sb)
        for share in args.share:
            clk, clk0 = (feed_clocks(key, compute, 1, share, lsu) for compute in (1, 0))
            print(f"| {lsu / sb:.2f} ({lsu} B) | {share} | {clk:.1f} | {sb / clk:.1f} | {clk0:.1f} |", flush=True)
    if int(err.get()[0]):
        print("error: a feed ring with cp.async timed out (a kernel bug)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The write floor of output-bound GEMMs: how fast this GPU writes an M x N fp16 matrix, next to cuBLAS.

    python -m bench.write_floor [--shape 16384x16384x128 --shape 2048x12288x128] [--reps 30]

For K <= 256 and a large M x N, writing C dominates a GEMM. This probe times, in one process and interleaved
(L2 flushed by a read pass, CUDA events, median): a store-only kernel writing M x N fp16 with 16-byte stores
(grid-stride, every SM), C written tile by tile as a GEMM writes it (128 x 256 and 256 x 128 tiles, one CTA per SM
taking its units contiguously or round-robin, four CTAs per SM round-robin; streaming stores), the same 128 x 256
tiles through TMA as the TMA-store epilogue stores them (64 x 64 swizzled boxes, or 64 x 128 and 64 x 256 boxes),
the grid-stride kernel that also reads A and B once, cudaMemsetAsync of C, and cuBLAS on the shape. The store-only
time is the floor a GEMM on that shape can approach; the ratio cuBLAS / floor is the room.
"""
from __future__ import annotations

import argparse

from evo.errors import cli_entry

_SRC = r"""
extern "C" __global__ void evo_write_only(uint4* __restrict__ c, long long n16) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long step = (long long)gridDim.x * blockDim.x;
  uint4 v = make_uint4(0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u);
  for (; i < n16; i += step) c[i] = v;
}
extern "C" __global__ void evo_read_write(const uint4* __restrict__ a, long long na16, uint4* __restrict__ c,
                                           long long n16) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long step = (long long)gridDim.x * blockDim.x;
  unsigned x = 0;
  for (long long j = i; j < na16; j += step) { uint4 t = a[j]; x ^= t.x ^ t.y ^ t.z ^ t.w; }
  uint4 v = make_uint4(x | 0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u);
  for (; i < n16; i += step) c[i] = v;
}
// C written as a GEMM writes it: BM x BN tiles (16-byte streaming stores, evict-first in spirit like the
// TMA-store epilogue's hint), each CTA taking its units contiguously (the K-short panel's order) or round-robin.
extern "C" __global__ void evo_tile_store(uint4* __restrict__ c, int m, int n, int bm, int bn, int contiguous) {
  const int tiles_n = n / bn, tiles = (m / bm) * tiles_n, row_q = bn / 8;
  const int per = (tiles + gridDim.x - 1) / gridDim.x;
  const uint4 v = make_uint4(0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u);
  for (int i = 0;; ++i) {
    const int u = contiguous ? blockIdx.x * per + i : blockIdx.x + i * gridDim.x;
    if ((contiguous && i >= per) || u >= tiles) break;
    const long long base = (long long)(u / tiles_n) * bm * n + (long long)(u % tiles_n) * bn;
    for (int j = threadIdx.x; j < bm * row_q; j += blockDim.x)
      __stcs(c + (base + (long long)(j / row_q) * n) / 8 + j % row_q, v);
  }
}
// The same 128 x 256 tiles stored as the TMA-store epilogue stores them: two warps (a tile's two 64-row slices, as its
// two consumers), each with a 32 KB buffer written once, one lane per warp issuing a slice's 256 / box_w boxes of
// 64 x box_w (cp.async.bulk.tensor; the map's box: 64 wide with the 128-byte swizzle as the epilogue's, or 128 / 256
// wide unswizzled) per unit, committing them as one bulk group and waiting until the previous group has read its
// buffer (EPI 1's pacing); `hint`: the stores carry an L2 evict_first policy (EPI_HINT).
struct __align__(64) TmaDesc { unsigned char bytes[128]; };
extern "C" __global__ void __launch_bounds__(64) evo_tma_tile_store(const __grid_constant__ TmaDesc map_c, int m, int n,
                                                                    int contiguous, int hint, int box_w) {
  extern __shared__ __align__(1024) unsigned char smem[];
  for (int i = threadIdx.x; i < 2 * 32768 / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x % 32) return;
  const int warp = threadIdx.x / 32;
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  const unsigned buf = (unsigned)__cvta_generic_to_shared(smem) + warp * 32768;
  const int tiles_n = n / 256, tiles = (m / 128) * tiles_n;
  const int per = (tiles + gridDim.x - 1) / gridDim.x;
  for (int i = 0;; ++i) {
    const int u = contiguous ? blockIdx.x * per + i : blockIdx.x + i * gridDim.x;
    if ((contiguous && i >= per) || u >= tiles) break;
    const int row0 = (u / tiles_n) * 128 + warp * 64, col0 = (u % tiles_n) * 256;
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    for (int b = 0; b < 256 / box_w; ++b) {
      if (hint)
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;"
                     ::"l"(&map_c), "r"(buf + b * 128 * box_w), "r"(col0 + b * box_w), "r"(row0), "l"(policy) : "memory");
      else
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                     ::"l"(&map_c), "r"(buf + b * 128 * box_w), "r"(col0 + b * box_w), "r"(row0) : "memory");
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
"""


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.write_floor", description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", default=None, help="MxNxK (repeatable)")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)

    from evo.gpu.device import gpu_info, require_gpu
    from evo.problem import parse_shape

    shapes = [parse_shape(s) for s in (args.shape or ["16384x16384x128", "2048x12288x128", "8192x8192x128"])]
    require_gpu()
    import cupy
    import numpy

    from evo.baselines import cublas_gemm
    from evo.timing import Timer

    info = gpu_info(0)
    print(f"GPU {info.name}, driver {info.driver}, {info.sm_count} SMs, L2 {info.l2_bytes >> 20} MiB")
    mod = cupy.RawModule(code=_SRC)
    wonly, rw = mod.get_function("evo_write_only"), mod.get_function("evo_read_write")
    tiles = mod.get_function("evo_tile_store")
    tma_tiles = mod.get_function("evo_tma_tile_store")
    tma_tiles.max_dynamic_shared_size_bytes = 65536
    gemm = cublas_gemm()
    calls, sizes = {}, {}
    for p in shapes:
        a = cupy.random.standard_normal((p.m, p.k), dtype=cupy.float32).astype(cupy.float16)
        b = cupy.random.standard_normal((p.n, p.k), dtype=cupy.float32).astype(cupy.float16)
        ab = cupy.concatenate([a.ravel(), b.ravel()])
        c = cupy.empty((p.m, p.n), dtype=cupy.float16)
        n16, na16 = c.nbytes // 16, ab.nbytes // 16
        for blocks_per_sm in (4, 16):
            grid = (info.sm_count * blocks_per_sm,)
            calls[f"{p.key} store-only {blocks_per_sm}/SM"] = lambda c=c, n16=n16, g=grid: wonly(g, (256,), (c, n16))
        for bm, bn in ((128, 256), (256, 128)):
            if p.m % bm or p.n % bn:
                continue
            for per_sm, contiguous in ((1, 1), (1, 0), (4, 0)):
                order = "contiguous" if contiguous else "round-robin"
                calls[f"{p.key} tile stores {bm}x{bn} {per_sm}/SM {order}"] = (
                    lambda c=c, p=p, bm=bm, bn=bn, g=(info.sm_count * per_sm,), o=contiguous: tiles(
                        g, (256,), (c, numpy.int32(p.m), numpy.int32(p.n), numpy.int32(bm), numpy.int32(bn),
                                    numpy.int32(o))))
        if p.m % 128 == 0 and p.n % 256 == 0:
            from evo.gpu.tensormap import encode_tensor_map

            for box_w, swizzle in ((64, 128), (128, 0), (256, 0)):
                cmap = encode_tensor_map(c.data.ptr, p.m, p.n, 64, box_w, swizzle)
                for contiguous, hint in ((1, 1), (1, 0), (0, 1)):
                    label = f"{'contiguous' if contiguous else 'round-robin'}{', evict_first' if hint else ''}"
                    calls[f"{p.key} TMA tile stores 128x256 in 64x{box_w} boxes 1/SM {label}"] = (
                        lambda cmap=cmap, p=p, o=contiguous, h=hint, w=box_w: tma_tiles(
                            (info.sm_count,), (64,), (cmap, numpy.int32(p.m), numpy.int32(p.n), numpy.int32(o),
                                                      numpy.int32(h), numpy.int32(w)), shared_mem=65536))
        calls[f"{p.key} read A+B, store C"] = lambda ab=ab, c=c, na=na16, n16=n16: rw(
            (info.sm_count * 16,), (256,), (ab, na, c, n16))
        calls[f"{p.key} cudaMemset C"] = lambda c=c: cupy.cuda.runtime.memsetAsync(
            c.data.ptr, 0, c.nbytes, cupy.cuda.get_current_stream().ptr)
        calls[f"{p.key} cuBLAS"] = lambda a=a, b=b, c=c: gemm(a, b, c)
        sizes[p.key] = c.nbytes
    res = Timer(info.l2_bytes, True, flush_mode="read", seed=1, sms=info.sm_count).measure(calls, args.reps)
    print(f"\nmedian device time of {args.reps} calls, L2 flushed by reads, interleaved\n")
    print("| call | us | C write GB/s |")
    print("|---|---|---|")
    for name, t in res.items():
        nbytes = sizes[name.split()[0]]
        print(f"| {name} | {t.median_us:.2f} | {nbytes / t.median_us / 1e3:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

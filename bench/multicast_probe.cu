// What TMA multicast buys on this GPU, without a GEMM around it (bench/multicast_probe.py drives it).
//
// Every CTA streams k blocks of a 128-row panel of a fp16 matrix (128 rows x 64 columns = 16 KB per block, the
// ring stage of a 128 x 64 GEMM tile's row operand) through an mbarrier ring in shared memory, and does nothing
// else: one producer thread issues the TMA loads, one consumer thread waits for each stage and frees it. The
// kernel's time is the rate at which the memory system delivers bytes into shared memory.
//   probe_single: CTA i reads panel i % groups on its own (box 128 rows).
//   probe_pair:   CTA pairs (clusters of 2) read the same panel, (cluster id) % groups. mc = 1: each CTA loads its
//                 64-row half with .multicast::cluster into both CTAs' ring (half the L2 reads); mc = 0: each loads
//                 the whole panel itself (the pair's second read of a block is an L2 hit). A stage is refilled
//                 only when both consumers have freed it (each arrives on both CTAs' empty barriers), as in
//                 templates/wgmma_sm90 with CLUSTER = 2.
// wrap: a CTA reads k blocks kb % wrap of its panel (wrap < kblocks: its own panel stays in L2 and is re-read).
// With the panels resident in L2 (no flush between launches) the delivered rate is what L2 feeds the SMs; with one
// panel per CTA and the L2 flushed it is DRAM's.
#include <stdint.h>

struct alignas(64) TmaDesc { unsigned char bytes[128]; };

constexpr int STAGES = 8;
constexpr int ROWS = 128;                     // panel rows
constexpr int STAGE_BYTES = ROWS * 64 * 2;    // 16 KB

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred P1;\n"
      "WAIT_LOOP:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@!P1 bra WAIT_LOOP;\n"
      "}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_arrive_rank(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 ra;\n"
      "mapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(rank) : "memory");
}
__device__ __forceinline__ void tma_load(uint32_t dst, const TmaDesc* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tma_load_mc(uint32_t dst, const TmaDesc* map, uint32_t bar, int c0, int c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(mask) : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// CL = 1: probe_single; CL = 2: probe_pair. map: box 128 x 64; half: box 64 x 64 (mc only); both kernel parameters
// passed by value, as the families' tensor maps.
template <int CL>
__device__ __forceinline__ void stream(const TmaDesc* map, const TmaDesc* half, int kblocks, int groups, int mc, int wrap) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ alignas(8) uint64_t full[STAGES], empty[STAGES];
  const uint32_t ring = (smem_u32(smem) + 1023) & ~1023u;
  const uint32_t rank = CL > 1 ? cluster_rank() : 0;
  const int panel = static_cast<int>(blockIdx.x / CL) % groups;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_u32(&full[s]), 1);
      mbar_init(smem_u32(&empty[s]), CL);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (CL > 1) cluster_sync(); else __syncthreads();
  if (threadIdx.x == 0) {  // producer
    int s = 0;
    uint32_t ph = 0;
    for (int kb = 0; kb < kblocks; ++kb) {
      mbar_wait(smem_u32(&empty[s]), ph ^ 1);
      const uint32_t f = smem_u32(&full[s]);
      mbar_arrive_expect_tx(f, STAGE_BYTES);
      const uint32_t dst = ring + s * STAGE_BYTES;
      if (CL > 1 && mc)
        tma_load_mc(dst + rank * (STAGE_BYTES / 2), half, f, (kb % wrap) * 64, panel * ROWS + rank * (ROWS / 2), 3);
      else
        tma_load(dst, map, f, (kb % wrap) * 64, panel * ROWS);
      if (++s == STAGES) { s = 0; ph ^= 1; }
    }
  } else if (threadIdx.x == 32) {  // consumer
    int s = 0;
    uint32_t ph = 0;
    for (int kb = 0; kb < kblocks; ++kb) {
      mbar_wait(smem_u32(&full[s]), ph);
      if (CL > 1) {
        for (int r = 0; r < CL; ++r) mbar_arrive_rank(smem_u32(&empty[s]), r);
      } else {
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(&empty[s])) : "memory");
      }
      if (++s == STAGES) { s = 0; ph ^= 1; }
    }
  }
  if (CL > 1) cluster_sync();  // no CTA leaves while its peer may still arrive on its barriers or multicast into it
}

extern "C" __global__ void __launch_bounds__(64, 1) probe_single(const __grid_constant__ TmaDesc map, int kblocks, int groups, int wrap) {
  stream<1>(&map, &map, kblocks, groups, 0, wrap);
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(64, 1)
    probe_pair(const __grid_constant__ TmaDesc map, const __grid_constant__ TmaDesc half, int kblocks, int groups, int mc,
                                            int wrap) {
  stream<2>(&map, &half, kblocks, groups, mc, wrap);
}

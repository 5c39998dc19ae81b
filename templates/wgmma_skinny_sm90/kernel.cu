/*---evo
family: wgmma_skinny_sm90
archs: [sm_90a]
params: {{PARAMS}}
block: ["128 * CONSUMERS + 32", 1, 1]
grid: ["CLK * MC * NC * G * cdiv(cdiv(N if SWAP_AB else M, BM), MC) * cdiv(cdiv(M if SWAP_AB else N, BN), NC)", 1, 1]
smem: "max(STAGES * (BM + BN) * 128, (BN if SWAP_AB else BM) * ((BM + 4) if SWAP_AB else (BN + 8)) * 4) + (PUSH if CLK > 1 else 0) * BM * BN * 4 + 1024"
workspace: "(round_up(MC * cdiv(cdiv(N if SWAP_AB else M, BM), MC) * NC * cdiv(cdiv(M if SWAP_AB else N, BN), NC) * CLK * 4, 256) + MC * cdiv(cdiv(N if SWAP_AB else M, BM), MC) * NC * cdiv(cdiv(M if SWAP_AB else N, BN), NC) * G * BM * BN * 4) if G > 1 else 0"
requires: "K % 8 == 0 and cdiv(cdiv(N if SWAP_AB else M, BM), MC) * cdiv(cdiv(M if SWAP_AB else N, BN), NC) < 4194304"   # tile groups < 2^22: the prologue's float division (div_small)
tensor_maps:
  - {operand: A, box: ["(BN // MC) if SWAP_AB else (BM // NC)", 64], swizzle: 128}
  - {operand: B, box: ["(BM // NC) if SWAP_AB else (BN // MC)", 64], swizzle: 128}
---*/
// Hopper (sm_90a) HGEMM for skinny / small-output shapes: C[M,N] = A[M,K] * B[N,K]^T,
// fp16 in/out, fp32 accumulation.
//
// Work decomposition. Kernel view: rows come from the "row operand" (A, or B with SWAP_AB),
// columns from the "column operand" (B, or A with SWAP_AB: a small M then sits in wgmma's N).
// One thread-block cluster of CS = CLK * MC * NC CTAs (compile-time __cluster_dims__(CS,1,1); CLK = 16 is
// a non-portable cluster of 16 K ranks, which Hopper schedules on a GPC with 16 free SMs):
//   rank = (nc * MC + nr) * CLK + kr; the MC * NC CTAs with the same kr own MC consecutive row
//   tiles x NC consecutive column tiles (BM x BN each) over the same K range, the CLK CTAs with
//   the same (nc, nr) own one tile and split its K range CLK ways. On top, G clusters split K
//   again ("global" split). K split index sidx = g * CLK + kr of S = G * CLK, balanced: k blocks
//   [sidx*KB/S, (sidx+1)*KB/S).
// Main loop (per CTA): 1 producer warp (last warp) issues TMA loads (128B swizzle, BK = 64) of
//   the row tile (BM x 64) and the column tile (BN x 64) into a STAGES-deep smem ring; with
//   MC > 1 each of the MC CTAs on one column tile loads BN/MC rows of the column tile and
//   multicasts them to those MC CTAs (the column operand is shared by the group's row tiles);
//   with NC > 1 each of the NC CTAs on one row tile loads BM/NC rows of the row tile and
//   multicasts them to those NC CTAs (the row operand is shared by the group's column tiles).
//   CONSUMERS warpgroups each own BM/CONSUMERS rows and issue wgmma.m64nBNk16 from smem.
//   full[s]: producer arms it with the stage bytes, TMA completes it (all pieces, ours and the peers').
//   empty[s]: every consumer warp of every CTA this CTA multicasts into (and that multicasts into
//   it: the same MC + NC - 1 CTAs) arrives (remote arrive).
// Split-K reduce, on chip: each CTA stages its fp32 accumulator tile in its own smem (in C
//   orientation, padded rows), cluster barrier, then CTA kr sums C-row slice kr of the tile
//   over the CLK CTAs of its K group through distributed shared memory (ld.shared::cluster),
//   in fixed order 0..CLK-1. G == 1: it writes C (coalesced, predicated). G > 1: it writes
//   the fp32 slice to `workspace`, takes a ticket on the (tile, kr) counter; the last of the
//   G arrivals sums the G slices in order g = 0..G-1, writes C and resets the counter to 0.
//   Deterministic: every sum has a fixed order.
//   PUSH: the same sums, without the cluster barrier before them: each CTA, once its partial tile is staged,
//   sends C-row slice j of it to CTA j of its K group (st.async into j's receive slots, completing j's
//   `recv_bar` by bytes), then waits for its own CLK slots to land and sums them locally in order 0..CLK-1.
//   The slowest K rank no longer holds every CTA at a barrier before the first remote read, and the remote
//   traffic is one-way. (The receive barriers are initialised before a cluster arrive at the kernel's start,
//   whose wait comes only after the main loop.)
#include <cuda_fp16.h>
#include <stdint.h>

struct alignas(64) TmaDesc { unsigned char bytes[128]; };

namespace evo_skinny {

constexpr int BM = {{BM}};            // tile rows (kernel view), CONSUMERS * 64 * MT
constexpr int BN = {{BN}};            // tile cols = wgmma N
constexpr int BK = 64;                // 64 fp16 = one 128-byte swizzle row
constexpr int STAGES = {{STAGES}};
constexpr int CONSUMERS = {{CONSUMERS}};
constexpr int CLK = {{CLK}};          // CTAs of a cluster that split one tile's K (DSMEM reduce)
constexpr int MC = {{MC}};            // CTAs of a cluster on consecutive row tiles (column operand multicast)
constexpr int NC = {{NC}};            // CTAs of a cluster on consecutive column tiles (row operand multicast)
constexpr int G = {{G}};              // global K splits (clusters) on top of CLK
constexpr int SWAP_AB = {{SWAP_AB}};
constexpr int KI = {{KI}};            // 1: split s takes k blocks s, s+S, s+2S, ... (all splits sweep K together)
constexpr int PUSH = CLK > 1 ? {{PUSH}} : 0;  // 1: split-K slices pushed to their owners (st.async + mbarrier), no barrier before the reduce

constexpr int CS = CLK * MC * NC;     // cluster size
constexpr int PEERS = MC + NC - 1;    // CTAs that write into this CTA's ring (itself included)
constexpr int THREADS = 128 * CONSUMERS + 32;
constexpr int PRODUCER_WARP = 4 * CONSUMERS;
constexpr int WM = BM / CONSUMERS;
constexpr int MT = WM / 64;
constexpr int A_STAGE_BYTES = BM * BK * 2;       // row-operand tile
constexpr int B_STAGE_BYTES = BN * BK * 2;       // column-operand tile
constexpr int B_PIECE_ROWS = BN / MC;            // rows of the column tile this CTA loads
constexpr int A_PIECE_ROWS = BM / NC;            // rows of the row tile this CTA loads
constexpr int STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;
// Reduce staging tile, in C orientation: R C-rows x CC C-cols of fp32, row pitch P floats.
constexpr int R = SWAP_AB ? BN : BM;
constexpr int CC = SWAP_AB ? BM : BN;
constexpr int P = SWAP_AB ? BM + 4 : BN + 8;     // conflict-free fragment stores (scalar / float2)
constexpr int RS = R / CLK;                      // C-rows of the slice each K-rank reduces
constexpr int ITEMS = RS * CC / 4;               // float4s of one slice
constexpr int U = (16 / CLK) < 1 ? 1 : 16 / CLK; // float4 items per thread per round (loads in flight)
constexpr int STAGED = STAGES * STAGE_BYTES > R * P * 4 ? STAGES * STAGE_BYTES : R * P * 4;  // ring / reduce tile
constexpr int RECV_OFF = (STAGED + 15) / 16 * 16;     // PUSH: CLK receive slots of RS x CC fp32 after them

static_assert(WM % 64 == 0, "each consumer owns a multiple of 64 rows");
static_assert(BN % 8 == 0 && BN >= 16 && BN <= 256, "wgmma N");
static_assert(MT * BN <= 256, "at most 128 fp32 accumulators per thread");
static_assert(CS >= 1 && (CS <= 8 || (CS == 16 && CLK == 16)), "portable cluster size, or 16 K ranks (non-portable: the launcher opts in)");
static_assert(B_PIECE_ROWS % 8 == 0 && A_PIECE_ROWS % 8 == 0, "multicast pieces are whole 1024-byte swizzle atoms");
static_assert(R % CLK == 0, "the tile's C rows split evenly over the K ranks");
static_assert(STAGE_BYTES % 1024 == 0, "128B-swizzled tiles need 1024-byte alignment");
static_assert(CC % 4 == 0 && P % 4 == 0, "16-byte slices");

__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }
// a / b for 0 <= a < 2^22 and 0 < b (`requires` keeps the tile-group count below 2^22) through a float reciprocal,
// corrected by the remainder's sign: the integer division's sequence delays the producer's first TMA load (the same
// helper as wgmma_sm90's raster, docs/perf-hopper.md Run 35)
__device__ __forceinline__ int div_small(int a, int b) {
  const int q = static_cast<int>(__fdividef(static_cast<float>(a), static_cast<float>(b)));
  const int r = a - q * b;
  return q + (r >= b) - (r < 0);
}

// ---------------------------------------------------------------- shared memory / mbarrier / cluster
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Arrive on the barrier at the same offset in CTA `rank` of the cluster (rank may be this CTA). The default
// (.release, .cta) form, as CUTLASS's consumer release: the warp's wgmma reads of the stage are complete
// (wgmma.wait_group) before it arrives, and nothing else is published.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 ra;\n"
      "mapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(rank) : "memory");
}
__device__ __forceinline__ void mbar_arrive_local(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred P1;\n"
      "WAIT_LOOP:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@!P1 bra WAIT_LOOP;\n"
      "}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 128) : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
// Arrive without release: for a sync that publishes no data of its own (mbarrier init is
// released by fence.mbarrier_init.release.cluster).
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
__device__ __forceinline__ uint32_t map_rank(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// 16 bytes into a peer's shared memory; the bytes complete the peer's mbarrier `bar` (both cluster addresses).
__device__ __forceinline__ void st_async_v4(uint32_t addr, float4 v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(addr),
               "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)), "r"(__float_as_uint(v.w)),
               "r"(bar)
               : "memory");
}
__device__ __forceinline__ float4 ld_dsmem(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
  return v;
}

// ---------------------------------------------------------------- TMA
__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaDesc* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
// Same box, written at offset dst of every CTA in `mask` (and completing their barriers at bar).
__device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const TmaDesc* map, uint32_t bar, int c0, int c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

// ---------------------------------------------------------------- wgmma
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(16 >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// Global split-K ticket: one gpu-scope acq_rel atomic releases this CTA's slice (ordered before it
// by the CTA barrier; release is cumulative) and acquires the earlier arrivals' (no SC fence).
__device__ __forceinline__ int ticket_acq_rel(int* p) {
  int old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
  return old;
}
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// D[64 x N] (+)= A[64 x 16] * B[N x 16]^T; scale_d == 0 overwrites D.
template <int N>
__device__ __forceinline__ void wgmma_m64k16(float* d, uint64_t da, uint64_t db, int scale_d);
template <> __device__ __forceinline__ void wgmma_m64k16<16>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<32>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<48>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %26, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, %24, %25, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<64>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<96>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<128>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<192>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<256>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
               : "l"(da), "l"(db), "r"(scale_d));
}

// ---------------------------------------------------------------- output
// Four consecutive C elements (row, col..col+3) from fp32, predicated on the problem bounds.
__device__ __forceinline__ void store4(__half* C, int M, int N, int row, int col, float4 v) {
  if (row >= M || col >= N) return;
  __half* dst = C + static_cast<size_t>(row) * N + col;
  if ((N & 3) == 0 && col + 4 <= N) {
    __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<uint32_t*>(&lo);
    u.y = *reinterpret_cast<uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(dst) = u;
  } else {
    const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (col + i < N) dst[i] = __float2half_rn(e[i]);
  }
}
__device__ __forceinline__ void add4(float4& a, const float4 b) { a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w; }

}  // namespace evo_skinny
using namespace evo_skinny;

extern "C" __global__ void __cluster_dims__(CS, 1, 1) __launch_bounds__(THREADS, 1)
    evo_gemm(const __half* A, const __half* B, __half* C, int M, int N, int K, float* workspace,
             const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB) {
  const int Mk = SWAP_AB ? N : M;  // kernel rows
  const int Nk = SWAP_AB ? M : N;  // kernel cols
  const TmaDesc* map_rows = SWAP_AB ? &tmB : &tmA;
  const TmaDesc* map_cols = SWAP_AB ? &tmA : &tmB;

  extern __shared__ uint8_t smem_raw[];
  __shared__ alignas(8) uint64_t full_bar[STAGES];
  __shared__ alignas(8) uint64_t empty_bar[STAGES];
  __shared__ alignas(8) uint64_t recv_bar;  // PUSH: this CTA's CLK receive slots have landed
  __shared__ int s_last;
  const uint32_t base_u32 = smem_u32(smem_raw);
  const uint32_t tiles = (base_u32 + 1023u) & ~1023u;  // ring (and, after the main loop, the reduce tile)
  float* red = reinterpret_cast<float*>(smem_raw + (tiles - base_u32));

  // ---- which tile / K range
  const uint32_t rank = CS > 1 ? cluster_rank() : 0;
  const int kr = rank % CLK, nr = (rank / CLK) % MC, nc = rank / (CLK * MC);
  const int grp = rank / CLK;                   // this tile's CLK CTAs are ranks grp * CLK + 0..CLK-1
  const int tiles_m = cdiv(Mk, BM), tiles_n = cdiv(Nk, BN);
  const int tmg_count = cdiv(tiles_m, MC), tng_count = cdiv(tiles_n, NC);
  int cid = blockIdx.x / CS;
  const int g = cid % G;
  cid /= G;
  const int cq = div_small(cid, tmg_count);
  const int tmg = cid - cq * tmg_count, tn = cq * NC + nc;
  const int tm = tmg * MC + nr;
  const int tile = tm * (NC * tng_count) + tn;  // over padded tiles (MC * tmg_count x NC * tng_count)
  const int m0 = tm * BM, n0 = tn * BN;         // kernel-view origin
  const int kblocks = cdiv(K, BK);
  const int sidx = g * CLK + kr;
  constexpr int S = G * CLK;
  // k block of step i: kb0 + i * kstep. Contiguous: balanced ranges; interleaved (KI): stride S.
  const int kb0 = KI ? sidx : static_cast<int>(static_cast<long long>(sidx) * kblocks / S);
  const int kstep = KI ? S : 1;
  const int nk = KI ? (sidx < kblocks ? (kblocks - 1 - sidx) / S + 1 : 0)
                    : static_cast<int>(static_cast<long long>(sidx + 1) * kblocks / S) - kb0;
  // (nk is identical for the CTAs of a cluster with the same kr, so for every multicast group: they share sidx)

  // the warp index through a shuffle from lane 0: warp-uniform as far as the compiler knows, so the consumers' ring
  // addresses and wgmma descriptors derived from it stay in uniform registers
  const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32), 0), lane = threadIdx.x % 32;
  uint16_t mask = 0, row_mask = 0;  // the CTAs sharing our column tile / our row tile (same K rank)
#pragma unroll
  for (int j = 0; j < MC; ++j) mask |= static_cast<uint16_t>(1u << ((nc * MC + j) * CLK + kr));
#pragma unroll
  for (int j = 0; j < NC; ++j) row_mask |= static_cast<uint16_t>(1u << ((j * MC + nr) * CLK + kr));
  int pi = 0, ps = 0;  // producer (lane 0 of the producer warp): next step, its ring slot and phase
  uint32_t pphase = 0;
  // Issue step pi's loads (waiting for its slot to be free); false once every step is issued.
  auto produce_next = [&]() -> bool {
    if (pi >= nk) return false;
    const int kb = kb0 + pi * kstep;
    mbar_wait(smem_u32(&empty_bar[ps]), pphase ^ 1);  // first pass: fresh barrier, returns at once
    const uint32_t full = smem_u32(&full_bar[ps]);
    mbar_arrive_expect_tx(full, STAGE_BYTES);          // OOB parts of a box count too (zero-filled)
    const uint32_t a_dst = tiles + ps * STAGE_BYTES;
    if constexpr (NC > 1)
      tma_load_2d_mc(a_dst + nc * A_PIECE_ROWS * 128, map_rows, full, kb * BK, m0 + nc * A_PIECE_ROWS, row_mask);
    else
      tma_load_2d(a_dst, map_rows, full, kb * BK, m0);
    if constexpr (MC > 1)
      tma_load_2d_mc(a_dst + A_STAGE_BYTES + nr * B_PIECE_ROWS * 128, map_cols, full, kb * BK, n0 + nr * B_PIECE_ROWS, mask);
    else
      tma_load_2d(a_dst + A_STAGE_BYTES, map_cols, full, kb * BK, n0);
    ++pi;
    if (++ps == STAGES) { ps = 0; pphase ^= 1; }
    return true;
  };
  if (warp == PRODUCER_WARP && lane == 0) {
    tma_prefetch_desc(map_rows);  // the descriptors' fetch overlaps the barrier set-up
    tma_prefetch_desc(map_cols);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_u32(&full_bar[s]), 1);
      mbar_init(smem_u32(&empty_bar[s]), CONSUMERS * 4 * PEERS);
    }
    if constexpr (PUSH) {
      mbar_init(smem_u32(&recv_bar), 1);
      mbar_arrive_expect_tx(smem_u32(&recv_bar), CLK * RS * CC * 4);  // armed before any peer can send
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    // Without multicast the first k block's loads leave before the block-wide barrier, within the kernel's
    // first instructions (this thread initialised the barriers; every slot is free). Only one: issuing the
    // whole ring here would hold the consumers at the barrier while the TMA unit takes the requests.
    if constexpr (PEERS == 1) produce_next();
  }
  if constexpr (PEERS > 1) {  // peers arrive on / multicast into our barriers: they must be initialised
    cluster_arrive_relaxed();
    cluster_wait();
  } else {
    __syncthreads();
    // PUSH: peers send into our receive slots; the arrive publishes recv_bar's initialisation, its wait
    // comes after the main loop (before our first send), so the cluster's start is not serialised here.
    if constexpr (PUSH) cluster_arrive_relaxed();
  }

  if (warp == PRODUCER_WARP) {
    // ------------------------------------------------------------ producer warp
    if (lane == 0)
      while (produce_next()) {
      }
    __syncwarp();
  } else {
    // ------------------------------------------------------------ consumer warpgroups
    const int c = warp / 4, tid = threadIdx.x % 128, cw = tid / 32;
    float acc[MT][BN / 2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[mt][i] = 0.f;
    int s = 0, prev = 0;
    uint32_t phase = 0;
    for (int i = 0; i < nk; ++i) {
      mbar_wait(smem_u32(&full_bar[s]), phase);
      const uint32_t a_base = tiles + s * STAGE_BYTES + c * WM * 128;
      const uint32_t b_base = tiles + s * STAGE_BYTES + A_STAGE_BYTES;
      wgmma_fence();
      // the stage's descriptors once; a k slice (+32 B) or a 64-row block (+8 KB) adds its offset / 16 to the
      // start-address field (smem addresses stay below 2^18, so the 14-bit field never carries)
      const uint64_t da0 = desc_sw128(a_base), db0 = desc_sw128(b_base);
#pragma unroll
      for (int k = 0; k < BK / 16; ++k) {
        const uint64_t db = db0 + static_cast<uint64_t>(k * 32 / 16);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          wgmma_m64k16<BN>(acc[mt], da0 + static_cast<uint64_t>((mt * 64 * 128 + k * 32) / 16), db, (i | k) != 0);
      }
      wgmma_commit();
      if (i > 0) {  // one wgmma group in flight; the previous stage is free now
        wgmma_wait<1>();
        if (lane == 0) {
          if constexpr (PEERS > 1) {
#pragma unroll
            for (int j = 0; j < MC; ++j) mbar_arrive_cluster(smem_u32(&empty_bar[prev]), (nc * MC + j) * CLK + kr);
#pragma unroll
            for (int j = 0; j < NC; ++j)
              if (j != nc) mbar_arrive_cluster(smem_u32(&empty_bar[prev]), (j * MC + nr) * CLK + kr);
          } else {
            mbar_arrive_local(smem_u32(&empty_bar[prev]));
          }
        }
      }
      prev = s;
      if (++s == STAGES) { s = 0; phase ^= 1; }
    }
    wgmma_wait<0>();
    // (no release of the last stage is needed: every CTA of the group loads exactly nk stages)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) reg_fence(acc[mt][i]);
    consumer_sync();  // every consumer is done reading the ring: it becomes the reduce tile
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    // Fragment (row r, cols cc, cc+1) of each m64 slice -> red, in C orientation.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = c * WM + mt * 64 + cw * 16 + lane / 4 + 8 * h;
          const int cc = 8 * j + 2 * (lane % 4);
          const float v0 = acc[mt][4 * j + 2 * h], v1 = acc[mt][4 * j + 2 * h + 1];
          if (SWAP_AB) {
            red[cc * P + r] = v0;
            red[(cc + 1) * P + r] = v1;
          } else {
            *reinterpret_cast<float2*>(&red[r * P + cc]) = make_float2(v0, v1);
          }
        }
  }

  // ---- on-chip split-K reduce over the CLK CTAs of this tile (all threads of the CTA)
  const uint32_t red_u32 = tiles;
  const uint32_t recv_u32 = tiles + RECV_OFF;
  if constexpr (PUSH) {
    __syncthreads();  // the staged tile is complete
    if constexpr (PEERS == 1) cluster_wait();  // every peer's recv_bar is initialised and armed
    // Send: float4 item q of the staged tile (C-row lr, column 4 * c4) goes to owner j = lr / RS, slot kr.
#pragma unroll 1
    for (int q = threadIdx.x; q < R * CC / 4; q += THREADS) {
      const int lr = q / (CC / 4), c4 = q % (CC / 4), j = lr / RS;
      const float4 v = *reinterpret_cast<const float4*>(&red[lr * P + 4 * c4]);
      const uint32_t owner = grp * CLK + j;
      const uint32_t dst = recv_u32 + static_cast<uint32_t>(((kr * RS + lr % RS) * CC + 4 * c4) * 4);
      st_async_v4(map_rank(dst, owner), v, map_rank(smem_u32(&recv_bar), owner));
    }
    mbar_wait(smem_u32(&recv_bar), 0);  // our CLK slots (ours included) have landed
    // Every CTA's arrival means its slots have landed, so once all have arrived no send is in flight and
    // no CTA writes another's memory: the wait before exit. Relaxed: it publishes nothing (the C stores
    // after it need no ordering), and arriving before the sums keeps the wait off the critical path.
    if constexpr (PEERS == 1) cluster_arrive_relaxed();
  } else if constexpr (CLK > 1) {
    cluster_arrive();
    cluster_wait();
  } else {
    __syncthreads();
  }
  // C-space origin of the tile and this CTA's slice of C rows.
  const int crow0 = (SWAP_AB ? n0 : m0) + kr * RS, ccol0 = SWAP_AB ? m0 : n0;
  uint32_t peer[CLK];
#pragma unroll
  for (int j = 0; j < CLK; ++j) peer[j] = CLK > 1 ? map_rank(red_u32, grp * CLK + j) : red_u32;
  constexpr int ROUNDS = cdiv(ITEMS, THREADS * U);
  float* parts = nullptr;
  int* counters = nullptr;
  if constexpr (G > 1) {
    const int tiles_total = MC * tmg_count * NC * tng_count;
    counters = reinterpret_cast<int*>(workspace);
    parts = workspace + ((tiles_total * CLK * 4 + 255) / 256) * 64 +
            (static_cast<size_t>(tile * CLK + kr) * G) * (RS * CC);
  }
#pragma unroll 1
  for (int rd = 0; rd < ROUNDS; ++rd) {
    float4 v[U][CLK];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int idx = (rd * U + u) * THREADS + threadIdx.x;
      if (idx < ITEMS) {
        const int lr = kr * RS + idx / (CC / 4), c4 = idx % (CC / 4);
        const uint32_t off = static_cast<uint32_t>((lr * P + 4 * c4) * 4);
#pragma unroll
        for (int j = 0; j < CLK; ++j) {
          if (PUSH)
            v[u][j] = *reinterpret_cast<const float4*>(smem_raw + (recv_u32 - base_u32) + ((j * RS * CC) + idx * 4) * 4);
          else if (CLK > 1)
            v[u][j] = ld_dsmem(peer[j] + off);
          else
            v[u][j] = *reinterpret_cast<const float4*>(&red[lr * P + 4 * c4]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int idx = (rd * U + u) * THREADS + threadIdx.x;
      if (idx < ITEMS) {
        float4 sum = v[u][0];
#pragma unroll
        for (int j = 1; j < CLK; ++j) add4(sum, v[u][j]);
        if constexpr (G == 1) {
          store4(C, M, N, crow0 + idx / (CC / 4), ccol0 + 4 * (idx % (CC / 4)), sum);
        } else {
          __stcg(reinterpret_cast<float4*>(parts + static_cast<size_t>(g) * (RS * CC)) + idx, sum);
        }
      }
    }
  }
  // Done reading the peers' smem. (With MC > 1 too: a peer's consumers may still arrive on our
  // empty barriers, so no CTA of a cluster exits before all have passed this point. PUSH: every CTA has
  // received its slots, so our sends are complete and our own slots are no longer written.)
  if constexpr (CS > 1 && !(PUSH && PEERS == 1)) cluster_arrive();

  if constexpr (G > 1) {
    // ---- global split: the last of the G clusters to arrive sums the G slices in order.
    __syncthreads();
    if (threadIdx.x == 0) {
      const int arrived = ticket_acq_rel(&counters[tile * CLK + kr]);
      s_last = (arrived == G - 1);
      if (s_last) counters[tile * CLK + kr] = 0;  // every split has arrived: reset for the next launch
    }
    __syncthreads();
    if (s_last) {
      const float4* src = reinterpret_cast<const float4*>(parts);
      constexpr int NI = cdiv(ITEMS, THREADS);           // items per thread
      constexpr int IU = NI >= 4 ? 4 : NI >= 2 ? 2 : 1;  // items per round (power of two)
      constexpr int GU0 = 16 / IU;
      constexpr int GU = G < GU0 ? G : GU0;              // splits loaded at once (G and GU are powers of two)
#pragma unroll 1
      for (int i0 = 0; i0 < NI; i0 += IU) {
        float4 sum[IU];
#pragma unroll
        for (int u = 0; u < IU; ++u) sum[u] = make_float4(0.f, 0.f, 0.f, 0.f);  // 0 + x == x: order g = 0..G-1
#pragma unroll 1
        for (int g0 = 0; g0 < G; g0 += GU) {
          float4 w[IU][GU];
#pragma unroll
          for (int u = 0; u < IU; ++u) {
            const int idx = (i0 + u) * THREADS + threadIdx.x;
#pragma unroll
            for (int q = 0; q < GU; ++q)
              if (idx < ITEMS) w[u][q] = __ldcg(src + static_cast<size_t>(g0 + q) * ITEMS + idx);
          }
#pragma unroll
          for (int u = 0; u < IU; ++u)
#pragma unroll
            for (int q = 0; q < GU; ++q) add4(sum[u], w[u][q]);
        }
#pragma unroll
        for (int u = 0; u < IU; ++u) {
          const int idx = (i0 + u) * THREADS + threadIdx.x;
          if (idx < ITEMS) store4(C, M, N, crow0 + idx / (CC / 4), ccol0 + 4 * (idx % (CC / 4)), sum[u]);
        }
      }
    }
  }
  if constexpr (CS > 1) cluster_wait();  // peers are done with our smem and barriers before we exit
}

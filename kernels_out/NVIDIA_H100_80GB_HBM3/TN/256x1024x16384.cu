/*---evo
family: wgmma_sm90
archs: [sm_90a]
params: {BM: 128, BN: 64, CLUSTER: 1, CONSUMERS: 2, EPI: 0, EPI_HINT: 0, GROUP: 16, PANEL: 0,
  PERSISTENT: 1, PINGPONG: 0, SPLIT_CLUSTER: 0, SPLIT_K: 4, SPLIT_MAJOR: 1, SPLIT_OWNER: 1,
  SPLIT_RS: 0, STAGES: 8, SWAP_AB: 0}
block: ["128 * (CONSUMERS + 1)", 1, 1]
grid: ["min(cdiv(N if SWAP_AB else M, BM) * round_up(cdiv(M if SWAP_AB else N, BN), CLUSTER) * SPLIT_K, NUM_SMS // CLUSTER * CLUSTER) if PERSISTENT else round_up(cdiv(cdiv(N if SWAP_AB else M, BM) * round_up(cdiv(M if SWAP_AB else N, BN), CLUSTER) * SPLIT_K, 1 + PINGPONG), CLUSTER)", 1, 1]
smem: "STAGES * ((0 if PANEL else BM) + BN) * 128 + 1024 + CONSUMERS * (EPI * BN * 128 if EPI else 9216) + PANEL * BM * cdiv(K, 64) * 128 + SPLIT_CLUSTER * BM * BN * 4"
workspace: "(round_up(cdiv(N if SWAP_AB else M, BM) * round_up(cdiv(M if SWAP_AB else N, BN), CLUSTER) * 4 * (1 + SPLIT_RS), 256) + cdiv(N if SWAP_AB else M, BM) * round_up(cdiv(M if SWAP_AB else N, BN), CLUSTER) * SPLIT_K * BM * BN * 4) if SPLIT_K > 1 and not SPLIT_CLUSTER else 0"
requires: "K % 8 == 0 and (EPI == 0 or N % 8 == 0) and (PANEL == 0 or STAGES * BN * 128 + 1024 + CONSUMERS * (EPI * BN * 128 if EPI else 9216) + BM * cdiv(K, 64) * 128 + 512 <= 232448) and (SPLIT_RS == 0 or cdiv(N if SWAP_AB else M, BM) * cdiv(M if SWAP_AB else N, BN) * SPLIT_K <= NUM_SMS)"   # EPI > 0: a TMA map of C (16-byte row stride); PANEL: the BM x K panel fits; SPLIT_RS: one wave (a tile's splits wait for each other)
tensor_maps:
  - {operand: A, box: ["BN if SWAP_AB else BM // CLUSTER", 64], swizzle: 128}
  - {operand: B, box: ["BM // CLUSTER if SWAP_AB else BN", 64], swizzle: 128}
  - {operand: C, box: [64, 64], swizzle: 128, when: "EPI > 0 and BN % 64 == 0"}
  - {operand: C, box: [64, 32], swizzle: 64, when: "EPI > 0 and BN % 64 != 0 and BN % 32 == 0"}
  - {operand: C, box: [64, 16], swizzle: 32, when: "EPI > 0 and BN % 32 != 0"}
cooperative: true   # wgmma_sm90's: STREAMK or SPLIT_RS or (SPLIT_OWNER and PERSISTENT)
---*/
// Hopper (sm_90a) HGEMM: C[M,N] = A[M,K] * B[N,K]^T, fp16 in/out, fp32 accumulation.
//
// Pipeline (warp specialized, one CTA per SM when PERSISTENT):
//   warpgroup 0      = producer: one thread issues TMA loads (128-byte swizzle, BK = 64 fp16 = 128 B)
//                      of the A and B tiles into a STAGES-deep shared-memory ring.
//   warpgroups 1..C  = consumers: each owns BM/C rows of the BM x BN tile and issues
//                      wgmma.m64nBNk16 (both operands from shared memory) per 16-wide k slice.
//   PINGPONG (C = 2): each consumer owns whole tiles instead, alternating: consumer 0 takes the
//                      CTA's units 0, 2, 4, ..., consumer 1 units 1, 3, 5, ...  The ring is filled in
//                      unit order, so one consumer's epilogue runs while the other one's wgmmas do.
//                      The two mainloops strictly alternate (order mbarriers: a consumer starts its
//                      k loop only after the other has issued its last wgmma of the previous unit), so a
//                      consumer never waits on a stage more than one ring lap ahead: parity waits only
//                      tell adjacent phases apart.
//   full[s]  mbarrier: producer arms it with the stage's byte count, TMA completes it.
//   empty[s] mbarrier: one thread of every consumer warpgroup arrives once its wgmmas no longer read stage s (a
//                      wgmma group completes for the whole warpgroup, so one thread's wait covers its four warps).
//   Both are waited by parity: the i-th use of stage s waits for phase (i / STAGES) & 1.
// Work units: tiles (grouped raster along M by GROUP for L2 reuse) x SPLIT_K slices of K (a tile's splits adjacent,
//   or SPLIT_MAJOR: every tile's split 0 first, then split 1, ...).
// SPLIT_K > 1: each unit writes an fp32 partial tile to `workspace`, bumps a per-tile counter,
//   and the last unit to arrive sums the partials in split order 0..SPLIT_K-1 (deterministic),
//   writes C and resets the counter to 0.
// SPLIT_OWNER (SPLIT_K > 1, workspace reduce): split SPLIT_K-1 of each tile is its reducer: it keeps its partial in
//   registers, waits (acquire loads) for the other splits' release arrivals, adds their partials in order 0..SPLIT_K-2
//   onto its own (deterministic) and writes C: no partial of its own written and read back, and its wait overlaps the
//   others' writes. Deadlock-free because a split waits only for units numbered below its own: in a persistent grid
//   every CTA is resident and takes its units in increasing order; one unit per CTA relies on CTAs being dispatched in
//   blockIdx order, as CUTLASS's serial split-K does. (Pairs take units in the GPC-spread order: 8 stripes of the raster
//   launched side by side, each in increasing order, so only a tile that straddles two stripes has its reducer launched
//   ahead of its other splits: at most 7 CTAs wait early, far fewer than fit on the GPU.)
// SPLIT_CLUSTER (SPLIT_K > 1, one unit per CTA): the SPLIT_K CTAs of a tile form one thread-block cluster (rank =
//   split) and sum their partials through distributed shared memory instead: the tile's columns are dealt out in
//   SPLIT_K slices of BN / SPLIT_K; each CTA sends every other slice of its accumulators into the owner's receive
//   buffer (st.async from registers, fragment order, so owner and sender threads hold the same elements; the bytes
//   complete the owner's `recv_bar`, armed at init), waits for its own slots to land (no cluster barrier: the slowest
//   CTA no longer holds everyone, and nothing waits for remote store acknowledgements), sums split 0..SPLIT_K-1 in
//   order (deterministic; its own partial from registers) and writes its slice of C. The cluster barrier before exit
//   arrives (relaxed) right after the receive wait: once every CTA has arrived no send is in flight. No workspace,
//   no ticket, no serial reduction by one CTA: each CTA reads 1/SPLIT_K of the partials, all from its own smem.
// SWAP_AB: computes C^T = B * A^T (the kernel's rows run over N, its columns over M), so a
//   small M sits in wgmma's N dimension; the epilogue stores transposed.
// PANEL (short K, persistent, no split-K): each CTA takes a contiguous range of units, row block by row
//   block (column tiles fastest), and keeps the row operand's whole-K panel (BM x K) in shared memory
//   across the units of one row block: only the column tiles stream through the ring (per 256x128 tile
//   at K = 128: 32 KB loaded instead of 96 KB), so the ring holds several units' loads ahead.
//   panel_full: the producer arms it with the panel's bytes, TMA completes it; panel_empty: every
//   consumer warp arrives after its last wgmma of the row block; both waited by parity (one phase per panel).
// Epilogue, EPI = 0: each consumer stages 64 x EPI_CW chunks in smem and writes them with ordinary
//   16-byte stores, then goes on to its next unit.
// EPI > 0 (TMA store; SPLIT_K = 1, SWAP_AB = 0): each consumer owns EPI staging buffers of
//   64 x BN fp16 (boxes of 64 x 64, 64 x 32 or 64 x 16 columns, swizzled like the C tensor map: conflict-free fragment
//   writes). Per round of min(MT, EPI) 64-row slices it writes the fragments (stmatrix), fences them to the
//   async proxy, syncs its warpgroup, and one thread issues the TMA stores (cp.async.bulk.tensor ... bulk_group)
//   and commits them; it waits (cp.async.bulk.wait_group.read) only before it writes into a buffer again, so the
//   stores of unit i drain while the consumer runs the wgmmas of unit i+1. With EPI = 2 * min(MT, 2) buffers
//   (MT = 1: 2, MT = 2: 4) the rounds of two consecutive units use different buffers: unit i+1's epilogue waits
//   for unit i-1's stores, not unit i's (PANEL leaves the smem for it). Stores past M or N are
//   clipped by the TMA unit. The ring's stages are released when the wgmmas end, before the epilogue,
//   and the producer runs ahead across units, so the next unit's loads are in flight during it.
// CLUSTER = 2: CTA pairs (thread-block clusters of 2) take the two column tiles of one tile row, so both need the
//   same row tile (A's; with SWAP_AB B's, the pairs then lying along M as in cuBLASLt's 1x2 split-K kernels): each
//   CTA's producer loads half of its rows and multicasts them into both CTAs' ring (TMA .multicast::cluster): L2
//   reads of the row operand per CTA are halved. A stage is refilled only when the consumers of both
//   CTAs have released it (they arrive on both CTAs' empty barriers). Units come in pairs (the column tiles are
//   padded to an even count; a tile past N is computed on zero-filled operands and its stores are dropped).
//   The pairs take their units in a GPC-spread order (cluster_spread below).
//   EPI_HINT = 1: the stores carry an L2 evict_first policy, so C streaming through L2 does not push out A and B.
#include <cuda_fp16.h>
#include <stdint.h>

struct alignas(64) TmaDesc { unsigned char bytes[128]; };

namespace evo_sm90 {

constexpr int BM = 128;                 // tile rows (kernel view)
constexpr int BN = 64;                 // tile cols = wgmma N
constexpr int BK = 64;                     // 64 fp16 = one 128-byte swizzle row
constexpr int STAGES = 8;
constexpr int CONSUMERS = 2;
constexpr int PERSISTENT = 1;
constexpr int GROUP = 16;
constexpr int SPLIT_K = 4;
constexpr int SWAP_AB = 0;
constexpr int PINGPONG = 0;
constexpr int EPI = 0;                 // TMA-store staging buffers per consumer (0: ordinary stores)
constexpr int CLUSTER = 1;         // CTAs per cluster sharing the A tile through TMA multicast
constexpr int EPI_HINT = 0;       // EPI > 0: TMA stores of C carry an L2 evict_first policy (A, B stay in L2)
constexpr int PANEL = 0;             // 1: the row operand's BM x K panel stays in smem across a row block's units
constexpr int SPLIT_CLUSTER = 0;  // 1: a tile's K splits are one cluster, reduced in distributed smem
constexpr int SPLIT_RS = 0;      // 1: a tile's K splits wait for each other and each sums its column slice
constexpr int SPLIT_OWNER = 1;  // 1: split SPLIT_K-1 reduces, its partial kept in registers
constexpr int SPLIT_MAJOR = 1;  // 1: units numbered split-major (every tile's split 0, then split 1, ...)

constexpr int THREADS = 128 * (CONSUMERS + 1);
constexpr int WM = PINGPONG ? BM : BM / CONSUMERS;  // rows per consumer warpgroup
constexpr int STAGE_READERS = PINGPONG ? 1 : CONSUMERS;  // consumer warpgroups reading each stage
constexpr int MT = WM / 64;                // m64 wgmmas per consumer per k16 slice
constexpr int A_STAGE_BYTES = PANEL ? 0 : BM * BK * 2;  // PANEL: the row tiles live in the panel, not the ring
constexpr int B_STAGE_BYTES = BN * BK * 2;
constexpr int STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;
constexpr int PANEL_KB_BYTES = BM * BK * 2;  // PANEL: one k block of the panel (a BM x 64 swizzled box)
// Epilogue staging: each consumer stages one 64-row x EPI_CW-col chunk of C at a time in its own
// smem buffer, then writes it out with coalesced 16-byte stores. Rows are unpadded with their 16-byte chunks
// XOR-swizzled (epi_swizzle, as the TMA-store boxes): the fragment writes (8 rows x one chunk per instruction) and
// the 16-byte reads (a quarter warp: 128 contiguous bytes) are both free of bank conflicts for 64-, 32- and 16-col
// chunks (padded 32- and 16-col rows gave 2-way read conflicts: 3.6 M on 12288^2 x 1024, ncu). SWAP_AB stages
// transposed chunks in rows padded by 8 halves: 9216 B = 64 x (64 + 8) halves, the largest buffer, one per consumer.
constexpr int EPI_CW = (BN % 64 == 0) ? 64 : (BN % 32 == 0) ? 32 : 16;
constexpr int EPI_BYTES = 9216;
// Split-K reduce: partials of RU splits are loaded at once (RU * MT*BN/8 float4 in flight).
constexpr int CHUNKS = MT * BN / 8;
// the largest power of two that divides x and is at most cap (SPLIT_K 3, 6: 1, 2)
constexpr int pow2_div(int x, int cap) { return (cap >= 2 && x % 2 == 0) ? 2 * pow2_div(x / 2, cap / 2) : 1; }
// two consumers (232 registers each after setmaxnreg): RU * CHUNKS float4 beside 4 * CHUNKS accumulators and ~40 others
constexpr int RU_BUDGET = CONSUMERS == 1 ? 32 / CHUNKS : 48 / CHUNKS - 1;
constexpr int RU = pow2_div(SPLIT_K, RU_BUDGET < 1 ? 1 : RU_BUDGET);
static_assert(SPLIT_K % RU == 0, "RU splits per round");
static_assert(WM % 64 == 0, "each consumer owns a multiple of 64 rows");
static_assert(BN % 8 == 0 && BN >= 16 && BN <= 256, "wgmma N");
static_assert(MT * BN <= ((PINGPONG || (CONSUMERS == 2 && SPLIT_K == 1)) ? (EPI ? 384 : 352) : 256),
              "at most 128 fp32 accumulators per thread (two consumers on whole tiles: 176 of 232 registers, 192 with "
              "the TMA-store epilogue)");
static_assert(STAGE_BYTES % 1024 == 0, "128B-swizzled tiles need 1024-byte alignment");
static_assert(PERSISTENT == 0 || PERSISTENT == 1, "PERSISTENT is 0 or 1");
static_assert(PINGPONG == 0 || (CONSUMERS == 2 && SPLIT_K == 1), "ping-pong: two consumers on whole tiles, no split-K");
static_assert(EPI == 0 || (SPLIT_K == 1 && SWAP_AB == 0 && BN % 16 == 0 && (EPI == 1 || EPI == 2 || EPI == 4)),
              "TMA-store epilogue: no split-K, no swap, 16-, 32- or 64-col boxes, 1, 2 or 4 staging buffers");
static_assert(EPI_HINT == 0 || EPI > 0, "the L2 hint is for TMA stores");
static_assert(PANEL == 0 || (SPLIT_K == 1 && CLUSTER == 1 && PINGPONG == 0 && PERSISTENT == 1),
              "panel: persistent CTAs on whole tiles, no multicast, no ping-pong");
static_assert(CLUSTER == 1 || (CLUSTER == 2 && SPLIT_RS == 0 && SPLIT_CLUSTER == 0 && (BM / CLUSTER) % 8 == 0),
              "row-tile multicast: pairs of CTAs on the same k split of two column tiles, 8-row swizzle atoms per half");
// TMA-store staging: per consumer EPI buffers of one 64-row slice, BN/EPI_BOX_W boxes of 64 x EPI_BOX_W fp16.
// EPI_BOX_W = 64 columns where BN % 64 == 0, else 32, else 16: rows of 128, 64 or 32 bytes, swizzled with the
// pattern of the same span (8, 4 or 2 KB boxes); the C tensor map's box and swizzle match (front matter).
constexpr int EPI_BOX_W = (BN % 64 == 0) ? 64 : (BN % 32 == 0) ? 32 : 16;
constexpr int EPI_CHUNKS = EPI_BOX_W / 8;  // 16-byte chunks per box row
constexpr int EPI_BOX_BYTES = 64 * EPI_BOX_W * 2;
constexpr int EPI_BUF_BYTES = (BN / EPI_BOX_W) * EPI_BOX_BYTES;
// The 16-byte chunk swizzle of row r: TMA's S-byte pattern XORs the chunk index with address bits 7.. of the row,
// i.e. with (r / (128 / S)) % (S / 16): r % 8 (128 B), (r / 2) % 4 (64 B), (r / 4) % 2 (32 B). The 8 rows of an
// stmatrix fragment land in 8 distinct 16-byte bank groups in each case.
__device__ __forceinline__ int epi_swizzle(int r) { return (r / (64 / EPI_BOX_W)) % EPI_CHUNKS; }
constexpr int EPI_CONSUMER_BYTES = EPI ? EPI * EPI_BUF_BYTES : EPI_BYTES;  // staging per consumer after the ring
static_assert(SPLIT_CLUSTER == 0 || (SPLIT_K >= 2 && SPLIT_K <= 16 && PERSISTENT == 0 && CLUSTER == 1 && PANEL == 0 &&
                                     (BN / 8) % SPLIT_K == 0),
              "split-K cluster: 2-16 splits, one unit per CTA, BN / 8 column chunks dealt out evenly");
static_assert(SPLIT_RS == 0 || (SPLIT_K >= 2 && PERSISTENT == 0 && SPLIT_CLUSTER == 0 && CLUSTER == 1 && PANEL == 0 &&
                                (BN / 8) % SPLIT_K == 0),
              "split-K reduce-scatter: one unit per CTA, BN / 8 column chunks dealt out evenly over the splits");
static_assert(SPLIT_OWNER == 0 || SPLIT_K > 1, "SPLIT_OWNER: split-K only");
static_assert(SPLIT_OWNER == 0 || (SPLIT_RS == 0 && SPLIT_CLUSTER == 0), "SPLIT_OWNER: the workspace reduce");
static_assert(SPLIT_MAJOR == 0 || (SPLIT_K > 1 && SPLIT_CLUSTER == 0 && PANEL == 0),
              "SPLIT_MAJOR: a unit order for split-K (a K-split cluster needs its splits adjacent)");
// split-K counters per tile in the workspace: arrivals (and, SPLIT_RS, the generation the last arrival bumps)
constexpr int COUNTER_INTS = SPLIT_RS ? 2 : 1;
// SPLIT_CLUSTER: the column slice each CTA owns (RED_J n8 chunks) and its receive buffer: one slot per sender rank of
// [consumer][mt][chunk of the slice][thread] float4 (BM * BN / SPLIT_K floats), SPLIT_K slots after the staging.
constexpr int RED_J = (SPLIT_CLUSTER || SPLIT_RS) ? BN / 8 / SPLIT_K : 1;
constexpr int RED_SLOT_BYTES = BM * BN * 4 / SPLIT_K;

__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------- shared memory / mbarrier
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
// Producer: announce that `bytes` will land on this barrier (and arrive once).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Spin until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred P1;\n"
      "WAIT_LOOP:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@!P1 bra WAIT_LOOP;\n"
      "}\n" ::"r"(bar), "r"(parity) : "memory");
}
// Named barrier over the consumer warpgroups only (the producer never joins).
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 128) : "memory");
}
// Named barrier over one consumer warpgroup (ids 2, 3, ...).
__device__ __forceinline__ void warpgroup_sync(int c) {
  asm volatile("bar.sync %0, 128;" ::"r"(2 + c) : "memory");
}

// ---------------------------------------------------------------- cluster (CLUSTER > 1)
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
// No data of its own to publish (mbarrier init is released by fence.mbarrier_init.release.cluster).
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
// Arrive on the barrier at the same offset in CTA `rank` of the cluster (rank may be this CTA). The default
// (.release, .cta) form, as CUTLASS's consumer release: the warp's wgmma reads of the stage are complete
// (wgmma.wait_group) before it arrives, and nothing else is published.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 ra;\n"
      "mapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(rank) : "memory");
}
// A consumer warpgroup no longer reads ring stage `bar` belongs to: tell every CTA that writes into it.
__device__ __forceinline__ void release_stage(uint32_t bar) {
  if (CLUSTER > 1) {
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(bar, r);
  } else {
    mbar_arrive(bar);
  }
}

// ---------------------------------------------------------------- TMA
__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}
// Load one box whose top-left element is (row c1, col c0) into shared memory at dst.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaDesc* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// Same box, written at offset dst of every CTA in `mask` (completing their barriers at offset bar).
__device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const TmaDesc* map, uint32_t bar, int c0, int c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}
// TMA store (EPI > 0): the box at (row c1, col c0) of C from shared memory at src, in this thread's bulk group.
__device__ __forceinline__ void tma_store_2d(const TmaDesc* map, uint32_t src, int c0, int c1, uint64_t policy) {
  if (EPI_HINT) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;" ::"l"(map),
                 "r"(src), "r"(c0), "r"(c1), "l"(policy)
                 : "memory");
  } else {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map), "r"(src),
                 "r"(c0), "r"(c1)
                 : "memory");
  }
}
// L2 policy for C's TMA stores (EPI_HINT): lines written once are evicted first.
__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t p = 0;
  if (EPI_HINT) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until at most N of this thread's bulk groups still read shared memory (their buffers are free).
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// Order this thread's generic-proxy smem writes before later async-proxy (TMA) reads of them.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---------------------------------------------------------------- split-K in a cluster (SPLIT_CLUSTER)
// Send a float4 to our smem offset `addr` in CTA `rank` of the cluster; its 16 bytes complete that CTA's mbarrier at
// our offset `bar` (st.async: no acknowledgement waited for here).
__device__ __forceinline__ void dsmem_send_f4(uint32_t addr, uint32_t bar, uint32_t rank, float x, float y, float z, float w) {
  asm volatile(
      "{\n.reg .b32 ra, rb;\n"
      "mapa.shared::cluster.u32 ra, %0, %2;\n"
      "mapa.shared::cluster.u32 rb, %1, %2;\n"
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [ra], {%3, %4, %5, %6}, [rb];\n}\n" ::"r"(addr),
      "r"(bar), "r"(rank), "f"(x), "f"(y), "f"(z), "f"(w)
      : "memory");
}
__device__ __forceinline__ float4 lds_f4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
  return v;
}

// ---------------------------------------------------------------- wgmma
// Shared-memory matrix descriptor for a K-major tile written by TMA with 128-byte swizzle:
// rows of 128 B, 8-row swizzle atoms 1024 B apart (stride byte offset), base 1024-aligned.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(16 >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// Split-K ticket: one gpu-scope acq_rel atomic releases this CTA's partial (ordered before it by
// the consumer barrier; release is cumulative) and acquires the earlier arrivals' (no SC fence).
__device__ __forceinline__ int ticket_acq_rel(int* p) {
  int old;
  asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
  return old;
}
// SPLIT_RS: the generation word of a tile's barrier (relaxed before arriving, acquire while waiting, release to open).
__device__ __forceinline__ int ld_relaxed_gpu(const int* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// SPLIT_OWNER: a non-reducing split's arrival releases its partial (no return value, no acquire)
__device__ __forceinline__ void arrive_release_gpu(int* p) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(p) : "memory");
}
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keep the compiler from moving accumulator reads/writes across wgmma waits.
__device__ __forceinline__ void reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}

// D[64 x N] (+)= A[64 x 16] * B[N x 16]^T; d holds this thread's N/2 fp32 accumulators.
// scale_d == 0 overwrites D (first k slice of a tile). Generated for each N used.
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
template <> __device__ __forceinline__ void wgmma_m64k16<160>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n160k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79}, %80, %81, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<176>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n176k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87}, %88, %89, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
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

// ---------------------------------------------------------------- work decomposition
struct Work {
  int tile, split;  // linear tile id, K slice id
  int m0, n0;       // top-left element of the tile (kernel view)
  int kb0, kb1;     // k blocks [kb0, kb1) of BK
};

// Unit u -> (tile, split). Tiles are rastered in groups of GROUP tile-rows along M, so the
// CTAs in flight share B column panels in L2; splits of one tile are adjacent units (pairs: adjacent pairs of units).
__device__ __forceinline__ Work get_work(int u, int Mk, int Nk, int K) {
  Work w;
  // CLUSTER > 1: the CTAs of a cluster take consecutive units, the same k split of a pair of column tiles (multicast
  // A tiles must cover the same k blocks); tiles are numbered over the pair-padded grid (the workspace's too)
  // SPLIT_MAJOR: split s of every tile before split s + 1 of any, so the CTAs launched side by side (the two SMs of a
  // TPC, the SMs of a GPC) stream the same k blocks of neighbouring raster tiles, which share A or B rows, instead of
  // disjoint k ranges of one tile (as cuBLASLt's split-K kernels, whose split is gridDim.z). A split still waits only
  // for lower-numbered units (SPLIT_OWNER's reducer, split SPLIT_K-1, comes last).
  const int r = u % CLUSTER, q = u / CLUSTER;
  const int pairs = SPLIT_MAJOR ? cdiv(Mk, BM) * cdiv(cdiv(Nk, BN), CLUSTER) : 1;
  w.split = SPLIT_MAJOR ? q / pairs : q % SPLIT_K;
  const int pair = SPLIT_MAJOR ? q % pairs : q / SPLIT_K;
  w.tile = pair * CLUSTER + r;
  if (PANEL) {  // row blocks in order, column tiles fastest: a CTA's contiguous units share their row panel
    const int tn = cdiv(Nk, BN);
    w.m0 = (u / tn) * BM;
    w.n0 = (u % tn) * BN;
    w.kb0 = 0;
    w.kb1 = cdiv(K, BK);
    return w;
  }
  // CLUSTER > 1: raster over pairs of column tiles; CTA rank r of the cluster takes column tile 2 * pair column + r
  const int tiles_m = cdiv(Mk, BM), tiles_n = cdiv(cdiv(Nk, BN), CLUSTER);
  const int group_size = GROUP * tiles_n;
  const int first_m = (pair / group_size) * GROUP;
  const int gm = min(tiles_m - first_m, GROUP);
  const int in_group = pair % group_size;
  w.m0 = (first_m + in_group % gm) * BM;
  w.n0 = ((in_group / gm) * CLUSTER + r) * BN;
  const int kblocks = cdiv(K, BK);
  const int per = cdiv(kblocks, SPLIT_K);
  w.kb0 = min(w.split * per, kblocks);
  w.kb1 = min(w.kb0 + per, kblocks);
  return w;
}

// CTA pairs (CLUSTER > 1): a launch of clusters places consecutive clusters in one GPC until it is full (a plain
// launch deals consecutive CTAs out over the GPCs, two SMs at a time): raster-neighbour units then all ran in one GPC,
// and a persistent grid of pairs was 17-25 % slower than the same CTAs launched singly (H100, docs/perf-hopper.md
// Run 19). So pair k of the grid takes the raster's pair of units v(k) = the transpose of k over GPC_SPREAD rows: the
// pairs of one GPC get raster positions GPC_SPREAD apart, as a plain launch's CTAs would. A bijection of
// [0, pairs) for any pair count. (SPLIT_CLUSTER's K-split clusters keep the launch order: spread, they measured
// 0-18 % slower.)
constexpr int GPC_SPREAD = 8;
__device__ __forceinline__ int cluster_spread(int b) {
  const int k = b / CLUSTER, r = b % CLUSTER, nk = static_cast<int>(gridDim.x) / CLUSTER;
  const int j = k % GPC_SPREAD;
  return ((j * (nk / GPC_SPREAD) + min(j, nk % GPC_SPREAD)) + k / GPC_SPREAD) * CLUSTER + r;
}
// The units of this CTA: strided by the grid, or (PANEL) the contiguous range [first, end) of its share.
__device__ __forceinline__ int unit_first(int units) {
  if (CLUSTER > 1) return cluster_spread(static_cast<int>(blockIdx.x));  // (PANEL takes no pairs)
  return PANEL ? static_cast<int>(static_cast<long long>(blockIdx.x) * units / gridDim.x) : static_cast<int>(blockIdx.x);
}
__device__ __forceinline__ int unit_end(int units) {
  return PANEL ? static_cast<int>(static_cast<long long>(blockIdx.x + 1) * units / gridDim.x) : units;
}
__device__ __forceinline__ int unit_step() { return PANEL ? 1 : static_cast<int>(gridDim.x); }

// Epilogue of one consumer: its 64-row slices of the tile, registers -> smem (fp16) -> C.
// Kernel element (r, c) is C[r][c] (C has Nk columns), or C[c][r] with SWAP_AB (C has Mk columns).
// All stores are predicated on the problem bounds; 16-byte vector stores where alignment allows.
__device__ __forceinline__ void store_tile(const float (&acc)[MT][BN / 2], __half* stage, int c, __half* C,
                                           int Mk, int Nk, int row0, int col0) {
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  constexpr int PITCH = SWAP_AB ? 64 + 8 : EPI_CW;  // halves per staged row (SWAP_AB: padded; else swizzled chunks)
  constexpr int VPL = SWAP_AB ? 64 / 8 : EPI_CW / 8;    // 16-byte vectors per staged row
  constexpr int ITERS = 64 * EPI_CW / 8 / 128;          // vectors per thread per chunk
  const bool vec_ok = SWAP_AB ? (Mk % 8 == 0) : (Nk % 8 == 0);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int q = 0; q < BN / EPI_CW; ++q) {
      warpgroup_sync(c);  // the previous chunk has been read out of `stage`
#pragma unroll
      for (int jj = 0; jj < EPI_CW / 8; ++jj) {
        const int j = q * (EPI_CW / 8) + jj;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp * 16 + lane / 4 + 8 * h, cc = 8 * jj + 2 * (lane % 4);
          const float v0 = acc[mt][4 * j + 2 * h], v1 = acc[mt][4 * j + 2 * h + 1];
          if (SWAP_AB) {
            const __half2 pr = __floats2half2_rn(v0, v1);
            stage[cc * PITCH + r] = __low2half(pr);
            stage[(cc + 1) * PITCH + r] = __high2half(pr);
          } else {
            *reinterpret_cast<__half2*>(&stage[r * PITCH + ((jj ^ epi_swizzle(r)) * 8) + cc % 8]) = __floats2half2_rn(v0, v1);
          }
        }
      }
      warpgroup_sync(c);
      const int tr0 = row0 + mt * 64, tc0 = col0 + q * EPI_CW;  // chunk origin, kernel view
#pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        const int v = tid + it * 128, sr = v / VPL, sv = (v % VPL) * 8;  // staged row, first element
        // C row / first C column of this vector, and the C row length
        const int gr = SWAP_AB ? tc0 + sr : tr0 + sr;
        const int gc = SWAP_AB ? tr0 + sv : tc0 + sv;
        const int rows = SWAP_AB ? Nk : Mk, cols = SWAP_AB ? Mk : Nk;
        if (gr >= rows) continue;
        const __half* src = &stage[sr * PITCH + (SWAP_AB ? sv : ((v % VPL) ^ epi_swizzle(sr)) * 8)];
        __half* dst = C + static_cast<size_t>(gr) * cols + gc;
        if (vec_ok && gc + 8 <= cols) {
          *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (gc + e < cols) dst[e] = src[e];
        }
      }
    }
  }
}

// the largest divisor of x that is at most cap (at least 1)
constexpr int div_at_most(int x, int cap) {
  for (int d = cap < x ? cap : x; d > 1; --d)
    if (x % d == 0) return d;
  return 1;
}
// SPLIT_RS: splits whose chunks of the slice are loaded at once: at most 16 float4 in flight (32 with one consumer, 8
// beside 128 accumulators per thread)
constexpr int RS_BUDGET = MT * BN / 2 >= 128 ? 8 : CONSUMERS == 1 ? 32 : 16;
constexpr int RS_ROUND = div_at_most(SPLIT_K, RS_BUDGET / (MT * RED_J));
// SPLIT_RS: sum this thread's fragments of split S's column slice (RED_J n8 chunks per 64-row block) over the
// splits in order 0..SPLIT_K-1, the others' partials from the workspace, ours from registers. One instantiation per
// split (the dispatch below compares at run time), so the chunk indices are compile-time: the accumulators stay in
// registers and only one round's loads are in flight.
template <int S>
__device__ __forceinline__ void rs_sum_slice(float (&acc)[MT][BN / 2], const float4* base, int split, int tid) {
  if constexpr (S < SPLIT_K) {
    if (split != S) {
      rs_sum_slice<S + 1>(acc, base, split, tid);
      return;
    }
    constexpr size_t PART_F4 = static_cast<size_t>(BM) * BN / 4;  // one split's partial, in float4
    float4 sum[MT][RED_J];
    // a round's loads first, then its sums: with the loads and sums in one loop nest ptxas spills 20 bytes on the
    // 128-accumulator instances (128x256 and 256x128 with 4 splits)
#pragma unroll
    for (int sp0 = 0; sp0 < SPLIT_K; sp0 += RS_ROUND) {
      float4 x[MT][RED_J][RS_ROUND];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int jj = 0; jj < RED_J; ++jj)
#pragma unroll
          for (int r = 0; r < RS_ROUND; ++r) {
            const int sp = sp0 + r;
            const float* a = &acc[mt][4 * (S * RED_J + jj)];
            x[mt][jj][r] = sp == S ? make_float4(a[0], a[1], a[2], a[3])
                                   : __ldcg(base + sp * PART_F4 + (mt * (BN / 8) + S * RED_J + jj) * 128 + tid);
          }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int jj = 0; jj < RED_J; ++jj)
#pragma unroll
          for (int r = 0; r < RS_ROUND; ++r) {
            const float4 v = x[mt][jj][r];
            float4& t = sum[mt][jj];
            if (sp0 + r == 0) t = v;
            else { t.x += v.x; t.y += v.y; t.z += v.z; t.w += v.w; }
          }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int jj = 0; jj < RED_J; ++jj) {
        float* a = &acc[mt][4 * (S * RED_J + jj)];
        a[0] = sum[mt][jj].x; a[1] = sum[mt][jj].y; a[2] = sum[mt][jj].z; a[3] = sum[mt][jj].w;
      }
  }
}

// SPLIT_CLUSTER: this thread's fragments of the n8 chunks owned by cluster rank `rank` straight to C (bounds-checked; a half2 per
// row where C's rows allow, single halves transposed with SWAP_AB). The slice is 1/SPLIT_K of a small output.
__device__ __forceinline__ void store_slice(const float (&acc)[MT][BN / 2], __half* C, int Mk, int Nk, int row0,
                                            int col0, uint32_t rank) {
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const int rows = SWAP_AB ? Nk : Mk, cols = SWAP_AB ? Mk : Nk;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      if (j / RED_J != static_cast<int>(rank)) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = row0 + mt * 64 + warp * 16 + lane / 4 + 8 * h;  // kernel view
        const int cc = col0 + 8 * j + 2 * (lane % 4);
        const __half2 v = __floats2half2_rn(acc[mt][4 * j + 2 * h], acc[mt][4 * j + 2 * h + 1]);
        if (SWAP_AB) {  // kernel (r, cc) is C[cc][r]
          if (r < Mk) {
            if (cc < Nk) C[static_cast<size_t>(cc) * cols + r] = __low2half(v);
            if (cc + 1 < Nk) C[static_cast<size_t>(cc + 1) * cols + r] = __high2half(v);
          }
        } else if (r < rows) {
          __half* dst = C + static_cast<size_t>(r) * cols + cc;
          if (cols % 2 == 0 && cc + 1 < cols) *reinterpret_cast<__half2*>(dst) = v;
          else {
            if (cc < cols) dst[0] = __low2half(v);
            if (cc + 1 < cols) dst[1] = __high2half(v);
          }
        }
      }
    }
}

// EPI > 0: one consumer's WM x BN slice of the tile, 64 rows at a time: registers -> swizzled smem -> TMA store.
// `stage` is the consumer's first staging buffer; `k` counts the slices it has staged (buffer k % EPI);
// (row0, col0) is the slice's origin in C. The TMA unit clips the parts of a box past M or N.
// Slices go in rounds of GRP = min(MT, EPI): one buffer wait, two warpgroup barriers, one proxy fence and one
// bulk group per round, not per slice. Fragments go to smem with stmatrix (four 8x8 fp16 matrices per
// instruction: the accumulator layout of an m64nN wgmma is stmatrix's fragment layout, 8 rows by 8 columns).
constexpr int EPI_GRP = EPI == 0 ? 1 : (MT < EPI ? MT : EPI);
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ void store_tile_tma(const float (&acc)[MT][BN / 2], uint32_t stage, int c, const TmaDesc* map_c,
                                               int row0, int col0, int& k) {
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  // stmatrix.x4: lanes 8i..8i+7 address the 8 rows of matrix i; matrix i = (rows +8 * (i & 1), column chunk +(i >> 1))
  const int mi = lane / 8;
  const int r = warp * 16 + (mi & 1) * 8 + lane % 8;  // row of the slice this lane addresses
#pragma unroll
  for (int mt0 = 0; mt0 < MT; mt0 += EPI_GRP) {
    // the round that last used these EPI_GRP buffers has finished reading them (EPI / EPI_GRP rounds rotate)
    if (tid == 0) bulk_wait_read<EPI / EPI_GRP - 1>();
    warpgroup_sync(c);
#pragma unroll
    for (int g = 0; g < EPI_GRP; ++g) {
      const int mt = mt0 + g;
      const uint32_t buf = stage + ((k + g) % EPI) * EPI_BUF_BYTES;
#pragma unroll
      for (int j = 0; j < BN / 8; j += 2) {
        const int jj = j + (mi >> 1);
        // box jj / EPI_CHUNKS, row r, 16-byte chunk jj % EPI_CHUNKS swizzled like the map: the 8 rows of a matrix
        // land in 8 distinct 16-byte bank groups (128-byte rows: 8 chunks; 64-byte rows: 2 rows per 128 bytes x 4 chunks)
        const uint32_t addr = buf + (jj / EPI_CHUNKS) * EPI_BOX_BYTES + r * (EPI_BOX_W * 2) + (((jj % EPI_CHUNKS) ^ epi_swizzle(r)) << 4);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
                     "r"(pack_half2(acc[mt][4 * j], acc[mt][4 * j + 1])), "r"(pack_half2(acc[mt][4 * j + 2], acc[mt][4 * j + 3])),
                     "r"(pack_half2(acc[mt][4 * j + 4], acc[mt][4 * j + 5])), "r"(pack_half2(acc[mt][4 * j + 6], acc[mt][4 * j + 7]))
                     : "memory");
      }
    }
    fence_proxy_async();  // every writer: its smem writes before the TMA unit reads them
    warpgroup_sync(c);
    if (tid == 0) {
      const uint64_t policy = policy_evict_first();
#pragma unroll
      for (int g = 0; g < EPI_GRP; ++g) {
        const uint32_t buf = stage + ((k + g) % EPI) * EPI_BUF_BYTES;
#pragma unroll
        for (int b = 0; b < BN / EPI_BOX_W; ++b)
          tma_store_2d(map_c, buf + b * EPI_BOX_BYTES, col0 + b * EPI_BOX_W, row0 + (mt0 + g) * 64, policy);
      }
      bulk_commit();
    }
    k += EPI_GRP;
  }
}

}  // namespace evo_sm90
using namespace evo_sm90;

#define EVO_EPI 0
#if 1 > 1
#define EVO_CLUSTER_DIMS __cluster_dims__(1, 1, 1)
#elif 0
#define EVO_CLUSTER_DIMS __cluster_dims__(4, 1, 1)
#else
#define EVO_CLUSTER_DIMS
#endif

extern "C" __global__ void EVO_CLUSTER_DIMS __launch_bounds__(THREADS, 1)
    evo_gemm(const __half* A, const __half* B, __half* C, int M, int N, int K, float* workspace,
             const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB
#if EVO_EPI
             , const __grid_constant__ TmaDesc tmC  // C (M x N), 64 x 64 boxes, 128-byte swizzle
#endif
             ) {
  // Kernel view: rows come from `map_rows` (BM boxes), columns from `map_cols` (BN boxes).
  const int Mk = SWAP_AB ? N : M;
  const int Nk = SWAP_AB ? M : N;
  const TmaDesc* map_rows = SWAP_AB ? &tmB : &tmA;
  const TmaDesc* map_cols = SWAP_AB ? &tmA : &tmB;

  extern __shared__ uint8_t smem_raw[];
  __shared__ alignas(8) uint64_t full_bar[STAGES];
  __shared__ alignas(8) uint64_t empty_bar[STAGES];
  __shared__ alignas(8) uint64_t order_bar[2];  // PINGPONG: order_bar[c] completes when consumer 1-c ends a k loop
  __shared__ alignas(8) uint64_t panel_full, panel_empty;  // PANEL: the row panel has landed / is no longer read
  __shared__ int s_last;  // split-K: this CTA is the last of its tile
  __shared__ alignas(8) uint64_t recv_bar;  // SPLIT_CLUSTER: the other splits' slices of ours have landed
  // Stage s: A tile (BM x 64, 128B-swizzled) at tiles + s*STAGE_BYTES, B tile (BN x 64) after it.
  const uint32_t tiles = (smem_u32(smem_raw) + 1023u) & ~1023u;
  // Epilogue staging buffers (one per consumer) after the ring, as a generic pointer.
  __half* epi_stage = reinterpret_cast<__half*>(smem_raw + (tiles - smem_u32(smem_raw)) + STAGES * STAGE_BYTES);
  const uint32_t epi_stage_u32 = tiles + STAGES * STAGE_BYTES;  // EPI > 0: 1024-aligned (STAGE_BYTES % 1024 == 0)
  // PANEL: the row panel after the staging buffers (its size depends on K), cdiv(K, BK) boxes of BM x 64.
  const uint32_t panel = epi_stage_u32 + CONSUMERS * EPI_CONSUMER_BYTES;  // 1024-aligned (9216 and BN * 128 are)
  const uint32_t red_buf = panel;  // SPLIT_CLUSTER: the receive slots (PANEL is 0 then)

  // warp-uniform as far as the compiler knows (a shuffle from lane 0): the consumers' ring addresses and wgmma
  // descriptors derived from it stay in uniform registers (no R2UR before every wgmma)
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int tid = threadIdx.x % 128;
  const int units = cdiv(Mk, BM) * (cdiv(cdiv(Nk, BN), CLUSTER) * CLUSTER) * SPLIT_K;
  const int u_end = unit_end(units);

  // Producer (thread 0 only): the next k block to load is block kb of unit pu (work pw), into ring slot ps.
  int pu = unit_first(units), pkb = 0, ps = 0;
  uint32_t pphase = 0;
  bool phave = false;
  Work pw{};
  int panel_m0 = -1;          // PANEL: the row block whose panel the producer loaded last
  uint32_t panel_phase = 0;   // PANEL: panels loaded so far, mod 2
  const uint32_t prank = CLUSTER > 1 ? cluster_rank() : 0;  // CLUSTER > 1: which half of the A tile we load
  // Issue the next k block's loads (waiting for its slot to be free); false once this CTA's units are done.
  auto produce_next = [&]() -> bool {
    while (!phave || pkb >= pw.kb1) {
      if (phave) pu += unit_step();
      if (pu >= u_end) return false;
      pw = get_work(pu, Mk, Nk, K);
      pkb = pw.kb0;
      phave = true;
      if (PANEL && pw.m0 != panel_m0) {  // a new row block: its whole-K panel, once the last one is read
        mbar_wait(smem_u32(&panel_empty), panel_phase ^ 1);  // first panel: fresh barrier, returns at once
        const uint32_t pf = smem_u32(&panel_full);
        mbar_arrive_expect_tx(pf, (pw.kb1 - pw.kb0) * PANEL_KB_BYTES);
        for (int kb = pw.kb0; kb < pw.kb1; ++kb)
          tma_load_2d(panel + kb * PANEL_KB_BYTES, map_rows, pf, kb * BK, pw.m0);
        panel_m0 = pw.m0;
        panel_phase ^= 1;
      }
    }
    mbar_wait(smem_u32(&empty_bar[ps]), pphase ^ 1);  // first pass: fresh barrier, returns at once
    const uint32_t full = smem_u32(&full_bar[ps]);
    mbar_arrive_expect_tx(full, STAGE_BYTES);          // OOB parts of a box still count (zero-filled)
    const uint32_t a_dst = tiles + ps * STAGE_BYTES;
    if (CLUSTER > 1) {  // our half of the A tile's rows, into the same place of every CTA of the cluster
      tma_load_2d_mc(a_dst + prank * (BM / CLUSTER) * 128, map_rows, full, pkb * BK, pw.m0 + prank * (BM / CLUSTER),
                     (1 << CLUSTER) - 1);
    } else if (!PANEL) {  // (PANEL: the row tile is in the panel)
      tma_load_2d(a_dst, map_rows, full, pkb * BK, pw.m0);
    }
    tma_load_2d(a_dst + A_STAGE_BYTES, map_cols, full, pkb * BK, pw.n0);
    ++pkb;
    if (++ps == STAGES) { ps = 0; pphase ^= 1; }
    return true;
  };

  if (threadIdx.x == 0) {
    tma_prefetch_desc(map_rows);  // the descriptors' fetch overlaps the barrier set-up
    tma_prefetch_desc(map_cols);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_u32(&full_bar[s]), 1);
      mbar_init(smem_u32(&empty_bar[s]), STAGE_READERS * CLUSTER);
    }
    mbar_init(smem_u32(&order_bar[0]), 4);
    mbar_init(smem_u32(&order_bar[1]), 4);
    if (PANEL) {
      mbar_init(smem_u32(&panel_full), 1);
      mbar_init(smem_u32(&panel_empty), CONSUMERS * 4);
    }
    if (SPLIT_CLUSTER) {  // armed before the cluster arrive below: no peer sends before it
      mbar_init(smem_u32(&recv_bar), 1);
      mbar_arrive_expect_tx(smem_u32(&recv_bar), (SPLIT_K - 1) * RED_SLOT_BYTES);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    // Without a cluster the first k block's loads leave before the block-wide barrier, within the kernel's
    // first instructions (this thread initialised the barriers; every slot is free). Only one: issuing the
    // whole ring here would hold the consumers at the barrier while the TMA unit takes the requests.
    if (CLUSTER == 1) produce_next();
  }
  if (CLUSTER > 1) {  // the peer multicasts into our ring and arrives on our barriers: they must be initialised
    cluster_arrive_relaxed();
    cluster_wait();
  } else {
    __syncthreads();
    // SPLIT_CLUSTER: the others write into our smem only after their main loops; the consumers wait for this
    // cluster barrier (every CTA has started) right before that, so its latency hides behind the main loop. The
    // producer warps arrive here and exit: the cluster barrier waits for non-exited threads only.
    if (SPLIT_CLUSTER) cluster_arrive_relaxed();
  }

  if (wg == 0) {
    // ------------------------------------------------------------ producer warpgroup
    if (CONSUMERS > 1) setmaxnreg_dec<40>();
    if (tid == 0)
      while (produce_next()) {
      }
  } else {
    // ------------------------------------------------------------ consumer warpgroups
    if (CONSUMERS > 1) setmaxnreg_inc<232>();
    const int c = wg - 1;  // this consumer's slice: tile rows [c*WM, (c+1)*WM), or (PINGPONG) units j % 2 == c
    const int row_off = PINGPONG ? 0 : c * WM;
    const int warp = tid / 32, lane = tid % 32;
    float acc[MT][BN / 2];
    int s = 0;
    uint32_t phase = 0;
    int j = 0;  // this CTA's unit counter
    int t = 0;  // PINGPONG: units this consumer has done
    int epi_k = 0;  // EPI > 0: 64-row slices this consumer has staged (picks the staging buffer)
#if EVO_EPI
    if (tid == 0) tma_prefetch_desc(&tmC);
#endif
    int cpanel_m0 = -1;         // PANEL: the row block of the panel this consumer reads
    uint32_t cpanel_phase = 0;
    for (int u = unit_first(units); u < u_end; u += unit_step(), ++j) {
      const Work w = get_work(u, Mk, Nk, K);
      const int nk = w.kb1 - w.kb0;
      if (PANEL && w.m0 != cpanel_m0) {  // this row block's panel has landed
        mbar_wait(smem_u32(&panel_full), cpanel_phase);
        cpanel_phase ^= 1;
        cpanel_m0 = w.m0;
      }
      if (PINGPONG && (j & 1) != c) {  // the other consumer's unit: step over its stages of the ring
        s += nk;
        while (s >= STAGES) { s -= STAGES; phase ^= 1; }
        continue;
      }
      if (nk == 0) {  // empty K slice (SPLIT_K > k blocks): the partial is zero
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) acc[mt][i] = 0.f;
      }
      if (PINGPONG) {  // consumer 0's unit t follows consumer 1's unit t-1; consumer 1's unit t follows consumer 0's unit t
        if (c == 1) mbar_wait(smem_u32(&order_bar[1]), t & 1);
        else if (t > 0) mbar_wait(smem_u32(&order_bar[0]), (t - 1) & 1);
      }
      int prev = 0;
      for (int i = 0; i < nk; ++i) {
        mbar_wait(smem_u32(&full_bar[s]), phase);
        const uint32_t a_base = (PANEL ? panel + (w.kb0 + i) * PANEL_KB_BYTES : tiles + s * STAGE_BYTES) + row_off * 128;
        const uint32_t b_base = tiles + s * STAGE_BYTES + A_STAGE_BYTES;
        wgmma_fence();
        // The stage's descriptors once; a k slice (+32 B) or a 64-row block (+8 KB) adds its offset / 16 to the
        // start-address field (smem addresses stay below 2^18, so the 14-bit field never carries)
        const uint64_t da0 = desc_sw128(a_base), db0 = desc_sw128(b_base);
#pragma unroll
        for (int k = 0; k < BK / 16; ++k) {  // 16-wide k slices: +32 B inside the swizzled row
          const uint64_t db = db0 + static_cast<uint64_t>(k * 32 / 16);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
            wgmma_m64k16<BN>(acc[mt], da0 + static_cast<uint64_t>((mt * 64 * 128 + k * 32) / 16), db, (i | k) != 0);
        }
        wgmma_commit();
        if (i > 0) {  // keep one wgmma group in flight; the previous stage is free now
          wgmma_wait<1>();
          if (tid == 0) release_stage(smem_u32(&empty_bar[prev]));
        }
        prev = s;
        if (++s == STAGES) { s = 0; phase ^= 1; }
      }
      if (PINGPONG) {  // every wgmma of this unit is issued: the other consumer may start its k loop
        __syncwarp();
        if (lane == 0) mbar_arrive(smem_u32(&order_bar[1 - c]));
        ++t;
      }
      wgmma_wait<0>();
      if (nk > 0 && tid == 0) release_stage(smem_u32(&empty_bar[prev]));
      // PANEL: the row block's last unit of this CTA: its panel may be overwritten
      if (PANEL && lane == 0 && (u + 1 >= u_end || get_work(u + 1, Mk, Nk, K).m0 != w.m0))
        mbar_arrive(smem_u32(&panel_empty));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) reg_fence(acc[mt][i]);

      if (SPLIT_CLUSTER) {
        // ---------------------------------------------------- split-K in the cluster: slices through DSMEM
        const uint32_t rank = cluster_rank();  // == w.split
        cluster_wait();                        // every CTA of the cluster runs: its smem may be written
        // chunk j belongs to owner j / RED_J, at chunk j % RED_J of its slot; the loops run over compile-time
        // chunk indices (the accumulators stay in registers) with the owner compared at run time
        const uint32_t mine = red_buf + (c * MT * RED_J * 128 + tid) * 16;  // + slot + (mt * RED_J + jj) * 2048
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int j = 0; j < BN / 8; ++j)
            if (j / RED_J != static_cast<int>(rank))
              dsmem_send_f4(mine + rank * RED_SLOT_BYTES + (mt * RED_J + j % RED_J) * 2048, smem_u32(&recv_bar), j / RED_J,
                            acc[mt][4 * j], acc[mt][4 * j + 1], acc[mt][4 * j + 2], acc[mt][4 * j + 3]);
        mbar_wait(smem_u32(&recv_bar), 0);  // the other splits' slices of ours have landed
        cluster_arrive_relaxed();           // (the barrier before exit: every CTA's slots have landed once all arrive)
        // our slice, summed in split order 0..SPLIT_K-1 (our own partial from registers)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int j = 0; j < BN / 8; ++j)
            if (j / RED_J == static_cast<int>(rank)) {
              float* a = &acc[mt][4 * j];
              const float4 own = make_float4(a[0], a[1], a[2], a[3]);
              float4 sum;
#pragma unroll
              for (int sp = 0; sp < SPLIT_K; ++sp) {
                const float4 x = sp == static_cast<int>(rank) ? own : lds_f4(mine + sp * RED_SLOT_BYTES + (mt * RED_J + j % RED_J) * 2048);
                if (sp == 0) sum = x;
                else { sum.x += x.x; sum.y += x.y; sum.z += x.z; sum.w += x.w; }
              }
              a[0] = sum.x; a[1] = sum.y; a[2] = sum.z; a[3] = sum.w;
            }
        store_slice(acc, C, Mk, Nk, w.m0 + row_off, w.n0, rank);
        continue;
      }
      if (SPLIT_K > 1) {
        // ---------------------------------------------------- split-K: partial tile -> workspace
        const int num_tiles = cdiv(Mk, BM) * (cdiv(cdiv(Nk, BN), CLUSTER) * CLUSTER);  // (pair-padded: get_work's numbering)
        int* counters = reinterpret_cast<int*>(workspace);
        float* parts = workspace + ((num_tiles * 4 * COUNTER_INTS + 255) / 256) * 64;
        // Layout of one partial: [consumer][mt][n8 chunk][thread][4 floats], coalesced float4s.
        const size_t tile_floats = static_cast<size_t>(BM) * BN;
        float4* mine = reinterpret_cast<float4*>(parts + (static_cast<size_t>(w.tile) * SPLIT_K + w.split) * tile_floats +
                                                 static_cast<size_t>(c) * WM * BN);
        // Publish (SPLIT_RS: only the column chunks the other splits sum): consumer barrier, then one thread takes a
        // ticket with an acq_rel atomic (its release is cumulative: it orders every consumer's partial stores; its
        // acquire makes the earlier splits' partials visible). The last arrival resets the count for the next launch.
        // SPLIT_OWNER: the reducer publishes nothing; the others arrive with a release, it waits for them (acquire).
        const bool owner = SPLIT_OWNER && w.split == SPLIT_K - 1;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int j = 0; j < BN / 8; ++j)
            if (!owner && (!SPLIT_RS || j / RED_J != w.split))
              __stcg(mine + (mt * (BN / 8) + j) * 128 + tid,
                     make_float4(acc[mt][4 * j], acc[mt][4 * j + 1], acc[mt][4 * j + 2], acc[mt][4 * j + 3]));
        consumer_sync();
        if (threadIdx.x == 128) {
          int* arrivals = counters + COUNTER_INTS * w.tile;
          // SPLIT_RS: the tile's splits wait for each other (the grid is one wave, `requires`): the last arrival
          // releases the generation word the others poll with acquire loads (read before arriving: ordered by its release)
          const int g0 = SPLIT_RS ? ld_relaxed_gpu(arrivals + 1) : 0;
          if (SPLIT_OWNER) {
            if (owner) {
              while (ld_acquire_gpu(arrivals) != SPLIT_K - 1) __nanosleep(32);
              *arrivals = 0;  // every other split has arrived: nothing adds to it again in this launch
            } else {
              arrive_release_gpu(arrivals);
            }
            s_last = owner;
          } else {
            s_last = ticket_acq_rel(arrivals) == SPLIT_K - 1;
            if (s_last) *arrivals = 0;
          }
          if (SPLIT_RS) {
            if (s_last) st_release_gpu(arrivals + 1, g0 + 1);
            else
              while (ld_acquire_gpu(arrivals + 1) == g0) __nanosleep(32);
          }
        }
        consumer_sync();
        const float4* base = reinterpret_cast<const float4*>(parts + static_cast<size_t>(w.tile) * SPLIT_K * tile_floats +
                                                             static_cast<size_t>(c) * WM * BN);
        if constexpr (SPLIT_RS != 0) {  // every split sums its column slice in split order 0..SPLIT_K-1 and stores it
          rs_sum_slice<0>(acc, base, w.split, tid);
          store_slice(acc, C, Mk, Nk, w.m0 + row_off, w.n0, static_cast<uint32_t>(w.split));
          continue;
        }
        if (!s_last) continue;
        // Sum the partials in fixed split order (deterministic): the last to arrive reads splits 0..SPLIT_K-1 into its
        // accumulators; SPLIT_OWNER's reducer adds splits 0..SPLIT_K-2 onto its own partial, which it kept.
        constexpr int READ = SPLIT_OWNER ? SPLIT_K - 1 : SPLIT_K;
#pragma unroll 1
        for (int sp0 = 0; sp0 < READ; sp0 += RU) {  // RU splits' loads in flight at once
          float4 v[RU][CHUNKS];
#pragma unroll
          for (int r = 0; r < RU; ++r)
            if (READ % RU == 0 || sp0 + r < READ)  // (RU divides SPLIT_K: no guard, none of its registers)
#pragma unroll
              for (int q = 0; q < CHUNKS; ++q) v[r][q] = __ldcg(base + (sp0 + r) * (tile_floats / 4) + q * 128 + tid);
#pragma unroll
          for (int r = 0; r < RU; ++r)
            if (READ % RU == 0 || sp0 + r < READ)
#pragma unroll
              for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < BN / 8; ++j) {
                  const float4 x = v[r][mt * (BN / 8) + j];
                  float* a = &acc[mt][4 * j];
                  if (!SPLIT_OWNER && sp0 + r == 0) {
                    a[0] = x.x; a[1] = x.y; a[2] = x.z; a[3] = x.w;
                  } else {
                    a[0] += x.x; a[1] += x.y; a[2] += x.z; a[3] += x.w;
                  }
                }
        }
      }

      // -------------------------------------------------------- epilogue: registers -> smem -> C
#if EVO_EPI
      store_tile_tma(acc, epi_stage_u32 + c * EPI_CONSUMER_BYTES, c, &tmC, w.m0 + row_off, w.n0, epi_k);
#else
      store_tile(acc, epi_stage + c * (EPI_BYTES / 2), c, C, Mk, Nk, w.m0 + row_off, w.n0);
#endif
    }
    if (SPLIT_CLUSTER) cluster_wait();  // no send into or from this CTA is in flight when it exits
#if EVO_EPI
    // the last stores have read their staging buffers before the CTA's smem goes away (their writes to C are
    // performed by the time the kernel completes, as for every store of the grid)
    if (tid == 0) bulk_wait_read<0>();
#else
    (void)epi_k;
    (void)epi_stage_u32;
#endif
  }
  if (CLUSTER > 1) {  // no CTA leaves while its peer may still arrive on its barriers
    cluster_arrive();
    cluster_wait();
  }
}

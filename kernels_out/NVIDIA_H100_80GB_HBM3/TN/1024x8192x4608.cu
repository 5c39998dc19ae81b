/*---evo
family: wgmma_sm90
archs: [sm_90a]
params: {BM: 128, BN: 256, CLUSTER: 1, CONSUMERS: 2, DYN: 0, EARLY_STORE: 0, EPI: 0, EPI_HINT: 0,
  EPI_WIDE: 0, GROUP: 16, PANEL: 0, PERSISTENT: 1, PINGPONG: 0, RING_SPLIT: 0, SPLIT_CLUSTER: 0,
  SPLIT_K: 1, SPLIT_MAJOR: 0, SPLIT_OWNER: 0, SPLIT_RS: 0, SPLIT_SKEW: 0, STAGES: 4,
  STREAMK: 0, SWAP_AB: 0}
block: ["128 * (CONSUMERS + 1)", 1, 1]
grid: ["(NUM_SMS if STREAMK else min(cdiv(N if SWAP_AB else M, BM) * round_up(cdiv(M if SWAP_AB else N, BN), CLUSTER) * SPLIT_K, NUM_SMS // CLUSTER * CLUSTER)) if PERSISTENT else round_up(cdiv(cdiv(N if SWAP_AB else M, BM) * round_up(cdiv(M if SWAP_AB else N, BN), CLUSTER) * SPLIT_K, 1 + PINGPONG), CLUSTER)", 1, 1]
smem: "STAGES * ((0 if PANEL else BM) + BN) * 128 + 1024 + CONSUMERS * (EPI * BN * 128 if EPI else 9216) + PANEL * BM * cdiv(K, 64) * 128 + SPLIT_CLUSTER * BM * BN * 4"
workspace: "(round_up(cdiv(N if SWAP_AB else M, BM) * round_up(cdiv(M if SWAP_AB else N, BN), CLUSTER) * 4, 256) + cdiv(N if SWAP_AB else M, BM) * round_up(cdiv(M if SWAP_AB else N, BN), CLUSTER) * SPLIT_K * BM * BN * 4) if SPLIT_K > 1 and not SPLIT_CLUSTER else (256 if DYN else (round_up(2 * NUM_SMS, 64) * 4 + NUM_SMS * BM * BN * 4 if STREAMK else 0))"
requires: "cdiv(N if SWAP_AB else M, BM) * round_up(cdiv(M if SWAP_AB else N, BN), CLUSTER) * SPLIT_K < 4194304 and K % 8 == 0 and (EPI == 0 or N % 8 == 0) and (EPI_WIDE == 0 or N % 64 == 0) and (PANEL == 0 or STAGES * BN * 128 + 1024 + CONSUMERS * (EPI * BN * 128 if EPI else 9216) + BM * cdiv(K, 64) * 128 + 512 <= 232448) and (SPLIT_RS == 0 or cdiv(N if SWAP_AB else M, BM) * cdiv(M if SWAP_AB else N, BN) * SPLIT_K <= NUM_SMS) and (STREAMK == 0 or cdiv(K, 64) * NUM_SMS * NUM_SMS < 4294967296)"   # units < 2^22: the raster's float division (div_small); EPI > 0: a TMA map of C (16-byte row stride); PANEL: the BM x K panel fits; SPLIT_RS: one wave (a tile's splits wait for each other); STREAMK: its k block ranges in 32 bits
cooperative: "STREAMK or SPLIT_RS or (SPLIT_OWNER and PERSISTENT)"   # CTAs that wait on CTAs they cannot be sure were dispatched first: the whole grid resident at once, even beside other streams' kernels
tensor_maps:
  - {operand: A, box: ["BN if SWAP_AB else BM // CLUSTER", 64], swizzle: 128}
  - {operand: B, box: ["BM // CLUSTER if SWAP_AB else BN", 64], swizzle: 128}
  - {operand: C, box: [64, 64], swizzle: 128, when: "EPI > 0 and SWAP_AB == 0 and EPI_WIDE == 0 and BN >= 64"}
  - {operand: C, box: [64, 128], swizzle: 128, col_block: 64, when: "EPI > 0 and SWAP_AB == 0 and EPI_WIDE == 1"}
  - {operand: C, box: [64, 32], swizzle: 64, when: "EPI > 0 and SWAP_AB == 0 and BN % 64 >= 32"}
  - {operand: C, box: [64, 16], swizzle: 32, when: "EPI > 0 and SWAP_AB == 0 and BN % 32 == 16"}
  - {operand: C, box: [BN, 64], swizzle: 128, when: "EPI > 0 and SWAP_AB == 1"}
---*/
// Hopper (sm_90a) HGEMM: C[M,N] = A[M,K] * B[N,K]^T, fp16 in/out, fp32 accumulation.
//
// Pipeline (warp specialized; PERSISTENT: one CTA per SM):
//   warpgroup 0: producer; one thread issues TMA loads (128-byte swizzle, BK = 64) of A and B into a STAGES-deep ring.
//   warpgroups 1..C: consumers; each owns BM/C rows of the BM x BN tile, wgmma.m64nBNk16 from smem per k16 slice.
//   PINGPONG (C = 2): the consumers take alternate whole units (0, 2, ... / 1, 3, ...), so one's epilogue runs while
//     the other's wgmmas do; order mbarriers make the two k loops strictly alternate (no wait more than a lap ahead).
//   full[s]: the producer arms it with the stage's bytes, TMA completes it. empty[s]: one thread per consumer
//     warpgroup arrives once its wgmmas no longer read stage s. Both waited by parity ((i / STAGES) & 1).
// Work units: tiles (raster groups of GROUP tile-rows for L2 reuse) x SPLIT_K slices of K (a tile's splits adjacent,
//   or SPLIT_MAJOR: every tile's split 0 first, then split 1, ...).
// SPLIT_K > 1: each unit writes an fp32 partial to `workspace` and bumps its tile's counter; the last to arrive sums
//   the partials in split order (deterministic), writes C and resets the counter.
// SPLIT_OWNER: split SPLIT_K-1 reduces instead (its partial in registers; it waits (acquire) for the others' release
//   arrivals). Deadlock-free: a split waits only for lower-numbered units, taken or dispatched first.
// SPLIT_RS (one wave): each split owns BN / SPLIT_K columns, publishes the others' slices, arrives on its tile's
//   count (release; never reset), polls it for the launch's last arrival, then sums its slice in split order.
// SPLIT_CLUSTER (one unit per CTA): a tile's SPLIT_K CTAs are one cluster; each owns BN / SPLIT_K columns, sends the
//   other slices to their owners' smem (st.async, completing the owner's recv_bar), then sums its own in split order.
// SWAP_AB: C^T = B * A^T (kernel rows over N): a small M sits in wgmma's N; the epilogue stores transposed.
// PANEL (short K, persistent, no split-K): each CTA takes a contiguous range of units and keeps the row operand's
//   whole-K panel in smem across a row block's units; only column tiles stream through the ring (panel_full[kb]: one
//   per k block, armed just before its column tile; panel_empty: every consumer warp is done with the row block).
// STREAMK (persistent, G = NUM_SMS CTAs): after its whole tiles b, b + G, ..., CTA b streams k blocks [b I / G,
//   (b + 1) I / G) of the last r + G tiles (r = T mod G; I k blocks in all): at most three pieces a tile. A piece past
//   k block 0 stores its fp32 partial in its CTA's slot and adds its k blocks to the tile's counter (release); the piece
//   from k block 0 waits (acquire) for the rest, adds the partials in CTA order, stores C, zeroes the counter.
// DYN > 0 (persistent, no pairs, no split-K): each CTA takes a static (8 - DYN) / 8 share of the units, then claims
//   the rest one by one from a workspace counter, which producer warp 1 publishes in a UQ-slot smem queue
//   (uq_full / uq_empty). Every CTA claims once past the end; the last claim resets the counter.
// Epilogue, EPI = 0: each consumer stages 64 x EPI_CW chunks in smem and writes them with 16-byte stores.
// EPI > 0 (TMA store; SPLIT_K = 1): each consumer owns EPI staging buffers of 64 x BN fp16 (boxes of
//   64 columns, then 32 and 16, swizzled like C's maps: conflict-free stmatrix; SWAP_AB: the slice is C's BN rows x 64
//   columns, written by stmatrix.trans into one BN x 64 box of 128-byte rows). Per round of min(MT, EPI) slices: stmatrix,
//   fence to the async proxy, warpgroup sync, one thread issues and commits the TMA stores; it waits for their reads
//   only before reusing a buffer, so unit i's stores drain during unit i+1's wgmmas (EPI = 2 * min(MT, 2): i-1's).
//   The TMA unit clips past M and N. Stages are released before the epilogue; the producer runs ahead across units.
//   EPI_HINT = 1: the stores carry an L2 evict_first policy: C streaming through L2 does not push out A and B.
// EARLY_STORE (two or more 64-row slices per consumer): each slice's last wgmmas are a commit group of their own, and
//   slice mt is stored once `wgmma.wait_group MT-1-mt` returns, while the tensor cores run the later slices.
// CLUSTER = 2: CTA pairs take the two column tiles of one tile row and share the row tile (A's; with SWAP_AB B's):
//   each producer loads half its rows and multicasts them to both rings; a stage refills only when both CTAs released
//   it. Column tiles are padded to an even count (a tile past N computes zeros, its stores dropped).
#include <cuda_fp16.h>
#include <stdint.h>

struct alignas(64) TmaDesc { unsigned char bytes[128]; };

namespace evo_sm90 {

constexpr int BM = 128;                 // tile rows (kernel view)
constexpr int BN = 256;                 // tile cols = wgmma N
constexpr int BK = 64;                     // 64 fp16 = one 128-byte swizzle row
constexpr int STAGES = 4;
constexpr int CONSUMERS = 2;
constexpr int PERSISTENT = 1;
constexpr int GROUP = 16;
constexpr int SPLIT_K = 1;
constexpr int SWAP_AB = 0;
constexpr int PINGPONG = 0;
constexpr int EPI = 0;
constexpr int CLUSTER = 1;
constexpr int EPI_HINT = 0;
constexpr int PANEL = 0;
constexpr int SPLIT_CLUSTER = 0;
constexpr int SPLIT_RS = 0;
constexpr int SPLIT_OWNER = 0;
constexpr int SPLIT_MAJOR = 0;
constexpr int SPLIT_SKEW = 0;    // SPLIT_OWNER: k blocks each other split gives to the reducing split
constexpr int EPI_WIDE = 0;
constexpr int DYN = 0;
constexpr int STREAMK = 0;
constexpr int RING_SPLIT = 0;    // 1: the ring holds A's stages, then B's (CUTLASS's layout); 2: B's, then A's
constexpr int EARLY_STORE = 0;

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
// the 16-byte reads (a quarter warp: 128 contiguous bytes) are both free of bank conflicts. SWAP_AB stages
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
constexpr int SK_LOADS = pow2_div(CHUNKS, 8);  // STREAMK: a partial's float4 loads in flight at once
static_assert(WM % 64 == 0, "each consumer owns a multiple of 64 rows");
static_assert(BN % 8 == 0 && BN >= 16 && BN <= 256, "wgmma N");
static_assert(MT * BN <= ((PINGPONG || (CONSUMERS == 2 && SPLIT_K == 1)) ? (EPI ? 384 : 352) : 256),
              "at most 128 fp32 accumulators per thread (two consumers on whole tiles: 176 of 232 registers, 192 with "
              "the TMA-store epilogue)");
static_assert(STAGE_BYTES % 1024 == 0, "128B-swizzled tiles need 1024-byte alignment");
static_assert(PERSISTENT == 0 || PERSISTENT == 1, "PERSISTENT is 0 or 1");
static_assert(PINGPONG == 0 || (CONSUMERS == 2 && SPLIT_K == 1), "ping-pong: two consumers on whole tiles, no split-K");
static_assert(EPI == 0 || (SPLIT_K == 1 && BN % 16 == 0 && (EPI >= 1 && EPI <= 4)),
              "TMA-store epilogue: no split-K, BN a multiple of 16, 1 to 4 staging buffers");
static_assert(EPI_HINT == 0 || EPI > 0, "the L2 hint is for TMA stores");
static_assert(EPI_WIDE == 0 || (EPI > 0 && SWAP_AB == 0 && BN % 128 == 0),
              "wide C boxes: the TMA-store epilogue, 128-column box pairs (C^T's slices are one box already)");
static_assert(EARLY_STORE == 0 || (EPI > 0 && MT > 1 && EARLY_STORE <= 2),
              "early slice stores: the TMA-store epilogue of a consumer with two or more 64-row slices");
static_assert(PANEL == 0 || (SPLIT_K == 1 && CLUSTER == 1 && PINGPONG == 0 && PERSISTENT == 1),
              "panel: persistent CTAs on whole tiles, no multicast, no ping-pong");
static_assert(CLUSTER == 1 || (CLUSTER == 2 && SPLIT_RS == 0 && SPLIT_CLUSTER == 0 && (BM / CLUSTER) % 8 == 0),
              "row-tile multicast: pairs of CTAs on the same k split of two column tiles, 8-row swizzle atoms per half");
// TMA-store staging: per consumer EPI buffers of one 64-row slice (64 x BN fp16) in boxes of 64 columns, then one of 32
// and one of 16 for the rest (BN 112: 64 + 32 + 16; one C map per width, front matter), rows of 128, 64, 32 bytes, each
// swizzled like its span: TMA's S-byte pattern XORs 16-byte chunk q of row r with (r / (128 / S)) % (S / 16), so an
// stmatrix's 8 rows take 8 bank groups.
constexpr int EPI_N64 = BN / 64, EPI_N32 = BN % 64 / 32, EPI_N16 = BN % 32 / 16;  // boxes of each width
constexpr int EPI_BOX_BYTES = 64 * 64 * 2, EPI_BUF_BYTES = 64 * BN * 2;
template <int W>
__device__ __forceinline__ int swizzle_w(int r) { return (r / (64 / W)) % (W / 8); }
__device__ __forceinline__ int epi_swizzle(int r) { return swizzle_w<EPI_CW>(r); }  // EPI == 0's chunks
// 8-column chunk j's box: its width and first chunk
__device__ __forceinline__ constexpr int epi_box_w(int j) { return j < 8 * EPI_N64 ? 64 : j < 8 * EPI_N64 + 4 * EPI_N32 ? 32 : 16; }
__device__ __forceinline__ constexpr int epi_box_first(int j) { return epi_box_w(j) == 64 ? j / 8 * 8 : epi_box_w(j) == 32 ? 8 * EPI_N64 : 8 * EPI_N64 + 4 * EPI_N32; }
// EPI_WIDE: one TMA box covers EPI_LINES = 2 of those 64-column boxes side by side, through a 3-D map (64 columns,
// N / 64 blocks, M rows) whose box is (64, 2, 64): in shared memory row r's two 128-byte lines are lines 2r and 2r + 1
// of the box (swizzled by the line index), in C they are 256 contiguous bytes, written together.
constexpr int EPI_LINES = EPI_WIDE ? 2 : 1;
constexpr int EPI_STORE_W = 64 * EPI_LINES;  // columns per TMA store of the 64-column boxes
struct CMaps { const TmaDesc* m[3]; };  // the C maps by width: 64 (or EPI_WIDE), 32, 16, those BN has, in that order
constexpr int EPI_MAP32 = EPI_N64 > 0, EPI_MAP16 = (EPI_N64 > 0) + EPI_N32;
constexpr int EPI_CONSUMER_BYTES = EPI ? EPI * EPI_BUF_BYTES : EPI_BYTES;  // staging per consumer after the ring
// PANEL: the most k blocks a panel can hold beside the ring and the staging (the kernel's `requires`), one barrier each
constexpr int PANEL_KBS = PANEL ? (232448 - 512 - 1024 - STAGES * B_STAGE_BYTES - CONSUMERS * EPI_CONSUMER_BYTES) / PANEL_KB_BYTES : 1;
static_assert(SPLIT_CLUSTER == 0 || (SPLIT_K >= 2 && SPLIT_K <= 16 && PERSISTENT == 0 && CLUSTER == 1 && PANEL == 0 &&
                                     (BN / 8) % SPLIT_K == 0),
              "split-K cluster: 2-16 splits, one unit per CTA, BN / 8 column chunks dealt out evenly");
static_assert(SPLIT_RS == 0 || (SPLIT_K >= 2 && PERSISTENT == 0 && SPLIT_CLUSTER == 0 && CLUSTER == 1 && PANEL == 0 &&
                                (BN / 8) % SPLIT_K == 0),
              "split-K reduce-scatter: one unit per CTA, BN / 8 column chunks dealt out evenly over the splits");
static_assert(SPLIT_OWNER == 0 || SPLIT_K > 1, "SPLIT_OWNER: split-K only");
static_assert(SPLIT_OWNER == 0 || (SPLIT_RS == 0 && SPLIT_CLUSTER == 0), "SPLIT_OWNER: the workspace reduce");
static_assert(DYN == 0 || (PERSISTENT == 1 && CLUSTER == 1 && SPLIT_K == 1),
              "DYN: a persistent grid of single CTAs without split-K claims the units past its static share");
static_assert(SPLIT_MAJOR == 0 || (SPLIT_K > 1 && SPLIT_CLUSTER == 0 && PANEL == 0),
              "SPLIT_MAJOR: a unit order for split-K (a K-split cluster needs its splits adjacent)");
// split-K: one counter per tile in the workspace (SPLIT_RS: +SPLIT_K per launch, wrapped by `red.inc` at RS_WRAP)
constexpr unsigned RS_WRAP = static_cast<unsigned>(SPLIT_K) << 20;
// SPLIT_CLUSTER: the column slice each CTA owns (RED_J n8 chunks) and its receive buffer: one slot per sender rank of
// [consumer][mt][chunk of the slice][thread] float4 (BM * BN / SPLIT_K floats), SPLIT_K slots after the staging.
constexpr int RED_J = (SPLIT_CLUSTER || SPLIT_RS) ? BN / 8 / SPLIT_K : 1;
constexpr int RED_SLOT_BYTES = BM * BN * 4 / SPLIT_K;

__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }
// a / b for 0 <= a < 2^22, b > 0 (`requires`) by a float reciprocal, off by at most one, corrected by the remainder's
// sign (the integer division delayed the first TMA load)
__device__ __forceinline__ int div_small(int a, int b) {
  const int q = static_cast<int>(__fdividef(static_cast<float>(a), static_cast<float>(b)));
  const int r = a - q * b;
  return q + (r >= b) - (r < 0);
}

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
// Arrive on the barrier at the same offset in CTA `rank` of the cluster (may be this CTA); the default (.release, .cta)
// form, as CUTLASS's consumer release (the stage's wgmma reads completed before it)
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
// EPI_WIDE: the box at (64-column block c1, row c2) of C's 3-D map (its first coordinate, within the block, is 0).
__device__ __forceinline__ void tma_store_3d(const TmaDesc* map, uint32_t src, int c1, int c2, uint64_t policy) {
  if (EPI_HINT) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3, %4}], [%1], %5;" ::"l"(map),
                 "r"(src), "r"(0), "r"(c1), "r"(c2), "l"(policy)
                 : "memory");
  } else {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(map), "r"(src),
                 "r"(0), "r"(c1), "r"(c2)
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
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// SPLIT_RS: an arrival that releases its partial and steps the tile's count, wrapping at RS_WRAP (0 after RS_WRAP - 1)
__device__ __forceinline__ void inc_release_gpu(int* p) {
  asm volatile("red.release.gpu.global.inc.u32 [%0], %1;" ::"l"(p), "r"(RS_WRAP - 1) : "memory");
}
__device__ __forceinline__ int ld_relaxed_gpu(const int* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// An arrival that releases its partial (no return value, no acquire): SPLIT_OWNER's other splits add 1, STREAMK's
// later k ranges their k blocks
__device__ __forceinline__ void add_release_gpu(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
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
// scale_d == 0 overwrites D (first k slice of a tile). One specialisation per N used; its accumulators are
// operands %0 .. %(N/2 - 1) in groups of eight (EVO_ACC_R names them in the instruction, EVO_ACC_D binds them).
#define EVO_ACC_R0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define EVO_ACC_R1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define EVO_ACC_R2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define EVO_ACC_R3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define EVO_ACC_R4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define EVO_ACC_R5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define EVO_ACC_R6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define EVO_ACC_R7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define EVO_ACC_R8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define EVO_ACC_R9 "%72, %73, %74, %75, %76, %77, %78, %79"
#define EVO_ACC_R10 "%80, %81, %82, %83, %84, %85, %86, %87"
#define EVO_ACC_R11 "%88, %89, %90, %91, %92, %93, %94, %95"
#define EVO_ACC_R12 "%96, %97, %98, %99, %100, %101, %102, %103"
#define EVO_ACC_R13 "%104, %105, %106, %107, %108, %109, %110, %111"
#define EVO_ACC_R14 "%112, %113, %114, %115, %116, %117, %118, %119"
#define EVO_ACC_R15 "%120, %121, %122, %123, %124, %125, %126, %127"
#define EVO_ACC_D(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                     "+f"(d[i + 6]), "+f"(d[i + 7])
template <int N>
__device__ __forceinline__ void wgmma_m64k16(float* d, uint64_t da, uint64_t db, int scale_d);
// EVO_RS<g> / EVO_DS<g>: the first g groups of eight accumulators, in the instruction and as bound operands
#define EVO_RS1 EVO_ACC_R0
#define EVO_DS1 EVO_ACC_D(0)
#define EVO_RS2 EVO_RS1 ", " EVO_ACC_R1
#define EVO_DS2 EVO_DS1, EVO_ACC_D(8)
#define EVO_RS3 EVO_RS2 ", " EVO_ACC_R2
#define EVO_DS3 EVO_DS2, EVO_ACC_D(16)
#define EVO_RS4 EVO_RS3 ", " EVO_ACC_R3
#define EVO_DS4 EVO_DS3, EVO_ACC_D(24)
#define EVO_RS5 EVO_RS4 ", " EVO_ACC_R4
#define EVO_DS5 EVO_DS4, EVO_ACC_D(32)
#define EVO_RS6 EVO_RS5 ", " EVO_ACC_R5
#define EVO_DS6 EVO_DS5, EVO_ACC_D(40)
#define EVO_RS7 EVO_RS6 ", " EVO_ACC_R6
#define EVO_DS7 EVO_DS6, EVO_ACC_D(48)
#define EVO_RS8 EVO_RS7 ", " EVO_ACC_R7
#define EVO_DS8 EVO_DS7, EVO_ACC_D(56)
#define EVO_RS9 EVO_RS8 ", " EVO_ACC_R8
#define EVO_DS9 EVO_DS8, EVO_ACC_D(64)
#define EVO_RS10 EVO_RS9 ", " EVO_ACC_R9
#define EVO_DS10 EVO_DS9, EVO_ACC_D(72)
#define EVO_RS11 EVO_RS10 ", " EVO_ACC_R10
#define EVO_DS11 EVO_DS10, EVO_ACC_D(80)
#define EVO_RS12 EVO_RS11 ", " EVO_ACC_R11
#define EVO_DS12 EVO_DS11, EVO_ACC_D(88)
#define EVO_RS13 EVO_RS12 ", " EVO_ACC_R12
#define EVO_DS13 EVO_DS12, EVO_ACC_D(96)
#define EVO_RS14 EVO_RS13 ", " EVO_ACC_R13
#define EVO_DS14 EVO_DS13, EVO_ACC_D(104)
#define EVO_RS15 EVO_RS14 ", " EVO_ACC_R14
#define EVO_DS15 EVO_DS14, EVO_ACC_D(112)
#define EVO_RS16 EVO_RS15 ", " EVO_ACC_R15
#define EVO_DS16 EVO_DS15, EVO_ACC_D(120)
// wgmma m64nNk16 with G = N / 16 accumulator groups: operands %0 .. %(N/2 - 1), then da, db and scale_d
#define EVO_WGMMA(N, G, DA, DB, SC)                                                                              \
  template <> __device__ __forceinline__ void wgmma_m64k16<N>(float* d, uint64_t da, uint64_t db, int scale_d) {  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SC ", 0;\n"                                              \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 {" EVO_RS##G "}, %" #DA ", %" #DB       \
                 ", p, 1, 1, 0, 0;\n}\n"                                                                   \
                 : EVO_DS##G                                                                                \
                 : "l"(da), "l"(db), "r"(scale_d));                                                          \
  }
EVO_WGMMA(16, 1, 8, 9, 10)
EVO_WGMMA(32, 2, 16, 17, 18)
EVO_WGMMA(64, 4, 32, 33, 34)
EVO_WGMMA(80, 5, 40, 41, 42)
EVO_WGMMA(96, 6, 48, 49, 50)
EVO_WGMMA(112, 7, 56, 57, 58)
EVO_WGMMA(128, 8, 64, 65, 66)
EVO_WGMMA(144, 9, 72, 73, 74)
EVO_WGMMA(160, 10, 80, 81, 82)
EVO_WGMMA(176, 11, 88, 89, 90)
EVO_WGMMA(192, 12, 96, 97, 98)
EVO_WGMMA(224, 14, 112, 113, 114)
EVO_WGMMA(256, 16, 128, 129, 130)

// ---------------------------------------------------------------- work decomposition
struct Work {
  int tile, split;  // linear tile id, K slice id
  int m0, n0;       // top-left element of the tile (kernel view)
  int kb0, kb1;     // k blocks [kb0, kb1) of BK
};

// STREAMK: the tiles, the whole tiles dealt out first (a multiple of the grid), k blocks per tile and the stream's k
// blocks (those of the last tiles). Units >= tiles name pieces: tiles + 3 b + p is piece p of CTA b's range.
struct Stream {
  int tiles, dp, nk;
  unsigned iters;  // `requires`: iters * grid < 2^32, so the ranges' bounds take 32-bit divisions (64-bit ones are calls)
};
__device__ __forceinline__ Stream stream_of(int units, int K) {  // (STREAMK: a unit is a tile, no split, no pairs)
  Stream st{};
  if (STREAMK) {
    st.tiles = units;
    const int g = static_cast<int>(gridDim.x), r = st.tiles % g;
    st.dp = r == 0 ? st.tiles : max(st.tiles - r - g, 0);
    st.nk = cdiv(K, BK);
    st.iters = static_cast<unsigned>(st.tiles - st.dp) * st.nk;
  }
  return st;
}
// the first of CTA b's stream k blocks (b == gridDim.x: the end)
__device__ __forceinline__ unsigned stream_start(const Stream& st, int b) { return st.iters * b / gridDim.x; }
// the unit after every unit of this CTA
__device__ __forceinline__ int stream_end(const Stream& st) { return st.tiles + 3 * static_cast<int>(gridDim.x); }
// piece p of this CTA's range (its part of tile s0 / nk + p), or the end when the range stops before it
__device__ __forceinline__ int stream_piece(const Stream& st, int p) {
  const int b = static_cast<int>(blockIdx.x);
  const unsigned s0 = stream_start(st, b), s1 = stream_start(st, b + 1), nk = st.nk;
  if (s1 <= s0) return stream_end(st);
  return p == 0 || s1 > (s0 / nk + p) * nk ? st.tiles + 3 * b + p : stream_end(st);
}
// this CTA's first unit: its first whole tile, else its first piece
__device__ __forceinline__ int stream_first(const Stream& st) {
  const int b = static_cast<int>(blockIdx.x);
  return b < st.dp ? b : stream_piece(st, 0);
}
// this CTA's unit after u: whole tiles strided by the grid, then its pieces
__device__ __forceinline__ int stream_next(int u, const Stream& st) {
  const int g = static_cast<int>(gridDim.x);
  if (u < st.dp) return u + g < st.dp ? u + g : stream_piece(st, 0);
  const int p = (u - st.tiles) % 3;
  return p < 2 ? stream_piece(st, p + 1) : stream_end(st);
}
// piece u (>= tiles): its tile among the stream's, and its k blocks [kb0, kb1)
__device__ __forceinline__ void stream_range(const Stream& st, int u, int& ta, int& kb0, int& kb1) {
  const int b = (u - st.tiles) / 3, p = (u - st.tiles) % 3;
  const unsigned s0 = stream_start(st, b), s1 = stream_start(st, b + 1), nk = st.nk;
  ta = static_cast<int>(s0 / nk) + p;
  kb0 = p ? 0 : static_cast<int>(s0 - ta * nk);
  kb1 = static_cast<int>(min(s1 - ta * nk, nk));
}
// a tile's first piece (CTA b, k block 0 on) adds the partials of the CTAs b' > b with stream_start(b') before the
// tile's end whose ranges are not empty, in CTA order
__device__ __forceinline__ bool stream_empty(const Stream& st, int b) { return stream_start(st, b + 1) == stream_start(st, b); }

// Unit u -> (tile, split): tiles rastered in groups of GROUP tile-rows along M (CTAs in flight share B panels in L2);
// a tile's splits are adjacent units (pairs: adjacent pairs). STREAMK: a piece u >= tiles is k blocks [kb0, kb1).
__device__ __forceinline__ Work get_work(int u, int Mk, int Nk, int K, const Stream& st) {
  Work w;
  int skb0 = 0, skb1 = 0;
  if (STREAMK && u >= st.tiles) {
    int ta;
    stream_range(st, u, ta, skb0, skb1);
    u = st.dp + ta;  // its tile's unit
  }
  // CLUSTER > 1: the CTAs of a cluster take consecutive units, the same k split of a pair of column tiles (multicast
  // A tiles must cover the same k blocks); tiles are numbered over the pair-padded grid (the workspace's too)
  // SPLIT_MAJOR: split s of every tile before split s + 1 of any, so CTAs launched side by side stream the same k
  // blocks of neighbouring tiles (sharing A or B rows). A split still waits only for lower-numbered units.
  const int r = u % CLUSTER, q = u / CLUSTER;
  const int pairs = SPLIT_MAJOR ? cdiv(Mk, BM) * cdiv(cdiv(Nk, BN), CLUSTER) : 1;
  w.split = SPLIT_MAJOR ? q / pairs : q % SPLIT_K;
  const int pair = SPLIT_MAJOR ? q % pairs : q / SPLIT_K;
  w.tile = pair * CLUSTER + r;
  if (PANEL) {  // row blocks in order, column tiles fastest: a CTA's contiguous units share their row panel
    const int tn = cdiv(Nk, BN), rb = div_small(u, tn);  // (units < 2^22: the float division is exact)
    w.m0 = rb * BM;
    w.n0 = (u - rb * tn) * BN;
    w.kb0 = 0;
    w.kb1 = cdiv(K, BK);
    return w;
  }
  // CLUSTER > 1: raster over pairs of column tiles; CTA rank r of the cluster takes column tile 2 * pair column + r
  const int tiles_m = cdiv(Mk, BM), tiles_n = cdiv(cdiv(Nk, BN), CLUSTER);
  const int group_size = GROUP * tiles_n;
  const int group = div_small(pair, group_size);
  const int first_m = group * GROUP;
  const int gm = min(tiles_m - first_m, GROUP);
  const int in_group = pair - group * group_size;
  const int col = div_small(in_group, gm);
  w.m0 = (first_m + in_group - col * gm) * BM;
  w.n0 = (col * CLUSTER + r) * BN;
  const int kblocks = cdiv(K, BK);
  // SPLIT_SKEW (with SPLIT_OWNER): the other splits take SPLIT_SKEW k blocks fewer each and the reducing split the rest,
  // so their partials are published by the time its longer main loop ends
  const int per = (SPLIT_OWNER && SPLIT_SKEW) ? max(cdiv(kblocks, SPLIT_K) - SPLIT_SKEW, 0) : cdiv(kblocks, SPLIT_K);
  w.kb0 = min(w.split * per, kblocks);
  w.kb1 = (SPLIT_OWNER && SPLIT_SKEW && w.split == SPLIT_K - 1) ? kblocks : min(w.kb0 + per, kblocks);
  if (STREAMK && skb1 > 0) {
    w.kb0 = skb0;
    w.kb1 = skb1;
  }
  return w;
}

// CTA pairs: a cluster launch fills one GPC with consecutive clusters, so pair k takes raster pair v(k), k transposed
// over GPC_SPREAD rows (a bijection): one GPC's pairs spread over the raster.
constexpr int GPC_SPREAD = 8;
__device__ __forceinline__ int cluster_spread(int b) {
  const int k = b / CLUSTER, r = b % CLUSTER, nk = static_cast<int>(gridDim.x) / CLUSTER;
  const int j = k % GPC_SPREAD;
  return ((j * (nk / GPC_SPREAD) + min(j, nk % GPC_SPREAD)) + k / GPC_SPREAD) * CLUSTER + r;
}
// The units of this CTA: strided by the grid, or (PANEL) the contiguous range [first, end) of its share:
// b * units / grid in 32 bits (units < 2^22, grid < 2^10), as a 64-bit division's call delays the first load
__device__ __forceinline__ int panel_bound(int units, unsigned b) { return b * static_cast<unsigned>(units) / gridDim.x; }
__device__ __forceinline__ int unit_first(int units, const Stream& st) {
  if (CLUSTER > 1) return cluster_spread(static_cast<int>(blockIdx.x));  // (PANEL takes no pairs)
  if (STREAMK) return stream_first(st);
  return PANEL ? panel_bound(units, blockIdx.x) : static_cast<int>(blockIdx.x);
}
__device__ __forceinline__ int unit_end(int units, const Stream& st) {
  if (STREAMK) return stream_end(st);
  return PANEL ? panel_bound(units, blockIdx.x + 1) : units;
}
__device__ __forceinline__ int unit_step() { return PANEL ? 1 : static_cast<int>(gridDim.x); }
// this CTA's unit after u
__device__ __forceinline__ int unit_next(int u, const Stream& st) { return STREAMK ? stream_next(u, st) : u + unit_step(); }
// DYN: units of each CTA's static share; the pool [grid * share, units) is claimed at run time
__device__ __forceinline__ int dyn_share(int units) {
  return static_cast<int>(static_cast<long long>(units) * (8 - DYN) / 8 / gridDim.x);
}
// DYN: unit i of this CTA's static share
__device__ __forceinline__ int dyn_static_unit(int i, int share) {
  return PANEL ? static_cast<int>(blockIdx.x) * share + i : static_cast<int>(blockIdx.x) + i * static_cast<int>(gridDim.x);
}
constexpr int UQ = 2;  // DYN: slots of the unit queue (claims run at most this many units ahead of the consumers)
// DYN: claim the next unit of the pool (.release: evo/ptx_checks.py takes an atomic after a global store as an arrival).
__device__ __forceinline__ unsigned claim_unit(unsigned* counter) {
  unsigned r;
  asm volatile("atom.release.gpu.global.add.u32 %0, [%1], 1;" : "=r"(r) : "l"(counter) : "memory");
  return r;
}
// DYN: the counter back to zero for the next launch (which the stream orders after this one)
__device__ __forceinline__ void reset_claims(unsigned* counter) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" ::"l"(counter) : "memory");
}

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
// SPLIT_RS: sum this thread's fragments of split S's column slice (RED_J n8 chunks per 64-row block) over splits
// 0..SPLIT_K-1 (others' from the workspace, ours from registers). One instantiation per split: compile-time chunk
// indices keep the accumulators in registers, one round's loads in flight.
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

// EPI > 0: one consumer's WM x BN slice, 64 rows at a time: registers -> swizzled smem -> TMA store (clipped past M,
// N). `stage`: its first staging buffer; `k`: slices staged so far (buffer k % EPI); (row0, col0): the slice in C.
// Rounds of GRP = min(MT, EPI) slices: one buffer wait, two warpgroup barriers, one proxy fence, one bulk group.
// stmatrix writes four 8x8 fp16 matrices (an m64nN wgmma's accumulator layout is its fragment layout).
// EARLY_STORE: one slice per round (stored once its own wgmma group has completed).
constexpr int EPI_GRP = EPI == 0 || EARLY_STORE ? 1 : (MT < EPI ? MT : EPI);
static_assert(MT % EPI_GRP == 0, "the TMA-store rounds of min(MT, EPI) slices cover a consumer's MT slices exactly");
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// One round: slices [mt0, mt0 + G) of the consumer's tile (G buffers, one bulk group).
template <int G>
__device__ __forceinline__ void store_round_tma(const float (&acc)[MT][BN / 2], int mt0, uint32_t stage, int c,
                                                const CMaps& maps, int row0, int col0, int& k) {
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  // stmatrix.x4: lanes 8i..8i+7 address the 8 rows of matrix i; matrix i = (rows +8 * (i & 1), column chunk +(i >> 1))
  const int mi = lane / 8;
  const int r = warp * 16 + (mi & 1) * 8 + lane % 8;  // row of the slice this lane addresses
  // the round that last used these G buffers has finished reading them (EPI / G rounds rotate)
  if (tid == 0) bulk_wait_read<EPI / G - 1>();
  warpgroup_sync(c);
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int mt = mt0 + g;
    const uint32_t buf = stage + ((k + g) % EPI) * EPI_BUF_BYTES;
#pragma unroll
    for (int j = 0; j < BN / 8; j += 2) {
      const int jj = j + (mi >> 1);
      // row r's chunk jj in its box (j, j + 1 share one), swizzled like its map (EPI_WIDE: box jj / 16, line 2r + half);
      // SWAP_AB (transposed): lane's row is C's row n = 8 jj + lane % 8 of the BN x 64 box, its chunk q the slice's
      // kernel rows 8q .. 8q + 7 (C's columns), 128-byte swizzled
      const int w = epi_box_w(j), first = epi_box_first(j);
      const int line = EPI_WIDE ? r * 2 + (jj / 8) % 2 : r;
      const int sw = w == 64 ? swizzle_w<64>(line) : w == 32 ? swizzle_w<32>(line) : swizzle_w<16>(line);
      const int n = 8 * jj + lane % 8, q = 2 * warp + (mi & 1);
      const uint32_t addr = SWAP_AB    ? buf + n * 128 + ((q ^ (n % 8)) << 4)
                            : EPI_WIDE ? buf + (jj / 16) * (EPI_BOX_BYTES * 2) + line * 128 + (((jj % 8) ^ sw) << 4)
                                       : buf + first * 1024 + r * w * 2 + (((jj - first) ^ sw) << 4);
      const float* a = &acc[mt][4 * j];
      const uint32_t v0 = pack_half2(a[0], a[1]), v1 = pack_half2(a[2], a[3]), v2 = pack_half2(a[4], a[5]),
                     v3 = pack_half2(a[6], a[7]);
      if (SWAP_AB)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v0),
                     "r"(v1), "r"(v2), "r"(v3) : "memory");
      else
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v0), "r"(v1),
                     "r"(v2), "r"(v3) : "memory");
    }
  }
  fence_proxy_async();  // every writer: its smem writes before the TMA unit reads them
  warpgroup_sync(c);
  if (tid == 0) {
    const uint64_t policy = policy_evict_first();
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const uint32_t buf = stage + ((k + g) % EPI) * EPI_BUF_BYTES;
      const int row = row0 + (mt0 + g) * 64;
      if (SWAP_AB) {  // the slice is C's box at (row col0, col row): BN rows of 64 columns
        tma_store_2d(maps.m[0], buf, row, col0, policy);
        continue;
      }
#pragma unroll
      for (int b = 0; b < EPI_N64 / EPI_LINES; ++b) {
        if (EPI_WIDE)
          tma_store_3d(maps.m[0], buf + b * EPI_BOX_BYTES * 2, (col0 + b * EPI_STORE_W) / 64, row, policy);
        else
          tma_store_2d(maps.m[0], buf + b * EPI_BOX_BYTES, col0 + b * 64, row, policy);
      }
      if (EPI_N32) tma_store_2d(maps.m[EPI_MAP32], buf + EPI_N64 * EPI_BOX_BYTES, col0 + 64 * EPI_N64, row, policy);
      if (EPI_N16)
        tma_store_2d(maps.m[EPI_MAP16], buf + EPI_N64 * EPI_BOX_BYTES + EPI_N32 * (EPI_BOX_BYTES / 2),
                     col0 + 64 * EPI_N64 + 32 * EPI_N32, row, policy);
    }
    bulk_commit();
  }
  k += G;
}
__device__ __forceinline__ void store_tile_tma(const float (&acc)[MT][BN / 2], uint32_t stage, int c, const CMaps& maps,
                                               int row0, int col0, int& k) {
#pragma unroll
  for (int mt0 = 0; mt0 < MT; mt0 += EPI_GRP) store_round_tma<EPI_GRP>(acc, mt0, stage, c, maps, row0, col0, k);
}
// wgmma.wait_group with a count the unrolled slice loop knows (at most MT - 1 <= 3 groups left in flight)
__device__ __forceinline__ void wgmma_wait_upto(int n) {
  if (n >= 3) wgmma_wait<3>();
  else if (n == 2) wgmma_wait<2>();
  else if (n == 1) wgmma_wait<1>();
  else wgmma_wait<0>();
}

}  // namespace evo_sm90
using namespace evo_sm90;

#define EVO_EPI 0
#define EVO_C_MAPS (0 ? 1 : (256 >= 64) + (256 % 64 >= 32) + (256 % 32 == 16))  // C maps, EPI > 0
static_assert(EVO_C_MAPS == (SWAP_AB ? 1 : (EPI_N64 > 0) + EPI_N32 + EPI_N16), "one C map per box width (C^T: one)");
#if 1 > 1
#define EVO_CLUSTER_DIMS __cluster_dims__(1, 1, 1)
#elif 0
#define EVO_CLUSTER_DIMS __cluster_dims__(1, 1, 1)
#else
#define EVO_CLUSTER_DIMS
#endif

extern "C" __global__ void EVO_CLUSTER_DIMS __launch_bounds__(THREADS, 1)
    evo_gemm(const __half* A, const __half* B, __half* C, int M, int N, int K, float* workspace,
             const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB
#if EVO_EPI
             , const __grid_constant__ TmaDesc tmC  // C (M x N), then the maps of its narrower boxes (CMaps)
#if EVO_C_MAPS > 1
             , const __grid_constant__ TmaDesc tmC1
#endif
#if EVO_C_MAPS > 2
             , const __grid_constant__ TmaDesc tmC2
#endif
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
  __shared__ alignas(8) uint64_t panel_full[PANEL_KBS], panel_empty;  // PANEL: k block kb of the row panel has landed / the panel is no longer read
  __shared__ int s_last;  // split-K: this CTA is the last of its tile
  __shared__ int uq[UQ];  // DYN: the CTA's units in order (-1: no more)
  __shared__ alignas(8) uint64_t uq_full[UQ], uq_empty[UQ];  // DYN: a slot written / read by the producer and every consumer warp
  __shared__ alignas(8) uint64_t recv_bar;  // SPLIT_CLUSTER: the other splits' slices of ours have landed
  // Stage s: A tile (BM x 64, 128B-swizzled) at tiles + s*STAGE_BYTES, B tile (BN x 64) after it; RING_SPLIT 1: all
  // A tiles, then B's (2: B's first). Every tile is 1024-byte aligned.
  const uint32_t tiles = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t a0 = tiles + (RING_SPLIT == 2) * STAGES * B_STAGE_BYTES, b0 = tiles + (RING_SPLIT == 1) * STAGES * A_STAGE_BYTES;
  auto ring_a = [&](int st) { return a0 + st * (RING_SPLIT ? A_STAGE_BYTES : STAGE_BYTES); };
  auto ring_b = [&](int st) { return RING_SPLIT ? b0 + st * B_STAGE_BYTES : ring_a(st) + A_STAGE_BYTES; };
  // Epilogue staging (a buffer per consumer) after the ring, as a generic pointer.
  const uint32_t epi_stage_u32 = tiles + STAGES * STAGE_BYTES;  // EPI > 0: 1024-aligned (STAGE_BYTES % 1024 == 0)
  __half* epi_stage = reinterpret_cast<__half*>(smem_raw + (epi_stage_u32 - smem_u32(smem_raw)));
  // PANEL: the row panel after the staging buffers (its size depends on K), cdiv(K, BK) boxes of BM x 64.
  const uint32_t panel = epi_stage_u32 + CONSUMERS * EPI_CONSUMER_BYTES;  // 1024-aligned (9216 and BN * 128 are)
  const uint32_t red_buf = panel;  // SPLIT_CLUSTER: the receive slots (PANEL is 0 then)

  // warp-uniform as far as the compiler knows (a shuffle from lane 0): the consumers' ring addresses and wgmma
  // descriptors derived from it stay in uniform registers (no R2UR before every wgmma)
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int tid = threadIdx.x % 128;
  const int units = cdiv(Mk, BM) * (cdiv(cdiv(Nk, BN), CLUSTER) * CLUSTER) * SPLIT_K;
  const Stream sk = stream_of(units, K);
  const int u_end = unit_end(units, sk);

  // Producer (thread 0 only): the next k block to load is block kb of unit pu (work pw), into ring slot ps.
  int pu = unit_first(units, sk), pkb = 0, ps = 0;
  uint32_t pphase = 0;
  bool phave = false;
  Work pw{};
  int panel_m0 = -1;          // PANEL: the row block whose panel the producer loaded last
  bool pnew = false;          // PANEL: the current unit's k blocks bring the panel's (a new row block)
  bool pdone = false;         // DYN: the producer has read the queue's end (-1)
  int pi = 0, sq = 0;         // DYN scheduler: static units handed out; the queue slot the next unit goes to
  uint32_t sqphase = 0;
  int pq = 0;                 // DYN producer: the queue slot it reads next
  uint32_t pqphase = 0;
  // DYN (the scheduler thread): the CTA's next unit (its static share of `share` units, then claims), published to the
  // producer and the consumers; -1 when none is left
  auto next_dyn_unit = [&](int share) -> int {
    const int grid = static_cast<int>(gridDim.x);
    int v;
    if (pi < share) {
      v = dyn_static_unit(pi++, share);
    } else {
      unsigned* counter = reinterpret_cast<unsigned*>(workspace);
      const int pool = units - grid * share;
      const int r = static_cast<int>(claim_unit(counter));
      v = r < pool ? grid * share + r : -1;
      if (r == pool + grid - 1) reset_claims(counter);  // the last claim of the launch: every CTA has made its last
    }
    mbar_wait(smem_u32(&uq_empty[sq]), sqphase ^ 1);  // first pass: fresh barrier, returns at once
    uq[sq] = v;
    mbar_arrive(smem_u32(&uq_full[sq]));  // release: the readers' acquire-wait sees the slot
    if (++sq == UQ) { sq = 0; sqphase ^= 1; }
    return v;
  };
  auto producer_fetch_unit = [&]() -> int {  // DYN: the producer's read of the queue
    mbar_wait(smem_u32(&uq_full[pq]), pqphase);
    const int v = uq[pq];
    mbar_arrive(smem_u32(&uq_empty[pq]));
    if (++pq == UQ) { pq = 0; pqphase ^= 1; }
    return v;
  };
  uint32_t panel_phase = 0;   // PANEL: panels loaded so far, mod 2
  const uint32_t prank = CLUSTER > 1 ? cluster_rank() : 0;  // CLUSTER > 1: which half of the A tile we load
  // Issue the next k block's loads (waiting for its slot to be free); false once this CTA's units are done.
  auto produce_next = [&]() -> bool {
    while (!phave || pkb >= pw.kb1) {
      if (DYN) {
        if (pdone) return false;
        pu = producer_fetch_unit();
        if (pu < 0) { pdone = true; return false; }
      } else {
        if (phave) pu = unit_next(pu, sk);
        if (pu >= u_end) return false;
      }
      pw = get_work(pu, Mk, Nk, K, sk);
      pkb = pw.kb0;
      phave = true;
      pnew = PANEL && pw.m0 != panel_m0;
      if (pnew) {  // a new row block: its whole-K panel, once the last one is read (k block by k block, below)
        mbar_wait(smem_u32(&panel_empty), panel_phase ^ 1);  // first panel: fresh barrier, returns at once
        panel_m0 = pw.m0;
        panel_phase ^= 1;
      }
    }
    if (pnew) {  // the panel's k block pkb goes right before the column tile it meets, on a barrier of its own
      const uint32_t pf = smem_u32(&panel_full[pkb]);
      mbar_arrive_expect_tx(pf, PANEL_KB_BYTES);
      tma_load_2d(panel + pkb * PANEL_KB_BYTES, map_rows, pf, pkb * BK, pw.m0);
    }
    mbar_wait(smem_u32(&empty_bar[ps]), pphase ^ 1);  // first pass: fresh barrier, returns at once
    const uint32_t full = smem_u32(&full_bar[ps]);
    mbar_arrive_expect_tx(full, STAGE_BYTES);          // OOB parts of a box still count (zero-filled)
    const uint32_t a_dst = ring_a(ps);
    if (CLUSTER > 1) {  // our half of the A tile's rows, into the same place of every CTA of the cluster
      tma_load_2d_mc(a_dst + prank * (BM / CLUSTER) * 128, map_rows, full, pkb * BK, pw.m0 + prank * (BM / CLUSTER),
                     (1 << CLUSTER) - 1);
    } else if (!PANEL) {  // (PANEL: the row tile is in the panel)
      tma_load_2d(a_dst, map_rows, full, pkb * BK, pw.m0);
    }
    tma_load_2d(ring_b(ps), map_cols, full, pkb * BK, pw.n0);
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
    if (DYN)
      for (int q = 0; q < UQ; ++q) {
        mbar_init(smem_u32(&uq_full[q]), 1);
        mbar_init(smem_u32(&uq_empty[q]), CONSUMERS * 4 + 1);  // every consumer warp and the producer
      }
    if (PANEL) {
      for (int kb = 0; kb < PANEL_KBS; ++kb) mbar_init(smem_u32(&panel_full[kb]), 1);
      mbar_init(smem_u32(&panel_empty), CONSUMERS * 4);
    }
    if (SPLIT_CLUSTER) {  // armed before the cluster arrive below: no peer sends before it
      mbar_init(smem_u32(&recv_bar), 1);
      mbar_arrive_expect_tx(smem_u32(&recv_bar), (SPLIT_K - 1) * RED_SLOT_BYTES);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    // Without a cluster the first k block's loads leave before the block-wide barrier (every slot is free). Only
    // one: the whole ring here would hold the consumers at the barrier while the TMA unit takes the requests.
    if (CLUSTER == 1 && !DYN) produce_next();  // (DYN: the first unit comes from the scheduler)
  }
  if (CLUSTER > 1) {  // the peer multicasts into our ring and arrives on our barriers: they must be initialised
    cluster_arrive_relaxed();
    cluster_wait();
  } else {
    __syncthreads();
    // SPLIT_CLUSTER: peers write into our smem only after their main loops; the consumers wait for this barrier
    // (every CTA started) just before, so it hides behind the main loop. The producer warps arrive and exit.
    if (SPLIT_CLUSTER) cluster_arrive_relaxed();
  }

  if (wg == 0) {
    // ------------------------------------------------------------ producer warpgroup
    if (CONSUMERS > 1) setmaxnreg_dec<40>();
    if (tid == 0) {
      while (produce_next()) {
      }
    } else if (DYN && tid == 32) {  // the scheduler: a claim's round trip (and its release) never holds the loads
      const int share = dyn_share(units);
      while (next_dyn_unit(share) >= 0) {
      }
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
#if EVO_C_MAPS > 2
    const CMaps cmaps = {&tmC, &tmC1, &tmC2};
#elif EVO_C_MAPS > 1
    const CMaps cmaps = {&tmC, &tmC1};
#else
    const CMaps cmaps = {&tmC};
#endif
    if (tid == 0)
      for (int i = 0; i < EVO_C_MAPS; ++i) tma_prefetch_desc(cmaps.m[i]);
#endif
    int cpanel_m0 = -1;         // PANEL: the row block of the panel this consumer reads
    uint32_t cpanel_phase = 0;  // the phase parity of the panel being read (waits on a landed panel return at once)
    int cq = 0;                 // DYN: the queue slot of this consumer's next read
    uint32_t cqphase = 0;
    auto fetch_unit = [&]() -> int {  // DYN: the CTA's next unit from the scheduler's queue (every thread)
      mbar_wait(smem_u32(&uq_full[cq]), cqphase);
      const int v = uq[cq];
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_u32(&uq_empty[cq]));
      if (++cq == UQ) { cq = 0; cqphase ^= 1; }
      return v;
    };
    int u_next = 0;             // the unit after the current one, once asked for (have_next)
    bool have_next = false;
    auto next_of = [&](int cur) -> int {
      if (!have_next) {
        u_next = DYN ? fetch_unit() : unit_next(cur, sk);
        have_next = true;
      }
      return u_next;
    };
    auto is_unit = [&](int v) { return DYN ? v >= 0 : v < u_end; };
    for (int u = DYN ? fetch_unit() : unit_first(units, sk); is_unit(u); u = next_of(u), have_next = false, ++j) {
      const Work w = get_work(u, Mk, Nk, K, sk);
      const int nk = w.kb1 - w.kb0;
      const bool fresh = PANEL && w.m0 != cpanel_m0;  // a new row block: its panel lands k block by k block
      if (fresh) {
        cpanel_phase = cpanel_m0 < 0 ? 0 : cpanel_phase ^ 1;
        cpanel_m0 = w.m0;
      }
      auto panel_wait = [&](int i) {  // PANEL: k block i of this unit's row panel has landed
        if (fresh) mbar_wait(smem_u32(&panel_full[w.kb0 + i]), cpanel_phase);
      };
      if (PINGPONG && (j & 1) != c) {  // the other consumer's unit: step over its stages of the ring
        s += nk;
        while (s >= STAGES) { s -= STAGES; phase ^= 1; }
        continue;
      }
      if (!EARLY_STORE && nk == 0) {  // empty K slice (SPLIT_K > k blocks): the partial is zero (EARLY_STORE: no split-K)
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
      // EARLY_STORE: a commit group per slice's last wgmmas (slice 0 stored while later slices compute). 2 with two
      // units' k blocks in the ring (2 * nk <= STAGES): slice by slice over the whole K, stages released after the last
      // slice's wait; else the last k block slice by slice (the stage before it freed after slice 0's wait).
      const bool whole = EARLY_STORE == 2 && 2 * nk <= STAGES;
      // Where k block i lies in smem (ring stage st; PANEL: the panel's). Descriptors are made once: a k slice (+32 B)
      // or a 64-row block (+8 KB) adds offset / 16 to the address field (smem < 2^18: the 14-bit field never carries)
      auto a_at = [&](int st, int i) {
        return (PANEL ? panel + (w.kb0 + i) * PANEL_KB_BYTES : ring_a(st)) + row_off * 128;
      };
      // PANEL, once every wgmma of the unit has ended: the row block's last unit of this CTA frees its panel
      auto release_panel = [&]() {
        if (!PANEL) return;
        const int nx = next_of(u);  // (every thread: DYN reads the queue)
        if (lane == 0 && (!is_unit(nx) || get_work(nx, Mk, Nk, K, sk).m0 != w.m0)) mbar_arrive(smem_u32(&panel_empty));
      };
      // EARLY_STORE: one slice's wgmmas over one k block (da: the slice's 64 rows of it)
      auto slice_kblock = [&](float (&d)[BN / 2], uint64_t da, uint64_t db, int i) {
#pragma unroll
        for (int k = 0; k < BK / 16; ++k)
          wgmma_m64k16<BN>(d, da + static_cast<uint64_t>(k * 32 / 16), db + static_cast<uint64_t>(k * 32 / 16), (i | k) != 0);
      };
      if (whole) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          int ss = s;
          uint32_t pp = phase;
          for (int i = 0; i < nk; ++i) {
            if (mt == 0) mbar_wait(smem_u32(&full_bar[ss]), pp);  // whole: the first pass waits
            if (mt == 0) panel_wait(i);
            const uint32_t a_base = a_at(ss, i), b_base = ring_b(ss);
            wgmma_fence();
            slice_kblock(acc[mt], desc_sw128(a_base) + static_cast<uint64_t>(mt * 64 * 128 / 16), desc_sw128(b_base), i);
            if (++ss == STAGES) { ss = 0; pp ^= 1; }
          }
          wgmma_commit();
        }
        for (int i = 0; i < nk; ++i) {
          prev = s;
          if (++s == STAGES) { s = 0; phase ^= 1; }
        }
      } else {
        // (EARLY_STORE: the last k block after the loop, so every path to the epilogue ends with the slices' groups)
        for (int i = 0; i < (EARLY_STORE ? nk - 1 : nk); ++i) {
          mbar_wait(smem_u32(&full_bar[s]), phase);
          panel_wait(i);
          const uint32_t a_base = a_at(s, i), b_base = ring_b(s);
          wgmma_fence();
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
        if (EARLY_STORE) {  // the last k block (K > 0: nk >= 1): one commit group per slice
          const int i = nk - 1;
          mbar_wait(smem_u32(full_bar + s), phase);  // last k block
          panel_wait(i);
          const uint32_t a_base = a_at(s, i), b_base = ring_b(s);
          wgmma_fence();
          const uint64_t da0 = desc_sw128(a_base), db0 = desc_sw128(b_base);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            slice_kblock(acc[mt], da0 + static_cast<uint64_t>(mt * 64 * 128 / 16), db0, i);
            wgmma_commit();
          }
          prev = s;
          if (++s == STAGES) { s = 0; phase ^= 1; }
        }
      }
      if (PINGPONG) {  // every wgmma of this unit is issued: the other consumer may start its k loop
        __syncwarp();
        if (lane == 0) mbar_arrive(smem_u32(&order_bar[1 - c]));
        ++t;
      }
      if (!EARLY_STORE) {
        wgmma_wait<0>();
        if (nk > 0 && tid == 0) release_stage(smem_u32(&empty_bar[prev]));
        release_panel();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) reg_fence(acc[mt][i]);
      }

      if (STREAMK && u >= sk.tiles && nk < sk.nk) {
        // ---------------------------------------------------- stream-K piece: part of its tile's k blocks
        int* counter = reinterpret_cast<int*>(workspace) + (w.tile - sk.dp);
        float4* slots = reinterpret_cast<float4*>(workspace + (2 * gridDim.x + 63) / 64 * 64);  // BM x BN floats per CTA
        const bool lead = PINGPONG ? tid == 0 : threadIdx.x == 128;  // the piece's one arriving / waiting thread
        if (w.kb0 > 0) {  // a later k range: the partial to this CTA's slot, then its k blocks arrive (release)
          float4* mine = slots + static_cast<size_t>(blockIdx.x) * (BM * BN / 4) + row_off * BN / 4;
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
              __stcg(mine + (mt * (BN / 8) + j) * 128 + tid,
                     make_float4(acc[mt][4 * j], acc[mt][4 * j + 1], acc[mt][4 * j + 2], acc[mt][4 * j + 3]));
          if (PINGPONG) warpgroup_sync(c); else consumer_sync();
          if (lead) add_release_gpu(counter, nk);
          continue;
        }
        // k block 0 on: once the later ranges' k blocks have all arrived (acquire), their partials in CTA order
        if (lead) {
          while (ld_acquire_gpu(counter) != sk.nk - nk) __nanosleep(32);
          *counter = 0;  // every piece of the tile has arrived: nothing adds to it again in this launch
        }
        if (PINGPONG) warpgroup_sync(c); else consumer_sync();
        const unsigned tile_end = static_cast<unsigned>(w.tile - sk.dp + 1) * sk.nk;
#pragma unroll 1
        for (int b = static_cast<int>(blockIdx.x) + 1; stream_start(sk, b) < tile_end; ++b) {
          if (stream_empty(sk, b)) continue;
          const float4* src = slots + static_cast<size_t>(b) * (BM * BN / 4) + row_off * BN / 4;
#pragma unroll
          for (int q0 = 0; q0 < CHUNKS; q0 += SK_LOADS) {  // SK_LOADS loads in flight, then their adds
            float4 v[SK_LOADS];
#pragma unroll
            for (int q = 0; q < SK_LOADS; ++q) v[q] = __ldcg(src + (q0 + q) * 128 + tid);
#pragma unroll
            for (int q = 0; q < SK_LOADS; ++q) {
              float* a = &acc[(q0 + q) / (BN / 8)][4 * ((q0 + q) % (BN / 8))];
              a[0] += v[q].x; a[1] += v[q].y; a[2] += v[q].z; a[3] += v[q].w;
            }
          }
        }
      }
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
        float* parts = workspace + ((num_tiles * 4 + 255) / 256) * 64;
        // Layout of one partial: [consumer][mt][n8 chunk][thread][4 floats], coalesced float4s.
        const size_t tile_floats = static_cast<size_t>(BM) * BN;
        float4* mine = reinterpret_cast<float4*>(parts + (static_cast<size_t>(w.tile) * SPLIT_K + w.split) * tile_floats +
                                                 static_cast<size_t>(c) * WM * BN);
        // Publish (SPLIT_RS: the chunks the other splits sum), consumer barrier, then one thread's acq_rel ticket (its
        // release, cumulative, orders every consumer's stores; its acquire shows the earlier splits'); the last arrival
        // resets the count. SPLIT_OWNER: the reducer publishes nothing and waits (acquire) for the others' releases.
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
          int* arrivals = counters + w.tile;
          if (SPLIT_RS) {
            // read before our arrival, the count is in [n, n + SPLIT_K) for the launch's base n (a multiple of
            // SPLIT_K): the tile is complete at n + SPLIT_K (mod RS_WRAP)
            const unsigned seen = static_cast<unsigned>(ld_relaxed_gpu(arrivals));
            const unsigned done = (seen - seen % SPLIT_K + SPLIT_K) % RS_WRAP;
            inc_release_gpu(arrivals);
            while (static_cast<unsigned>(ld_acquire_gpu(arrivals)) != done) __nanosleep(32);
          } else if (SPLIT_OWNER) {
            if (owner) {
              while (ld_acquire_gpu(arrivals) != SPLIT_K - 1) __nanosleep(32);
              *arrivals = 0;  // every other split has arrived: nothing adds to it again in this launch
            } else {
              add_release_gpu(arrivals, 1);
            }
            s_last = owner;
          } else {
            s_last = ticket_acq_rel(arrivals) == SPLIT_K - 1;
            if (s_last) *arrivals = 0;
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
      if (EARLY_STORE) {  // slice by slice, each once its group has completed (EARLY_STORE implies SPLIT_K == 1)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          wgmma_wait_upto(MT - 1 - mt);  // slice mt's group and every group before it have completed
          // the stages still read: the last k block's, and before it (the whole K: every k block is read by every
          // slice) the unit's other ones, or the k block before the last, whose group completed before slice 0's
          if (tid == 0 && mt == 0 && !whole && nk > 1) release_stage(smem_u32(&empty_bar[(s + STAGES - 2) % STAGES]));
          if (mt == MT - 1) {  // every wgmma of the unit has ended
            if (tid == 0)
              for (int h = whole ? nk : 1; h > 0; --h) release_stage(smem_u32(&empty_bar[(s + STAGES - h) % STAGES]));
            release_panel();
          }
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) reg_fence(acc[mt][i]);
          store_round_tma<1>(acc, mt, epi_stage_u32 + c * EPI_CONSUMER_BYTES, c, cmaps, w.m0 + row_off, w.n0, epi_k);
        }
      } else
        store_tile_tma(acc, epi_stage_u32 + c * EPI_CONSUMER_BYTES, c, cmaps, w.m0 + row_off, w.n0, epi_k);
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

/*---evo
family: mma_small_sm80
archs: [sm_80, sm_90a]
params: {BK: 64, BM: 32, BN: 32, CLK: 1, EPI: 1, OCC: 1, PUSH: 1, RED: 0, SPLIT_K: 1, STAGES: 8,
  WARPS_K: 4, WARPS_M: 1, WARPS_N: 1}
block: ["WARPS_M * WARPS_N * WARPS_K * 32", 1, 1]
grid: ["cdiv(N, BN)", "cdiv(M, BM)", "SPLIT_K * CLK"]
smem: "max(min(STAGES, max(2, cdiv(K, BK) // (SPLIT_K * CLK) + 1)) * (BM + BN) * BK * 2, (WARPS_K - 1) * BM * BN * 4, EPI * BM * (BN + 8) * 2, (CLK > 1) * BM * (BN + 8) * 4) + (CLK > 1) * PUSH * BM * BN * 4"
workspace: "0 if SPLIT_K * CLK == 1 else (SPLIT_K * CLK + RED * SPLIT_K // 4) * cdiv(M, BM) * cdiv(N, BN) * BM * BN * 4 + cdiv(M, BM) * cdiv(N, BN) * (SPLIT_K * CLK // 4 + 1 + CLK) * 4"
requires: "M == 512 and N == 256 and K == 2048 and K % 8 == 0 and cdiv(K, BK) % (SPLIT_K * CLK) == 0 and M * N * K <= 8589934592"
---*/
// Low-latency tensor-core HGEMM for small shapes, the shape compiled in (sm_80+, sm_90a). It takes shapes of
// up to 2^33 multiply-adds (~17 GFLOP, ~25 us on an H200): beyond that the libraries' and the wgmma families'
// large tiles win, and searches of large shapes need not compile and time this family's starts.
//
//   C[M,N] = A[M,K] * B[N,K]^T      (A, B, C row-major fp16: both operands K-major, "TN")
//
// What makes it cheap where a library call is mostly launch, prologue and epilogue:
//   * M, N, K are compile-time constants (the family renders one kernel per shape; `requires`
//     pins it): no runtime divisions, edge predicates vanish where the tiles divide the shape,
//     and there the K loop (KT_PER tiles of BK) is fully unrolled up to 64 tiles.
//   * Tiny CTAs: 1-4 warps, tiles from 16 rows (BM 16..128, BN 16..128; 8 warps for tiles of
//     64x128 / 128x96 and up), so small outputs still give many CTAs; the tile is taken straight from
//     blockIdx (no rasterizer).
//   * The first cp.async is issued right after the tile origin is known: the prologue's
//     STAGES-1 tiles go out before the accumulators are even cleared.
//   * mma.sync m16n8k16 (fp32 accumulate) fed by ldmatrix.x4 from XOR-swizzled shared memory
//     (chunk L of 16 bytes lives at L ^ ((L >> 3) & 7): conflict-free ldmatrix and cp.async),
//     STAGES-deep cp.async ring (at most a split's K tiles + 1: short K keeps shared memory
//     small and occupancy high), one __syncthreads per K tile.
//   * WARPS_K: the warps of a CTA split each K tile's k16 steps; partial accumulators are
//     summed through shared memory in fixed warp order (deterministic).
//   * SPLIT_K: CTAs (grid z) split K. Each publishes its fp32 partial (fragment order, 16-byte
//     coalesced stores), then one thread takes a ticket with atom.add.acq_rel.gpu after a CTA
//     barrier (release is cumulative: it orders every thread's partial). The CTA drawing the
//     last ticket sums the partials in fixed order 0..SPLIT_K-1, its own from registers
//     (deterministic whichever CTA arrives last), writes C and resets the ticket to zero.
//     No sequentially consistent fence (__threadfence / membar.sc) anywhere.
//   * RED (SPLIT_K >= 8): a two-level reduce. Groups of 4 splits take a group ticket; the last
//     of a group sums its 4 partials and publishes the group sum behind a second ticket, whose
//     last CTA sums the SPLIT_K / 4 group sums (fixed tree: deterministic). The critical path
//     reads 3 + SPLIT_K/4 - 1 partials instead of SPLIT_K - 1.
//   * EPI: 0 stores C straight from the mma fragments (half2); 1 stages the tile in shared
//     memory (padded rows) and writes whole 16-byte row chunks (N % 8 == 0, else as EPI 0).
//   * OCC: 2 caps the registers so that two 8-warp CTAs share an SM (<= 128 per thread).
//   * CLK (sm_90a): the CLK CTAs of a thread-block cluster (compile-time __cluster_dims__(1, 1,
//     CLK), consecutive grid z) split a tile's K range further. Each stages its fp32 partial in
//     its own shared memory (row-major, padded rows), one cluster barrier (arrive.release /
//     wait.acquire), then cluster rank r sums C-row slice r (BM / CLK rows) over the CLK
//     partials in fixed order 0..CLK-1, read through distributed shared memory (mapa + ld.shared::cluster), and stores C (8-byte
//     half4 rows). With SPLIT_K > 1 on top, rank r publishes its fp32 slice instead and takes
//     the acq_rel ticket of (tile, r); the last of the SPLIT_K clusters sums the slices in
//     order g = 0..SPLIT_K-1 and stores C. A second cluster barrier before exit keeps each
//     CTA's shared memory alive while its peers read it. PUSH (the default): no barrier before the
//     sums; once its partial is staged, each CTA sends every rank r its slice r with st.async into
//     r's receive slots ([CLK][BM / CLK][BN] fp32 beside the ring), the bytes completing r's receive
//     mbarrier (initialised and armed before the main loop, published by a relaxed cluster arrive
//     whose wait comes only before the first send); each rank waits for its own slots and sums them
//     locally in the same order 0..CLK-1 (the same bits as the pull), and the exit barrier is arrived
//     at right after that wait. No partial goes through L2 when
//     SPLIT_K == 1. Built for sm_80 (no clusters), the same instance treats the cluster's
//     CTAs as SPLIT_K * CLK global splits (the ticket path above): correct everywhere, the
//     cluster reduce only where the hardware has it. (CLK: the name evo.prior, the cost model
//     and the mutation moves know for "cluster CTAs splitting K", as in wgmma_skinny_sm90.)
#include <cuda_fp16.h>
#include <cstdint>

namespace {

constexpr int kM = 512;
constexpr int kN = 256;
constexpr int kK = 2048;
constexpr int BM = 32;
constexpr int BN = 32;
constexpr int BK = 64;
constexpr int WARPS_M = 1;
constexpr int WARPS_N = 1;
constexpr int WARPS_K = 4;
constexpr int STAGES_MAX = 8;   // ring depth asked for; STAGES: what a split's K tiles can use
constexpr int SPLIT_K = 1;
constexpr int EPI = 1;
constexpr int RED = 0;
constexpr int OCC = 1;               // CTAs per SM the register budget must allow (__launch_bounds__)
constexpr int CLK = 1;               // CTAs of a cluster splitting a tile's K (DSMEM reduce, sm_90+)
constexpr int PUSH_ASKED = 1;      // 1: slices sent to their owners (st.async + mbarrier), no barrier before the sums
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr int CL = 1;                      // no clusters before sm_90: the cluster's CTAs are global splits
#else
constexpr int CL = CLK;
#endif
constexpr int SPLITS = SPLIT_K * CLK;      // CTAs along K (grid z)
constexpr int GSPLIT = SPLITS / CL;        // K splits reduced through global memory (acq_rel ticket)

constexpr int WARPS_MN = WARPS_M * WARPS_N;
constexpr int THREADS = WARPS_MN * WARPS_K * 32;
constexpr int WM = BM / WARPS_M;            // warp tile rows
constexpr int WN = BN / WARPS_N;            // warp tile cols
constexpr int MI = WM / 16;                 // m16 mma tiles per warp
constexpr int NI = WN / 8;                  // n8 mma tiles per warp
constexpr int CPR = BK / 8;                 // 16-byte chunks per smem row
constexpr int KSTEPS = BK / 16;             // k16 steps per K tile
constexpr int KS_PER_WARP = KSTEPS / WARPS_K;
constexpr int KT = (kK + BK - 1) / BK;      // K tiles of the whole problem
constexpr int KT_PER = KT / SPLITS;         // K tiles of one split (`requires`: KT % SPLITS == 0)
constexpr int TILES_N = (kN + BN - 1) / BN;
constexpr int TILES_M = (kM + BM - 1) / BM;
constexpr int A_STAGE = BM * BK;            // halves per stage
constexpr int B_STAGE = BN * BK;
constexpr bool FULL_M = kM % BM == 0;       // no row predicates on A / C
constexpr bool FULL_N = kN % BN == 0;       // no row predicates on B, column predicates on C
constexpr bool FULL_K = kK % BK == 0;       // no K predicates
constexpr int FRAG4 = WARPS_MN * MI * NI * 32;  // float4 fragments of one BM x BN tile
constexpr int STAGES = STAGES_MAX < KT_PER + 1 ? STAGES_MAX : (KT_PER + 1 < 2 ? 2 : KT_PER + 1);  // no idle smem
// The K loop is fully unrolled (stage indices become constants) when the tiles divide the shape and a split has
// at most 64 K tiles; otherwise it is unrolled by STAGES (off-tile shapes with the full unroll spilled: ptxas
// kept every tile's row predicates live at once).
constexpr int UNROLL = (FULL_M && FULL_N && FULL_K && KT_PER <= 64) ? KT_PER : STAGES;
constexpr bool EPI_STAGED = EPI == 1 && kN % 8 == 0;   // 16-byte rows of C need N % 8 == 0
constexpr int SC_LD = BN + 8;                          // staged C tile row stride (halves)
constexpr int TILES = TILES_M * TILES_N;
constexpr int GS = RED && GSPLIT >= 8 ? 4 : GSPLIT;     // splits per first-level group of the split-K reduce
constexpr int GROUPS = GSPLIT / GS;                     // second level (RED): the group sums
constexpr int RS = BM / CL;                             // cluster reduce: C rows of the slice each rank sums
constexpr int RP = BN + 8;                              // fp32 row pitch of a staged partial (conflict-free float2)
constexpr int ITEMS = RS * BN / 4;                      // float4s of one slice
constexpr bool PUSH = CL > 1 && PUSH_ASKED == 1;        // (an sm_80 build has no cluster: nothing to send)
constexpr int RING_BYTES = STAGES * (A_STAGE + B_STAGE) * 2;
constexpr int RED_BYTES = (WARPS_K - 1) * BM * BN * 4 > BM * RP * 4 ? (WARPS_K - 1) * BM * BN * 4 : BM * RP * 4;
// PUSH: the CLK receive slots ([CLK][RS][BN] fp32) after everything else the CTA stages (the front matter's smem
// is the same max plus BM * BN * 4; every term is a multiple of 16 bytes)
constexpr int RECV_OFF = RING_BYTES > RED_BYTES ? RING_BYTES : RED_BYTES;

static_assert(BK == 32 || BK == 64, "swizzle is laid out for BK = 32 or 64");
static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16x16");
static_assert(KSTEPS % WARPS_K == 0, "WARPS_K must divide the k16 steps of a K tile");
static_assert(KT % SPLITS == 0 && KT_PER >= 1, "every split gets the same number of K tiles");
static_assert(kK % 8 == 0, "16-byte chunks never straddle the K edge");
static_assert(STAGES >= 2, "need at least double buffering");
static_assert(FRAG4 * 4 == BM * BN, "fragments cover the tile");
static_assert(GSPLIT % GS == 0, "the reduce groups split the global splits evenly");
static_assert(CLK == 1 || CLK == 2 || CLK == 4 || CLK == 8, "portable cluster size");
static_assert(BM % CL == 0, "the tile's rows split evenly over the cluster ranks");
static_assert(CLK == 1 || (RED == 0 && EPI == 0), "the cluster reduce writes C itself");

__device__ __forceinline__ int swz(int L) { return L ^ ((L >> 3) & 7); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Split-K ticket: release this CTA's partial (ordered before by the CTA barrier; release is
// cumulative) and acquire every earlier arrival's, in one gpu-scope atomic.
__device__ __forceinline__ unsigned int ticket_acq_rel(unsigned int* p) {
    unsigned int old;
    asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(p) : "memory");
    return old;
}

// Thread-block cluster (sm_90+): barrier halves, this CTA's rank, a peer's shared address, a 16-byte DSMEM load.
__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
    return r;
}
__device__ __forceinline__ uint32_t map_rank(uint32_t addr, uint32_t rank) {
    uint32_t r = addr;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
#endif
    return r;
}
// Arrive without release (it publishes no data: the receive barrier's initialisation is released by
// fence.mbarrier_init.release.cluster).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_init_armed(uint32_t bar, uint32_t bytes) {   // count 1, armed for `bytes`
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(bar) : "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_wait0(uint32_t bar) {   // phase 0 of `bar` has completed
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n.reg .pred P1;\n"
                 "WAIT_RECV:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], 0;\n"
                 "@!P1 bra WAIT_RECV;\n}\n" :: "r"(bar) : "memory");
#endif
}
// 16 bytes into a peer's shared memory; the bytes complete the peer's mbarrier `bar` (both cluster addresses).
__device__ __forceinline__ void st_async_v4(uint32_t addr, float4 v, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n"
                 :: "r"(addr), "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)),
                    "r"(__float_as_uint(v.w)), "r"(bar) : "memory");
#endif
}
__device__ __forceinline__ float4 ld_dsmem(uint32_t addr) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
#endif
    return v;
}

// One ROWS x BK tile from global row pointer g (row stride kK; rows [0, rows_left) valid)
// at K column k0 into the swizzled smem stage at s. Chunk L = r * CPR + c.
template <int ROWS, bool FULL_ROWS>
__device__ __forceinline__ void load_tile(uint32_t s, const __half* g, int rows_left, int k0, unsigned tid) {
    constexpr int CHUNKS = ROWS * CPR;
    constexpr int ITERS = (CHUNKS + THREADS - 1) / THREADS;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        const unsigned L = tid + it * THREADS;   // unsigned: / and % by CPR are plain shifts
        if (CHUNKS % THREADS != 0 && L >= CHUNKS) break;
        const int r = L / CPR;
        const int gk = k0 + (L % CPR) * 8;
        const bool ok = (FULL_ROWS || r < rows_left) && (FULL_K || gk < kK);
        const __half* src = g + r * kK + gk;
        cp_async_16(s + swz(L) * 16, ok ? src : g, ok ? 16 : 0);
    }
}

// Four consecutive C columns of one row (8-byte store where N % 4 == 0; predicated at the edges).
__device__ __forceinline__ void store4(__half* c, int row, int col, float4 v) {
    if (!FULL_M && row >= kM) return;
    __half* p = c + row * kN + col;
    if (kN % 4 == 0) {
        if (!FULL_N && col >= kN) return;
        const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        uint2 u;
        u.x = *reinterpret_cast<const uint32_t*>(&lo);
        u.y = *reinterpret_cast<const uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(p) = u;
    } else {
        const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (col + i < kN) p[i] = __float2half_rn(e[i]);
    }
}

__device__ __forceinline__ void store_pair(__half* c, int row, int col, float v0, float v1) {
    if (!FULL_M && row >= kM) return;
    __half* p = c + row * kN + col;
    if (kN % 2 == 0) {
        if (FULL_N || col < kN) *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
    } else {
        if (col < kN) p[0] = __float2half_rn(v0);
        if (col + 1 < kN) p[1] = __float2half_rn(v1);
    }
}

// This warp's fragments of a BM x BN fp32 tile, in fragment order ([warp_mn][MI][NI][32] float4, coalesced).
__device__ __forceinline__ void publish(const float (&acc)[MI][NI][4], float4* slot, int warp_mn, int lane) {
    float4* mine = slot + warp_mn * MI * NI * 32 + lane;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
            __stcg(mine + (i * NI + j) * 32, make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]));
}

// acc = slot 0 + slot 1 + ... + slot COUNT-1 in this order (deterministic), slot `own` from registers; a few
// slots' loads in flight at once (bounded registers).
template <int COUNT>
__device__ __forceinline__ void sum_slots(float (&acc)[MI][NI][4], const float4* slots, int own, int warp_mn, int lane) {
    constexpr int ZU_ = 16 / (MI * NI) < 1 ? 1 : 16 / (MI * NI);
    constexpr int ZU = ZU_ < COUNT ? ZU_ : COUNT;
    const float4* base = slots + warp_mn * MI * NI * 32 + lane;
    float sum[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) sum[i][j][e] = 0.f;
#pragma unroll ZU
    for (int z = 0; z < COUNT; ++z) {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const float4 v = z == own ? make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3])
                                          : __ldcg(base + z * FRAG4 + (i * NI + j) * 32);
                sum[i][j][0] += v.x;
                sum[i][j][1] += v.y;
                sum[i][j][2] += v.z;
                sum[i][j][3] += v.w;
            }
    }
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = sum[i][j][e];
}

}  // namespace

#if 1 > 1 && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900)
#define EVO_SMALL_CLUSTER __cluster_dims__(1, 1, CLK)
#else
#define EVO_SMALL_CLUSTER
#endif

extern "C" __global__ void EVO_SMALL_CLUSTER __launch_bounds__(THREADS, OCC)
evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C,
         int, int, int, float* __restrict__ workspace)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned tid = threadIdx.x;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;
    const int kt0 = SPLITS > 1 ? blockIdx.z * KT_PER : 0;
    const uint32_t sA = smem_u32(smem);                  // STAGES x [BM][BK]
    const uint32_t sB = sA + STAGES * A_STAGE * 2;       // STAGES x [BN][BK]
    const __half* gA = A + m0 * kK;
    const __half* gB = B + n0 * kK;
    const int rows_a = kM - m0;
    const int rows_b = kN - n0;

    // ---- prologue first: tiles 0 .. STAGES-2 in flight (one commit group per tile) ----
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT_PER) {
            const int k0 = (kt0 + s) * BK;
            load_tile<BM, FULL_M>(sA + s * A_STAGE * 2, gA, rows_a, k0, tid);
            load_tile<BN, FULL_N>(sB + s * B_STAGE * 2, gB, rows_b, k0, tid);
        }
        cp_async_commit();
    }
    // PUSH: our receive barrier, armed for the CL slices the ranks (this one included) will send us; the relaxed
    // arrive publishes it, and its wait comes right before our first send (the cluster's start is not serialised).
    __shared__ alignas(8) uint64_t recv_bar;
    if constexpr (PUSH) {
        if (tid == 0) mbar_init_armed(smem_u32(&recv_bar), CL * RS * BN * 4);
        cluster_arrive_relaxed();
    }

    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int warp_k = warp / WARPS_MN;
    const int warp_mn = warp % WARPS_MN;
    const int warp_m = warp_mn / WARPS_N;
    const int warp_n = warp_mn % WARPS_N;
    // ldmatrix sources (16-byte chunks, stage 0, k-step 0), as in mma_sm80: a k-step adds 2 to
    // the chunk column (swz(L + 2ks) = swz(L) ^ 2ks), 16 rows add 16 * CPR chunks (a multiple
    // of 64: the swizzle key is unchanged).
    const int a_chunk = swz((warp_m * WM + (lane & 15)) * CPR + (lane >> 4));
    const int b_chunk = swz((warp_n * WN + ((lane >> 4) << 3) + (lane & 7)) * CPR + ((lane >> 3) & 1));

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    // ---- main loop: fully unrolled when KT_PER <= 64 (stage indices become constants) ----
#pragma unroll UNROLL
    for (int t = 0; t < KT_PER; ++t) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int tn = t + STAGES - 1;
        if (tn < KT_PER) {
            const int ws = tn % STAGES;
            const int k0 = (kt0 + tn) * BK;
            load_tile<BM, FULL_M>(sA + ws * A_STAGE * 2, gA, rows_a, k0, tid);
            load_tile<BN, FULL_N>(sB + ws * B_STAGE * 2, gB, rows_b, k0, tid);
        }
        cp_async_commit();

        const int rs = t % STAGES;
        const uint32_t a_base = sA + rs * A_STAGE * 2;
        const uint32_t b_base = sB + rs * B_STAGE * 2;
#pragma unroll
        for (int kk = 0; kk < KS_PER_WARP; ++kk) {
            const int ks = warp_k * KS_PER_WARP + kk;
            uint32_t af[MI][4];
            uint32_t bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i)
                ldmatrix_x4(af[i], a_base + ((a_chunk ^ (2 * ks)) + i * 16 * CPR) * 16);
#pragma unroll
            for (int j = 0; j < NI / 2; ++j) {
                uint32_t r[4];
                ldmatrix_x4(r, b_base + ((b_chunk ^ (2 * ks)) + j * 16 * CPR) * 16);
                bf[2 * j][0] = r[0];
                bf[2 * j][1] = r[1];
                bf[2 * j + 1][0] = r[2];
                bf[2 * j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma_16816(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
    }
    cp_async_wait<0>();  // only empty groups can remain

    // ---- WARPS_K: warps 1.. hand their partials to warp group 0 through shared memory ----
    if (WARPS_K > 1) {
        float4* red = reinterpret_cast<float4*>(smem);   // [WARPS_K-1][WARPS_MN][MI][NI][32]
        __syncthreads();                                 // everyone is done reading the ring
        if (warp_k > 0) {
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    red[(((warp_k - 1) * WARPS_MN + warp_mn) * MI + i) * NI * 32 + j * 32 + lane] =
                        make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]);
        }
        __syncthreads();
        if (warp_k == 0) {
#pragma unroll
            for (int w = 1; w < WARPS_K; ++w)
#pragma unroll
                for (int i = 0; i < MI; ++i)
#pragma unroll
                    for (int j = 0; j < NI; ++j) {
                        const float4 v = red[(((w - 1) * WARPS_MN + warp_mn) * MI + i) * NI * 32 + j * 32 + lane];
                        acc[i][j][0] += v.x;
                        acc[i][j][1] += v.y;
                        acc[i][j][2] += v.z;
                        acc[i][j][3] += v.w;
                    }
        }
    }

    // ---- CLK (sm_90+): the cluster's partials summed on chip, rank r owns C rows [r * RS, (r + 1) * RS) ----
    if constexpr (CL > 1) {
        float* red = reinterpret_cast<float*>(smem);     // [BM][RP] fp32, this CTA's partial
        __syncthreads();                                 // every warp is done with the ring / WARPS_K buffer
        if (warp_k == 0) {
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const int r = warp_m * WM + i * 16 + (lane >> 2);
                    const int c = warp_n * WN + j * 8 + (lane & 3) * 2;
                    *reinterpret_cast<float2*>(red + r * RP + c) = make_float2(acc[i][j][0], acc[i][j][1]);
                    *reinterpret_cast<float2*>(red + (r + 8) * RP + c) = make_float2(acc[i][j][2], acc[i][j][3]);
                }
        }
        const uint32_t rank = cluster_rank();            // == blockIdx.z % CL (cluster dims 1 x 1 x CL)
        if constexpr (PUSH) {
            const uint32_t recv = smem_u32(smem) + RECV_OFF;  // [CL][RS][BN] fp32 receive slots
            __syncthreads();                             // the staged partial is complete
            cluster_wait_acquire();                      // every rank's receive barrier is initialised and armed
            // float4 q of the partial (row lr, columns 4 * c4..) goes to owner lr / RS, into slot `rank`
#pragma unroll 1
            for (int q = tid; q < BM * BN / 4; q += THREADS) {
                const int lr = q / (BN / 4), c4 = q % (BN / 4);
                const uint32_t owner = lr / RS;
                const float4 v = *reinterpret_cast<const float4*>(red + lr * RP + 4 * c4);
                const uint32_t dst = recv + ((rank * RS + lr % RS) * BN + 4 * c4) * 4;
                st_async_v4(map_rank(dst, owner), v, map_rank(smem_u32(&recv_bar), owner));
            }
            mbar_wait0(smem_u32(&recv_bar));             // our CL slots (ours included) have landed
            // Every rank's arrival means its slots have landed: once all have arrived no send is in flight and
            // nobody writes another CTA's memory (the exit wait). Relaxed: it publishes nothing.
            cluster_arrive_relaxed();
        } else {
            cluster_arrive_release();                    // publishes the partial to the cluster ...
            cluster_wait_acquire();                      // ... and sees every peer's
        }
        const int g = blockIdx.z / CL;                   // global split (SPLIT_K > 1)
        const int tile = blockIdx.y * TILES_N + blockIdx.x;
        uint32_t peer[CL];
#pragma unroll
        for (int j = 0; j < CL; ++j) peer[j] = map_rank(smem_u32(smem), j);
        float4* slices = reinterpret_cast<float4*>(workspace) + (tile * CL + rank) * GSPLIT * ITEMS;  // [GSPLIT][ITEMS]
        constexpr int U = ITEMS / THREADS >= 2 ? 2 : 1;  // items per thread per round (CL loads each in flight)
#pragma unroll 1
        for (int i0 = 0; i0 < ITEMS; i0 += U * THREADS) {
            float4 v[U][CL];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int idx = i0 + u * THREADS + tid;
                if (ITEMS % (U * THREADS) == 0 || idx < ITEMS) {
                    const int lr = rank * RS + idx / (BN / 4);
                    const uint32_t off = (lr * RP + (idx % (BN / 4)) * 4) * 4;
#pragma unroll
                    for (int j = 0; j < CL; ++j)
                        v[u][j] = PUSH ? *reinterpret_cast<const float4*>(smem + RECV_OFF + ((j * RS * BN) + idx * 4) * 4)
                                       : ld_dsmem(peer[j] + off);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int idx = i0 + u * THREADS + tid;
                if (ITEMS % (U * THREADS) == 0 || idx < ITEMS) {
                    float4 s = v[u][0];
#pragma unroll
                    for (int j = 1; j < CL; ++j) {
                        s.x += v[u][j].x;
                        s.y += v[u][j].y;
                        s.z += v[u][j].z;
                        s.w += v[u][j].w;
                    }
                    if (GSPLIT == 1)
                        store4(C, m0 + rank * RS + idx / (BN / 4), n0 + (idx % (BN / 4)) * 4, s);
                    else
                        __stcg(slices + g * ITEMS + idx, s);
                }
            }
        }
        if constexpr (!PUSH) cluster_arrive_release();   // done reading the peers' shared memory
        if (GSPLIT > 1) {
            // the last of the GSPLIT clusters to finish slice (tile, rank) sums the slices in order g = 0..GSPLIT-1
            __shared__ unsigned int s_last_cl;
            unsigned int* tickets = reinterpret_cast<unsigned int*>(reinterpret_cast<float4*>(workspace) + TILES * GSPLIT * FRAG4);
            __syncthreads();
            if (tid == 0) {
                unsigned int* t = tickets + tile * CL + rank;
                s_last_cl = ticket_acq_rel(t) == (unsigned int)(GSPLIT - 1);
                if (s_last_cl) *t = 0u;                  // every split has arrived: ready for the next launch
            }
            __syncthreads();
            if (s_last_cl) {
                constexpr int GU = GSPLIT < 8 ? GSPLIT : 8;   // slices loaded at once
#pragma unroll 1
                for (int idx = tid; idx < ITEMS; idx += THREADS) {
                    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll GU
                    for (int q = 0; q < GSPLIT; ++q) {
                        const float4 w = __ldcg(slices + q * ITEMS + idx);
                        s.x += w.x;
                        s.y += w.y;
                        s.z += w.z;
                        s.w += w.w;
                    }
                    store4(C, m0 + rank * RS + idx / (BN / 4), n0 + (idx % (BN / 4)) * 4, s);
                }
            }
        }
        cluster_wait_acquire();                          // the peers are done with our shared memory before we exit
        return;
    }

    // ---- SPLIT_K: publish the partial; the last ticket of a group sums the group in fixed order; with RED the
    //      group sums go through a second ticket (two short chains instead of one long one) ----
    if (GSPLIT > 1) {
        __shared__ unsigned int s_last;
        const int tile = blockIdx.y * TILES_N + blockIdx.x;
        const int kz = blockIdx.z;
        const int grp = kz / GS;
        const int mem = kz % GS;
        float4* ws4 = reinterpret_cast<float4*>(workspace);
        float4* part = ws4 + (tile * GSPLIT + grp * GS) * FRAG4;               // this group's GS partials
        float4* gsum = ws4 + (TILES * GSPLIT + tile * GROUPS) * FRAG4;         // [GROUPS] group sums (RED)
        unsigned int* tickets = reinterpret_cast<unsigned int*>(ws4 + TILES * (GSPLIT + (GROUPS > 1 ? GROUPS : 0)) * FRAG4);
        unsigned int* t_group = tickets + tile * GROUPS + grp;
        unsigned int* t_final = tickets + TILES * GROUPS + tile;
        if (warp_k == 0) publish(acc, part + mem * FRAG4, warp_mn, lane);
        __syncthreads();
        if (tid == 0) s_last = ticket_acq_rel(t_group) == (unsigned int)(GS - 1);
        __syncthreads();
        if (!s_last) return;
        if (warp_k == 0) sum_slots<GS>(acc, part, mem, warp_mn, lane);
        if (tid == 0) *t_group = 0u;  // the whole group has arrived: ready for the next launch
        if (GROUPS > 1) {
            if (warp_k == 0) publish(acc, gsum + grp * FRAG4, warp_mn, lane);
            __syncthreads();
            if (tid == 0) s_last = ticket_acq_rel(t_final) == (unsigned int)(GROUPS - 1);
            __syncthreads();
            if (!s_last) return;
            if (warp_k == 0) sum_slots<GROUPS>(acc, gsum, grp, warp_mn, lane);
            if (tid == 0) *t_final = 0u;
        }
    }

    // ---- epilogue, EPI = 1: fragments -> padded smem tile -> 16-byte coalesced row stores ----
    if (EPI_STAGED) {
        __half* sC = reinterpret_cast<__half*>(smem);   // [BM][SC_LD]; (SC_LD / 2) % 32 == 4: conflict-free half2
        __syncthreads();                                 // every warp is done with the ring / reduce buffer
        if (warp_k == 0) {
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    const int r = warp_m * WM + i * 16 + (lane >> 2);
                    const int c = warp_n * WN + j * 8 + (lane & 3) * 2;
                    *reinterpret_cast<__half2*>(sC + r * SC_LD + c) = __floats2half2_rn(acc[i][j][0], acc[i][j][1]);
                    *reinterpret_cast<__half2*>(sC + (r + 8) * SC_LD + c) = __floats2half2_rn(acc[i][j][2], acc[i][j][3]);
                }
        }
        __syncthreads();
        constexpr int CH = BM * BN / 8;
#pragma unroll
        for (int it = 0; it < (CH + THREADS - 1) / THREADS; ++it) {
            const unsigned idx = tid + it * THREADS;
            if (CH % THREADS != 0 && idx >= CH) break;
            const int r = idx / (BN / 8);
            const int c = (idx % (BN / 8)) * 8;
            if ((!FULL_M && m0 + r >= kM) || (!FULL_N && n0 + c >= kN)) continue;
            *reinterpret_cast<uint4*>(C + (m0 + r) * kN + n0 + c) = *reinterpret_cast<const uint4*>(sC + r * SC_LD + c);
        }
        return;
    }

    // ---- epilogue, EPI = 0: fragment (i, j) holds c0,c1 at (row, col..col+1), c2,c3 at row + 8 ----
    if (warp_k != 0) return;
    const int row0 = m0 + warp_m * WM + (lane >> 2);
    const int col0 = n0 + warp_n * WN + (lane & 3) * 2;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            store_pair(C, row0 + i * 16, col0 + j * 8, acc[i][j][0], acc[i][j][1]);
            store_pair(C, row0 + i * 16 + 8, col0 + j * 8, acc[i][j][2], acc[i][j][3]);
        }
}

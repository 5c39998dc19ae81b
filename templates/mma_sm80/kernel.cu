/*---evo
family: mma_sm80
archs: [sm_80, sm_90a]
params: {{PARAMS}}
block: ["WARPS_M * WARPS_N * 32", 1, 1]
grid: ["cdiv(N, BN)", "cdiv(M, BM)", "SPLIT_K"]
smem: "STAGES * (BM + BN) * BK * 2"
workspace: "0 if SPLIT_K == 1 else SPLIT_K * cdiv(M, BM) * cdiv(N, BN) * BM * BN * 4 + cdiv(M, BM) * cdiv(N, BN) * 4"
---*/
// Tensor-core HGEMM for sm_80+ (Ampere-style: mma.sync + ldmatrix + cp.async).
//
//   C[M,N] = A[M,K] * B[N,K]^T      (A, B, C row-major fp16 -> both operands K-major, "TN")
//
// Structure
//   * CTA tile BM x BN, K step BK; WARPS_M x WARPS_N warps, each owning a WM x WN warp tile
//     made of MI x NI mma.sync.m16n8k16 tiles (fp32 accumulators in registers).
//   * STAGES-deep cp.async pipeline global -> shared (16-byte chunks, zero-fill for rows /
//     K columns outside the matrix), one __syncthreads per K tile.
//   * Shared tiles are stored K-contiguous, row r of a stage = BK halves = CPR 16-byte chunks.
//     Chunk (row, c) with linear index L = row*CPR + c lives at chunk  L ^ ((L >> 3) & 7):
//     an XOR swizzle inside every 128-byte line, so the 8 row addresses of each ldmatrix
//     8x8 matrix, and the 8 chunks of each 8-thread cp.async phase, hit 8 distinct 16-byte
//     bank groups (conflict-free) for BK = 32 (2 rows per line) and BK = 64 (1 row per line).
//   * ldmatrix.x4 (no .trans: both operands are K-major) feeds the A (row) and B (col)
//     fragments directly.
//   * Grouped rasterization: consecutive CTAs walk GROUP_M tile rows column by column, so
//     CTAs running together share A and B tiles in L2.
//   * Split-K (grid z = SPLIT_K): each split stores its fp32 partial tile to `workspace`,
//     bumps a per-tile arrival counter (atom.add.acq_rel.gpu after a CTA barrier, no SC
//     fence); the last arriving CTA sums the partials in fixed order 0..SPLIT_K-1
//     (deterministic), writes C and resets the counter to zero.
//     SPLIT_K == 1 skips all of that and stores the accumulators straight to C.
//   * Any M, N, K >= 1: the fast path needs K % 8 == 0 and 16-byte aligned A, B (cp.async
//     chunks never straddle the K edge); otherwise the same kernel takes a path that fills
//     shared memory with predicated scalar loads (correct, slower). Epilogue stores are
//     predicated per element (half2 when N is even).
#include <cuda_fp16.h>
#include <cstdint>

namespace {

constexpr int BM = {{BM}};
constexpr int BN = {{BN}};
constexpr int BK = {{BK}};
constexpr int WARPS_M = {{WARPS_M}};
constexpr int WARPS_N = {{WARPS_N}};
constexpr int STAGES = {{STAGES}};
constexpr int SPLIT_K = {{SPLIT_K}};
constexpr int GROUP_M = {{GROUP_M}};

constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int WM = BM / WARPS_M;        // warp tile rows
constexpr int WN = BN / WARPS_N;        // warp tile cols
constexpr int MI = WM / 16;             // m16 mma tiles per warp
constexpr int NI = WN / 8;              // n8 mma tiles per warp
constexpr int CPR = BK / 8;             // 16-byte chunks per smem row
constexpr int KSTEPS = BK / 16;         // k16 mma steps per K tile
constexpr int A_STAGE = BM * BK;        // halves per stage
constexpr int B_STAGE = BN * BK;

static_assert(BK == 32 || BK == 64, "swizzle is laid out for BK = 32 or 64");
static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16x16");
static_assert(THREADS % 64 == 0, "chunk loader assumes THREADS is a multiple of 64");
static_assert(STAGES >= 2, "need at least double buffering");

// Physical chunk index of linear chunk L (see header). Only bits 0..2 change, so a chunk
// stays in its 128-byte line.
__device__ __forceinline__ int swz(int L) { return L ^ ((L >> 3) & 7); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; src_bytes = 0 writes 16 zero bytes without reading.
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

// Split-K arrival: atomic add with acquire-release semantics at gpu scope (no SC fence).
__device__ __forceinline__ unsigned int ticket_acq_rel(unsigned int* p) {
    unsigned int old;
    asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(p) : "memory");
    return old;
}

// D = A * B + D, one m16n8k16 tile, fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Copy one ROWS x BK tile (rows [0, rows_left) valid, K columns [k0, K) valid) starting at
// global row pointer g (row stride K) into the swizzled smem stage at s (shared address).
// Thread tid handles linear chunks i = tid + it*THREADS, i.e. chunk column c = tid % CPR
// (fixed) of rows tid/CPR + it*THREADS/CPR. Because THREADS % 64 == 0, adding it*THREADS
// to i leaves the swizzle key unchanged: swz(i) = swz(tid) + it*THREADS.
template <int ROWS, bool VEC>
__device__ __forceinline__ void load_tile(uint32_t s, const __half* g, int rows_left, int k0, int K, int tid) {
    constexpr int CHUNKS = ROWS * CPR;
    constexpr int ITERS = (CHUNKS + THREADS - 1) / THREADS;
    constexpr int ROW_STEP = THREADS / CPR;
    // Launder K and rows_left through an empty asm: the per-chunk row offsets and row
    // predicates then cannot be hoisted out of the K loop and pinned in registers (with
    // 16-24 chunks per thread that costs more registers than recomputing them per tile).
    asm volatile("" : "+r"(K), "+r"(rows_left));
    const int c = tid % CPR;
    const int r0 = tid / CPR;
    const int gk = k0 + c * 8;
    const uint32_t dst0 = s + swz(tid) * 16;
    const __half* gk_ptr = g + gk;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        if (CHUNKS % THREADS != 0 && tid + it * THREADS >= CHUNKS) break;
        const int r = r0 + it * ROW_STEP;
        const uint32_t dst = dst0 + it * THREADS * 16;
        const __half* src = gk_ptr + r * K;  // r < 256, K <= 2^20: the offset fits in 32 bits
        if (VEC) {
            // K % 8 == 0: a chunk is either wholly inside K or wholly outside.
            const bool ok = (r < rows_left) && (gk < K);
            cp_async_16(dst, ok ? src : g, ok ? 16 : 0);
        } else {
            // Generic K / alignment: predicated 2-byte loads, packed, one 16-byte smem store.
            const unsigned short* s16 = reinterpret_cast<const unsigned short*>(src);
            const bool row_ok = r < rows_left;
            uint32_t w[4];
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const uint32_t lo = (row_ok && gk + 2 * p < K) ? s16[2 * p] : 0u;
                const uint32_t hi = (row_ok && gk + 2 * p + 1 < K) ? s16[2 * p + 1] : 0u;
                w[p] = lo | (hi << 16);
            }
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]),
                         "r"(w[3])
                         : "memory");
        }
    }
}

// The whole GEMM for one CTA. VEC selects the cp.async fast path (see header).
template <bool VEC>
__device__ __forceinline__ void gemm_cta(const __half* __restrict__ A, const __half* __restrict__ B,
                                         __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace,
                                         unsigned char* smem) {
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int warp_m = warp / WARPS_N;
    const int warp_n = warp % WARPS_N;

    // ---- grouped rasterization: linear CTA id -> (tile_m, tile_n) ----
    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int pid = blockIdx.y * gridDim.x + blockIdx.x;     // gridDim.x == tiles_n
    const int group_size = GROUP_M * tiles_n;                 // CTAs per group of GROUP_M tile rows
    const int first_m = (pid / group_size) * GROUP_M;
    const int group_m = min(tiles_m - first_m, GROUP_M);      // last group may be short
    const int tile_m = first_m + (pid % group_size) % group_m;
    const int tile_n = (pid % group_size) / group_m;
    const int m0 = tile_m * BM;
    const int n0 = tile_n * BN;

    // ---- this split's K tiles: [kt_begin, kt_begin + n_tiles) ----
    const int kt_total = (K + BK - 1) / BK;
    const int kt_per = (kt_total + SPLIT_K - 1) / SPLIT_K;
    const int kt_begin = blockIdx.z * kt_per;
    const int n_tiles = max(0, min(kt_total, kt_begin + kt_per) - kt_begin);

    const uint32_t sA = smem_u32(smem);                          // STAGES x [BM][BK]
    const uint32_t sB = sA + STAGES * A_STAGE * 2;               // STAGES x [BN][BK]
    const __half* gA = A + (size_t)m0 * K;                       // first row of this CTA's A slab
    const __half* gB = B + (size_t)n0 * K;
    const int rows_a = M - m0;
    const int rows_b = N - n0;

    // ---- per-thread ldmatrix source offsets (in 16-byte chunks, stage 0, k-step 0) ----
    // A x4: lanes 0-15 give rows 0-15 of k-chunk 0, lanes 16-31 the same rows of k-chunk 1
    //       -> registers a0..a3 = (rows 0-7,k0-7) (rows 8-15,k0-7) (rows 0-7,k8-15) (rows 8-15,k8-15).
    // B x4: lanes 0-7 n 0-7/k-chunk 0, 8-15 n 0-7/chunk 1, 16-23 n 8-15/chunk 0, 24-31 n 8-15/chunk 1
    //       -> b0,b1 of n-tile 2j and b0,b1 of n-tile 2j+1.
    // K step ks adds 2*ks to the chunk column: chunk bits are below the row bits and the key
    // only reads bits >= 3, so swz(L + 2ks) = swz(L) ^ 2ks. A step of 16 rows adds 16*CPR
    // (a multiple of 64) chunks, which leaves the key unchanged: swz(L + 16*CPR) = swz(L) + 16*CPR.
    const int a_chunk = swz((warp_m * WM + (lane & 15)) * CPR + (lane >> 4));
    const int b_chunk = swz((warp_n * WN + ((lane >> 4) << 3) + (lane & 7)) * CPR + ((lane >> 3) & 1));

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    // ---- prologue: put tiles 0 .. STAGES-2 in flight (one commit group per tile, even if empty) ----
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles) {
            const int k0 = (kt_begin + s) * BK;
            load_tile<BM, VEC>(sA + s * A_STAGE * 2, gA, rows_a, k0, K, tid);
            load_tile<BN, VEC>(sB + s * B_STAGE * 2, gB, rows_b, k0, K, tid);
        }
        cp_async_commit();
    }

    // ---- main loop ----
    int read_stage = 0;            // stage holding tile t
    int write_stage = STAGES - 1;  // stage receiving tile t + STAGES - 1 (== the one read at t - 1)
    for (int t = 0; t < n_tiles; ++t) {
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile t have landed ...
        __syncthreads();              // ... everyone's have, and everyone is done reading tile t-1

        const int t_next = t + STAGES - 1;
        if (t_next < n_tiles) {
            const int k0 = (kt_begin + t_next) * BK;
            load_tile<BM, VEC>(sA + write_stage * A_STAGE * 2, gA, rows_a, k0, K, tid);
            load_tile<BN, VEC>(sB + write_stage * B_STAGE * 2, gB, rows_b, k0, K, tid);
        }
        cp_async_commit();

        const uint32_t a_base = sA + read_stage * A_STAGE * 2;
        const uint32_t b_base = sB + read_stage * B_STAGE * 2;
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
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

        read_stage = (read_stage + 1 == STAGES) ? 0 : read_stage + 1;
        write_stage = (write_stage + 1 == STAGES) ? 0 : write_stage + 1;
    }
    cp_async_wait<0>();  // drain (only empty groups can remain)

    // ---- split-K: publish the partial, the last arriving CTA of the tile reduces ----
    if (SPLIT_K > 1) {
        // Layout: workspace = [tiles][SPLIT_K][BM][BN] fp32 partials (row-major tiles, whole
        // tile written even past the matrix edge), then [tiles] u32 arrival counters.
        const int tiles = tiles_m * tiles_n;
        const int tile_id = tile_m * tiles_n + tile_n;
        float* part = workspace + (size_t)tile_id * SPLIT_K * (BM * BN);
        unsigned int* counter = reinterpret_cast<unsigned int*>(workspace + (size_t)tiles * SPLIT_K * BM * BN) + tile_id;
        __shared__ unsigned int s_last;

        float* mine = part + (size_t)blockIdx.z * (BM * BN);
        const int prow = warp_m * WM + (lane >> 2);        // tile-local row of c0,c1
        const int pcol = warp_n * WN + (lane & 3) * 2;     // tile-local col of c0
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    __stcg(reinterpret_cast<float2*>(mine + (prow + i * 16 + h * 8) * BN + pcol + j * 8),
                           make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]));
        // CTA barrier, then one gpu-scope acq_rel ticket: its release is cumulative (orders every
        // thread's partial stores), its acquire shows the last CTA every other split's partial.
        __syncthreads();
        if (tid == 0) s_last = (ticket_acq_rel(counter) == (unsigned int)(SPLIT_K - 1));
        __syncthreads();
        if (!s_last) return;

        // The accumulators are dead now: reduce straight from the workspace, 4 columns per
        // thread and step (coalesced loads and C stores), summing in fixed order
        // 0..SPLIT_K-1 whichever CTA arrived last (deterministic).
        const bool quad_ok = ((N & 3) == 0) && ((reinterpret_cast<uintptr_t>(C) & 7) == 0);
#pragma unroll 1
        for (int idx = tid; idx < BM * BN / 4; idx += THREADS) {
            const int r = idx / (BN / 4);
            const int c = (idx % (BN / 4)) * 4;
            float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int z = 0; z < SPLIT_K; ++z) {
                const float4 v = __ldcg(reinterpret_cast<const float4*>(part + (size_t)z * (BM * BN) + r * BN + c));
                sum.x += v.x;
                sum.y += v.y;
                sum.z += v.z;
                sum.w += v.w;
            }
            const int row = m0 + r, col = n0 + c;
            if (row >= M || col >= N) continue;
            __half* cp = C + (size_t)row * N + col;
            if (quad_ok) {  // N % 4 == 0 and col % 4 == 0: all 4 columns are inside
                const __half2 lo = __floats2half2_rn(sum.x, sum.y);
                const __half2 hi = __floats2half2_rn(sum.z, sum.w);
                uint2 u;
                u.x = *reinterpret_cast<const uint32_t*>(&lo);
                u.y = *reinterpret_cast<const uint32_t*>(&hi);
                *reinterpret_cast<uint2*>(cp) = u;
            } else {
                cp[0] = __float2half_rn(sum.x);
                if (col + 1 < N) cp[1] = __float2half_rn(sum.y);
                if (col + 2 < N) cp[2] = __float2half_rn(sum.z);
                if (col + 3 < N) cp[3] = __float2half_rn(sum.w);
            }
        }
        if (tid == 0) *counter = 0u;  // every split has arrived: reset for the next launch
        return;
    }

    // ---- epilogue: fp32 -> fp16, predicated. Fragment (i, j): c0,c1 at (row, col..col+1),
    //      c2,c3 at (row+8, col..col+1), row = lane/4, col = 2*(lane%4) inside the 16x8 tile.
    const bool pair_ok = ((N & 1) == 0) && ((reinterpret_cast<uintptr_t>(C) & 3) == 0);
    const int row0 = m0 + warp_m * WM + (lane >> 2);
    const int col0 = n0 + warp_n * WN + (lane & 3) * 2;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + i * 16 + h * 8;
            if (row >= M) continue;
            __half* crow = C + (size_t)row * N;
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int col = col0 + j * 8;
                const float v0 = acc[i][j][2 * h];
                const float v1 = acc[i][j][2 * h + 1];
                if (pair_ok) {
                    if (col < N) *reinterpret_cast<__half2*>(crow + col) = __floats2half2_rn(v0, v1);
                } else {
                    if (col < N) crow[col] = __float2half_rn(v0);
                    if (col + 1 < N) crow[col + 1] = __float2half_rn(v1);
                }
            }
        }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1)
evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C,
         int M, int N, int K, float* __restrict__ workspace)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const bool vec = (K % 8 == 0) && ((reinterpret_cast<uintptr_t>(A) & 15) == 0) &&
                     ((reinterpret_cast<uintptr_t>(B) & 15) == 0);
    if (vec)
        gemm_cta<true>(A, B, C, M, N, K, workspace, smem);
    else
        gemm_cta<false>(A, B, C, M, N, K, workspace, smem);
}

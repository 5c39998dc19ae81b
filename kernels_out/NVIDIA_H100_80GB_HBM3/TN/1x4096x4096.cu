/*---evo
family: gemv_sm80
archs: [sm_80, sm_90a]
params: {KS: 16, SWAP_AB: 0, UNROLL: 2, WARPS: 16, WN: 2}
block: ["32 * WARPS", 1, 1]
grid: ["cdiv(M if SWAP_AB else N, 8 * WN * (WARPS // KS))", 1, 1]
smem: "0 if KS == 1 else WARPS * WN * 4 * 32 * 4"
workspace: 0
requires: "(N if SWAP_AB else M) <= 16"
---*/
// Streaming GEMV-like HGEMM for a tiny dimension (<= 16): C[M,N] = A[M,K] * B[N,K]^T, fp16 in/out,
// fp32 accumulation on the tensor cores (mma.sync.m16n8k16), for sm_80 and later.
//
// Kernel view: X is the small operand (A, or B with SWAP_AB), at most 16 rows; Y is the streamed
// operand (B, or A with SWAP_AB), Ny rows. D[x][y] = sum_k X[x][k] * Y[y][k]; C(x, y) is C[x][y]
// (C[y][x] with SWAP_AB). The time is the stream of Y (Ny x K fp16) from DRAM: every Y element is
// loaded exactly once, straight into mma B fragments (no shared memory), with 16-byte
// ld.global.nc.L1::no_allocate loads; X (<= 16 x K, small) is re-read through L1/L2.
//
// Fragments without shuffles. An m16n8k16 mma sums over 16 k; which physical k each fragment slot
// holds does not matter as long as X and Y agree. Lane (g = lane / 4, t = lane % 4) loads the
// 16-byte vector k = kc + 8t .. kc + 8t + 7 of Y row y0 + g (words w0..w3) and of X rows g, g + 8
// (words u0..u3, v0..v3), for a 32-wide k chunk at kc. Logical k (2t, 2t+1) of mma 0 is then
// physical (8t, 8t+1), logical (2t+8, 2t+9) is (8t+2, 8t+3); mma 1 takes 8t+4..8t+7:
//   mma 0: A = {u0, v0, u1, v1}, B = {w0, w1};   mma 1: A = {u2, v2, u3, v3}, B = {w2, w3}.
// X rows >= Nx, Y rows >= Ny and k >= K load as zeros.
//
// Work split. A warp owns WN n8 groups (8 * WN Y rows) and the K chunks of its split: the CTA's
// WARPS warps are WARPS / KS row groups x KS K splits (balanced chunk ranges). UNROLL chunks are
// loaded before their mmas (WN + 2 16-byte loads each per lane in flight). With KS > 1 every warp
// parks its accumulators in shared memory and split 0 sums them in the fixed order 0..KS-1
// (deterministic). Any M, N, K: the vector path needs K % 8 == 0 and 16-byte aligned A, B, else
// every load takes an element-wise path.
#include <cuda_fp16.h>
#include <stdint.h>

namespace evo_gemv {

constexpr int WN = 2;          // n8 groups (8 Y rows each) per warp
constexpr int WARPS = 16;    // warps per CTA
constexpr int KS = 16;          // K splits inside the CTA
constexpr int UNROLL = 2;  // 32-wide k chunks loaded per step
constexpr int SWAP_AB = 0;

constexpr int THREADS = 32 * WARPS;
constexpr int ROW_GROUPS = WARPS / KS;
constexpr int ROWS_PER_CTA = 8 * WN * ROW_GROUPS;
static_assert(WARPS % KS == 0, "the K splits divide the warps");

__device__ __forceinline__ uint4 ld_stream(const __half* p) {  // Y: read once, keep L1 for X
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ld_keep(const __half* p) {  // X: re-read by every warp
  return __ldg(reinterpret_cast<const uint4*>(p));
}
// 8 halves of `row` from k on (zeros past K); `fast`: 16-byte aligned rows, K % 8 == 0.
template <bool STREAM>
__device__ __forceinline__ uint4 load8(const __half* row, int k, int K, bool fast) {
  if (fast) {
    if (k + 8 <= K) return STREAM ? ld_stream(row + k) : ld_keep(row + k);
    return make_uint4(0, 0, 0, 0);
  }
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned short lo = k + 2 * i < K ? __half_as_ushort(row[k + 2 * i]) : 0;
    const unsigned short hi = k + 2 * i + 1 < K ? __half_as_ushort(row[k + 2 * i + 1]) : 0;
    w[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void mma16816(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void store_c(__half* C, int N, int Nx, int Ny, int x, int y, float v) {
  if (x >= Nx || y >= Ny) return;
  const size_t idx = SWAP_AB ? static_cast<size_t>(y) * N + x : static_cast<size_t>(x) * N + y;
  C[idx] = __float2half_rn(v);
}

}  // namespace evo_gemv
using namespace evo_gemv;

extern "C" __global__ void __launch_bounds__(THREADS)
    evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C, int M, int N, int K,
             float* __restrict__ workspace) {
  (void)workspace;
  const __half* X = SWAP_AB ? B : A;
  const __half* Y = SWAP_AB ? A : B;
  const int Nx = SWAP_AB ? N : M;
  const int Ny = SWAP_AB ? M : N;
  const bool fast = (K % 8 == 0) && ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B)) % 16 == 0);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int rg = warp / KS, ks = warp % KS;
  const int y0 = blockIdx.x * ROWS_PER_CTA + rg * 8 * WN;  // first Y row of this warp

  // Row pointers (clamped to row 0 when outside: their loads are replaced by zeros).
  const bool x0_ok = g < Nx, x1_ok = g + 8 < Nx;
  const __half* xr0 = X + static_cast<size_t>(x0_ok ? g : 0) * K;
  const __half* xr1 = X + static_cast<size_t>(x1_ok ? g + 8 : 0) * K;
  const __half* yr[WN];
  bool y_ok[WN];
#pragma unroll
  for (int j = 0; j < WN; ++j) {
    const int y = y0 + 8 * j + g;
    y_ok[j] = y < Ny;
    yr[j] = Y + static_cast<size_t>(y_ok[j] ? y : 0) * K;
  }

  // This warp's K chunks: [c0, c1) of cdiv(K, 32).
  const int chunks = (K + 31) / 32;
  const int c0 = static_cast<int>(static_cast<long long>(ks) * chunks / KS);
  const int c1 = static_cast<int>(static_cast<long long>(ks + 1) * chunks / KS);

  float acc[WN][4];
#pragma unroll
  for (int j = 0; j < WN; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;

  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll 1
  for (int c = c0; c < c1; c += UNROLL) {
    uint4 xv0[UNROLL], xv1[UNROLL], yv[UNROLL][WN];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const bool live = c + u < c1;
      const int k = (c + u) * 32 + 8 * t;
#pragma unroll
      for (int j = 0; j < WN; ++j) yv[u][j] = (live && y_ok[j]) ? load8<true>(yr[j], k, K, fast) : zero;
      xv0[u] = (live && x0_ok) ? load8<false>(xr0, k, K, fast) : zero;
      xv1[u] = (live && x1_ok) ? load8<false>(xr1, k, K, fast) : zero;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int j = 0; j < WN; ++j) {
        mma16816(acc[j], xv0[u].x, xv1[u].x, xv0[u].y, xv1[u].y, yv[u][j].x, yv[u][j].y);
        mma16816(acc[j], xv0[u].z, xv1[u].z, xv0[u].w, xv1[u].w, yv[u][j].z, yv[u][j].w);
      }
  }

  if constexpr (KS > 1) {
    // Park every warp's accumulators; split 0 of each row group sums splits 0..KS-1 in order.
    extern __shared__ float red[];  // [WARPS][WN * 4][32]
#pragma unroll
    for (int j = 0; j < WN; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[(warp * WN * 4 + j * 4 + i) * 32 + lane] = acc[j][i];
    __syncthreads();
    if (ks != 0) return;
#pragma unroll
    for (int j = 0; j < WN; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float s = 0.f;
        for (int q = 0; q < KS; ++q) s += red[((rg * KS + q) * WN * 4 + j * 4 + i) * 32 + lane];
        acc[j][i] = s;
      }
  }

  // D fragment: acc[j][0..1] = D[g][y0 + 8j + 2t + {0,1}], acc[j][2..3] = D[g + 8][...].
#pragma unroll
  for (int j = 0; j < WN; ++j) {
    const int y = y0 + 8 * j + 2 * t;
    store_c(C, N, Nx, Ny, g, y, acc[j][0]);
    store_c(C, N, Nx, Ny, g, y + 1, acc[j][1]);
    store_c(C, N, Nx, Ny, g + 8, y, acc[j][2]);
    store_c(C, N, Nx, Ny, g + 8, y + 1, acc[j][3]);
  }
}

/*---evo
family: cute_sm80
archs: [sm_80, sm_90a]
params: {{PARAMS}}
block: ["32 * WARPS_M * WARPS_N", 1, 1]
grid: ["cdiv(N, BN)", "cdiv(M, BM)", 1]
smem: "max(STAGES * (BM + BN) * BK * 2, BM * (BN + 8) * 2)"
workspace: 0
requires: "K % 8 == 0"
---*/
// CuTe HGEMM for SM80+ (runs unchanged on sm_90a):  C[M,N] = A[M,K] * B[N,K]^T
// A, B, C row-major fp16 ("TN": both operands K-major), fp32 accumulation, fp16 output.
//
//  * MMA:    SM80_16x8x16_F32F16F16F32_TN atoms, make_tiled_mma over a WARPS_M x WARPS_N warp grid,
//            permutation tile (16*WARPS_M, 16*WARPS_N, 16) so that one ldmatrix.x4 feeds one warp's
//            16x16 slice of A and of B.
//  * G->S:   cp.async.cg 16-byte (SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>), STAGES-deep smem ring
//            (structure of CuTe's examples/cute/tutorial/sgemm_sm80.cu).
//  * smem:   K-major tiles swizzled with Swizzle<3,3,3> (BK=64, 128-byte rows) or Swizzle<2,3,3>
//            (BK=32, 64-byte rows): conflict-free for both the 16-byte cp.async writes and ldmatrix.
//  * S->R:   SM75_U32x4_LDSM_N (ldmatrix.x4), register double buffering over the BK/16 k-blocks.
//  * Edges:  identity-tensor predication. A/B vectors (8 halves along K) outside [0,M)x[0,K) /
//            [0,N)x[0,K) are not loaded; their smem slot is zero-filled with a plain 16-byte store.
//            K % 8 == 0 (front matter) makes every vector all-in or all-out and 16-byte aligned.
//  * Epilogue: fp32 -> fp16 in registers, staged through (padded) smem, written with 16-byte
//            predicated stores when N % 8 == 0, element-wise predicated stores otherwise.
//  * Block order: GROUP_M tile-rows are walked together (L2 reuse of the B panel).
#include <cuda_fp16.h>
#include <cute/tensor.hpp>

namespace evo_cute {

using namespace cute;
using T = cute::half_t;

constexpr int BM = {{BM}};
constexpr int BN = {{BN}};
constexpr int BK = {{BK}};
constexpr int STAGES = {{STAGES}};
constexpr int WARPS_M = {{WARPS_M}};
constexpr int WARPS_N = {{WARPS_N}};
constexpr int GROUP_M = {{GROUP_M}};
constexpr int THREADS = 32 * WARPS_M * WARPS_N;

static_assert(BK == 32 || BK == 64, "BK must be 32 or 64");
static_assert(STAGES >= 2, "need at least a double buffer");
static_assert(BM % (16 * WARPS_M) == 0 && BN % (16 * WARPS_N) == 0, "warp tile must be a multiple of 16x16");

// ---- MMA -----------------------------------------------------------------------------------
using TiledMma = decltype(make_tiled_mma(SM80_16x8x16_F32F16F16F32_TN{},
                                         Layout<Shape<Int<WARPS_M>, Int<WARPS_N>, _1>>{},
                                         Tile<Int<16 * WARPS_M>, Int<16 * WARPS_N>, _16>{}));

// ---- shared-memory layouts (K-major, swizzled) --------------------------------------------
template <int kBK> struct SmemAtomSel;
template <> struct SmemAtomSel<64> {
  using type = decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));
};
template <> struct SmemAtomSel<32> {
  using type = decltype(composition(Swizzle<2, 3, 3>{}, Layout<Shape<_8, _32>, Stride<_32, _1>>{}));
};
using SmemAtom = typename SmemAtomSel<BK>::type;
using SmemLayoutA = decltype(tile_to_shape(SmemAtom{}, make_shape(Int<BM>{}, Int<BK>{}, Int<STAGES>{})));
using SmemLayoutB = decltype(tile_to_shape(SmemAtom{}, make_shape(Int<BN>{}, Int<BK>{}, Int<STAGES>{})));
// Epilogue staging tile: row-major, rows padded by 8 halves (16 B) -> conflict-free fragment writes.
using SmemLayoutC = Layout<Shape<Int<BM>, Int<BN>>, Stride<Int<BN + 8>, _1>>;

// ---- global -> shared copy: 8 halves (16 B) per thread per copy, threads K-major -------------
constexpr int TPR = BK / 8;                    // threads along one K row of a tile
constexpr int ROWS_PER_COPY = THREADS / TPR;   // rows covered by one pass of the whole CTA
static_assert(THREADS % TPR == 0, "");
static_assert(BM % ROWS_PER_COPY == 0 && BN % ROWS_PER_COPY == 0, "tile rows must be a multiple of the copy pass");
using G2SCopy = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, T>{},
                                         Layout<Shape<Int<ROWS_PER_COPY>, Int<TPR>>, Stride<Int<TPR>, _1>>{},
                                         Layout<Shape<_1, _8>>{}));

// ---- shared -> register: ldmatrix.x4 -------------------------------------------------------
using S2RAtom = Copy_Atom<SM75_U32x4_LDSM_N, T>;

// ---- shared -> global epilogue copy: 16 B per thread, row-major ----------------------------
constexpr int C_TPR = BN / 8;
static_assert(THREADS % C_TPR == 0, "");
constexpr int C_ROWS_PER_COPY = THREADS / C_TPR;
static_assert(BM % C_ROWS_PER_COPY == 0, "");
using S2GCopy = decltype(make_tiled_copy(Copy_Atom<UniversalCopy<cute::uint128_t>, T>{},
                                         Layout<Shape<Int<C_ROWS_PER_COPY>, Int<C_TPR>>, Stride<Int<C_TPR>, _1>>{},
                                         Layout<Shape<_1, _8>>{}));

constexpr int SMEM_AB_ELEMS = int(cosize_v<SmemLayoutA>) + int(cosize_v<SmemLayoutB>);
constexpr int SMEM_C_ELEMS = int(cosize_v<SmemLayoutC>);
static_assert(SMEM_AB_ELEMS == STAGES * (BM + BN) * BK, "front matter smem expression out of sync");
static_assert(SMEM_C_ELEMS <= BM * (BN + 8), "front matter smem expression out of sync");

__device__ __forceinline__ void zero16(T* p) {
  *reinterpret_cast<uint4*>(p) = make_uint4(0u, 0u, 0u, 0u);
}

}  // namespace evo_cute

extern "C" __global__ void __launch_bounds__(evo_cute::THREADS, 1)
evo_gemm(const __half* __restrict__ Aptr, const __half* __restrict__ Bptr, __half* __restrict__ Cptr,
         int M, int N, int K, float* __restrict__ workspace)
{
  using namespace cute;
  using namespace evo_cute;
  (void)workspace;

  extern __shared__ __align__(1024) unsigned char smem_raw[];

  // ---- block -> (m, n) tile, grouped along M for L2 reuse ----------------------------------
  int m_blk = blockIdx.y;
  int n_blk = blockIdx.x;
  if constexpr (GROUP_M > 1) {
    const int grid_n = gridDim.x;
    const int grid_m = gridDim.y;
    const int pid = blockIdx.y * grid_n + blockIdx.x;
    const int width = GROUP_M * grid_n;
    const int group = pid / width;
    const int first_m = group * GROUP_M;
    const int gm = min(grid_m - first_m, GROUP_M);
    const int r = pid - group * width;
    m_blk = first_m + r % gm;
    n_blk = r / gm;
  }

  // ---- global tensors and their coordinate (identity) twins -------------------------------
  Tensor mA = make_tensor(make_gmem_ptr(reinterpret_cast<T const*>(Aptr)), make_shape(M, K), make_stride(K, Int<1>{}));
  Tensor mB = make_tensor(make_gmem_ptr(reinterpret_cast<T const*>(Bptr)), make_shape(N, K), make_stride(K, Int<1>{}));
  Tensor mC = make_tensor(make_gmem_ptr(reinterpret_cast<T*>(Cptr)), make_shape(M, N), make_stride(N, Int<1>{}));
  Tensor cA = make_identity_tensor(shape(mA));   // (m,k) -> (m,k)
  Tensor cB = make_identity_tensor(shape(mB));   // (n,k) -> (n,k)
  Tensor cC = make_identity_tensor(shape(mC));   // (m,n) -> (m,n)

  auto tiler = make_shape(Int<BM>{}, Int<BN>{}, Int<BK>{});
  auto blk = make_coord(m_blk, n_blk, _);
  Tensor gA = local_tile(mA, tiler, blk, Step<_1, X, _1>{});   // (BM,BK,k)
  Tensor gB = local_tile(mB, tiler, blk, Step<X, _1, _1>{});   // (BN,BK,k)
  Tensor gC = local_tile(mC, tiler, blk, Step<_1, _1, X>{});   // (BM,BN)
  Tensor tcA = local_tile(cA, tiler, blk, Step<_1, X, _1>{});  // (BM,BK,k)
  Tensor tcB = local_tile(cB, tiler, blk, Step<X, _1, _1>{});  // (BN,BK,k)
  Tensor tcC = local_tile(cC, tiler, blk, Step<_1, _1, X>{});  // (BM,BN)

  T* smemA = reinterpret_cast<T*>(smem_raw);
  T* smemB = smemA + cosize_v<SmemLayoutA>;
  Tensor sA = make_tensor(make_smem_ptr(smemA), SmemLayoutA{});  // (BM,BK,PIPE)
  Tensor sB = make_tensor(make_smem_ptr(smemB), SmemLayoutB{});  // (BN,BK,PIPE)

  // ---- global -> shared partitions ----------------------------------------------------------
  G2SCopy g2s;
  auto thr_g2s = g2s.get_slice(threadIdx.x);
  Tensor tAgA = thr_g2s.partition_S(gA);   // (CPY,CPY_M,CPY_K,k)
  Tensor tAsA = thr_g2s.partition_D(sA);   // (CPY,CPY_M,CPY_K,PIPE)
  Tensor tAcA = thr_g2s.partition_S(tcA);  // (CPY,CPY_M,CPY_K,k) coordinates
  Tensor tBgB = thr_g2s.partition_S(gB);
  Tensor tBsB = thr_g2s.partition_D(sB);
  Tensor tBcB = thr_g2s.partition_S(tcB);

  constexpr int CPY_AM = decltype(size<1>(tAsA))::value;
  constexpr int CPY_AK = decltype(size<2>(tAsA))::value;
  constexpr int CPY_BN = decltype(size<1>(tBsB))::value;
  constexpr int CPY_BK = decltype(size<2>(tBsB))::value;

  // Row predicates (fixed for the whole K loop) and this thread's K offsets inside a tile.
  bool pA[CPY_AM];
  bool pB[CPY_BN];
  int kA[CPY_AK];
  int kB[CPY_BK];
  CUTE_UNROLL
  for (int m = 0; m < CPY_AM; ++m) pA[m] = get<0>(tAcA(0, m, 0, 0)) < M;
  CUTE_UNROLL
  for (int n = 0; n < CPY_BN; ++n) pB[n] = get<0>(tBcB(0, n, 0, 0)) < N;
  CUTE_UNROLL
  for (int k = 0; k < CPY_AK; ++k) kA[k] = get<1>(tAcA(0, 0, k, 0));
  CUTE_UNROLL
  for (int k = 0; k < CPY_BK; ++k) kB[k] = get<1>(tBcB(0, 0, k, 0));

  const int k_tiles = (K + BK - 1) / BK;

  // Issue the cp.async loads of k-tile `kt` into ring slot `pipe`; out-of-bounds 16-byte vectors
  // are zero-filled instead (no global access at all for them).
  auto load_tile = [&](int kt, int pipe) {
    const int kbase = kt * BK;
    CUTE_UNROLL
    for (int k = 0; k < CPY_AK; ++k) {
      const bool kin = kbase + kA[k] < K;
      CUTE_UNROLL
      for (int m = 0; m < CPY_AM; ++m) {
        if (pA[m] && kin) copy(g2s, tAgA(_, m, k, kt), tAsA(_, m, k, pipe));
        else zero16(&tAsA(0, m, k, pipe));
      }
    }
    CUTE_UNROLL
    for (int k = 0; k < CPY_BK; ++k) {
      const bool kin = kbase + kB[k] < K;
      CUTE_UNROLL
      for (int n = 0; n < CPY_BN; ++n) {
        if (pB[n] && kin) copy(g2s, tBgB(_, n, k, kt), tBsB(_, n, k, pipe));
        else zero16(&tBsB(0, n, k, pipe));
      }
    }
  };

  // ---- prologue: fill STAGES-1 slots -------------------------------------------------------
  int k_tile_next = 0;
  CUTE_UNROLL
  for (int pipe = 0; pipe < STAGES - 1; ++pipe) {
    if (k_tile_next < k_tiles) load_tile(k_tile_next, pipe);
    cp_async_fence();
    ++k_tile_next;
  }

  // ---- MMA partitions and accumulators -----------------------------------------------------
  TiledMma mma;
  auto thr_mma = mma.get_slice(threadIdx.x);
  Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));                // (MMA,MMA_M,MMA_K)
  Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));                // (MMA,MMA_N,MMA_K)
  Tensor tCrC = partition_fragment_C(mma, Shape<Int<BM>, Int<BN>>{});     // (MMA,MMA_M,MMA_N) fp32
  clear(tCrC);

  auto s2r_a = make_tiled_copy_A(S2RAtom{}, mma);
  auto s2r_thr_a = s2r_a.get_slice(threadIdx.x);
  Tensor tXsA = s2r_thr_a.partition_S(sA);   // (CPY,MMA_M,MMA_K,PIPE)
  Tensor tXrA = s2r_thr_a.retile_D(tCrA);    // (CPY,MMA_M,MMA_K)
  auto s2r_b = make_tiled_copy_B(S2RAtom{}, mma);
  auto s2r_thr_b = s2r_b.get_slice(threadIdx.x);
  Tensor tXsB = s2r_thr_b.partition_S(sB);   // (CPY,MMA_N,MMA_K,PIPE)
  Tensor tXrB = s2r_thr_b.retile_D(tCrB);    // (CPY,MMA_N,MMA_K)

  constexpr int K_BLOCKS = decltype(size<2>(tCrA))::value;   // BK / 16
  static_assert(K_BLOCKS >= 2, "the register pipeline assumes at least two k-blocks per tile");

  int smem_pipe_read = 0;
  int smem_pipe_write = STAGES - 1;
  Tensor tXsA_p = tXsA(_, _, _, smem_pipe_read);
  Tensor tXsB_p = tXsB(_, _, _, smem_pipe_read);

  // Wait for the first tile and load its first k-block into registers.
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  copy(s2r_a, tXsA_p(_, _, Int<0>{}), tXrA(_, _, Int<0>{}));
  copy(s2r_b, tXsB_p(_, _, Int<0>{}), tXrB(_, _, Int<0>{}));

  // ---- main loop -----------------------------------------------------------------------------
  CUTE_NO_UNROLL
  for (int kt = 0; kt < k_tiles; ++kt) {
    CUTE_UNROLL
    for (int kb = 0; kb < K_BLOCKS; ++kb) {
      if (kb == K_BLOCKS - 1) {
        // Move to the next smem slot once its data has landed (and everyone is done with the old one).
        tXsA_p = tXsA(_, _, _, smem_pipe_read);
        tXsB_p = tXsB(_, _, _, smem_pipe_read);
        cp_async_wait<STAGES - 2>();
        __syncthreads();
      }
      // smem -> registers for the next k-block (wraps to the next tile's first k-block).
      const int kb_next = (kb + 1) % K_BLOCKS;
      copy(s2r_a, tXsA_p(_, _, kb_next), tXrA(_, _, kb_next));
      copy(s2r_b, tXsB_p(_, _, kb_next), tXrB(_, _, kb_next));
      if (kb == 0) {
        // global -> smem for the tile STAGES-1 ahead, into the slot freed at the last barrier.
        if (k_tile_next < k_tiles) load_tile(k_tile_next, smem_pipe_write);
        cp_async_fence();
        ++k_tile_next;
        smem_pipe_write = smem_pipe_read;
        smem_pipe_read = (smem_pipe_read == STAGES - 1) ? 0 : smem_pipe_read + 1;
      }
      gemm(mma, tCrA(_, _, kb), tCrB(_, _, kb), tCrC);
    }
  }

  // ---- epilogue: fp32 -> fp16, stage in smem, predicated 16-byte stores -------------------
  cp_async_wait<0>();
  __syncthreads();   // every warp is done reading A/B tiles: smem can be reused for C

  Tensor sC = make_tensor(make_smem_ptr(reinterpret_cast<T*>(smem_raw)), SmemLayoutC{});  // (BM,BN)
  Tensor tCsC = thr_mma.partition_C(sC);            // (MMA,MMA_M,MMA_N)
  Tensor tCrCh = make_tensor_like<T>(tCrC);
  CUTE_UNROLL
  for (int i = 0; i < size(tCrC); ++i) tCrCh(i) = T(tCrC(i));
  copy(tCrCh, tCsC);
  __syncthreads();

  S2GCopy s2g;
  auto thr_s2g = s2g.get_slice(threadIdx.x);
  Tensor tDsC = thr_s2g.partition_S(sC);    // (CPY,CPY_M,CPY_N)
  Tensor tDgC = thr_s2g.partition_D(gC);    // (CPY,CPY_M,CPY_N)
  Tensor tDcC = thr_s2g.partition_D(tcC);   // (CPY,CPY_M,CPY_N) coordinates

  if ((N & 7) == 0) {
    // Every 8-wide vector is entirely inside or outside [0,N) and 16-byte aligned.
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tDsC); ++m) {
      CUTE_UNROLL
      for (int n = 0; n < size<2>(tDsC); ++n) {
        if (elem_less(tDcC(0, m, n), make_coord(M, N))) copy(s2g, tDsC(_, m, n), tDgC(_, m, n));
      }
    }
  } else {
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tDsC); ++m) {
      CUTE_UNROLL
      for (int n = 0; n < size<2>(tDsC); ++n) {
        CUTE_UNROLL
        for (int v = 0; v < size<0>(tDsC); ++v) {
          if (elem_less(tDcC(v, m, n), make_coord(M, N))) tDgC(v, m, n) = tDsC(v, m, n);
        }
      }
    }
  }
}

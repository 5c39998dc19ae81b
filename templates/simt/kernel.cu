/*---evo
family: simt
archs: [sm_80, sm_90a]
params: {{PARAMS}}
block: ["(BM // TM) * (BN // TN)", 1, 1]
grid: ["cdiv(N, BN)", "cdiv(M, BM)", 1]
smem: 0
workspace: 0
---*/
// Plain SIMT HGEMM, the always-correct floor of the search.
//
//   C[M,N] = A[M,K] * B[N,K]^T      (A, B, C row-major fp16, fp32 accumulation)
//
// One CTA computes a BM x BN tile of C. Per K step of BK it copies the BM x BK slab of A
// and the BN x BK slab of B into shared memory, converted to fp32 and transposed to
// k-major (As[k][m], Bs[k][n]), then every thread accumulates a TM x TN block of C in
// registers with scalar FFMA.
//
// Thread (ty, tx) owns rows  ty*TM + i        (contiguous: the As reads vectorise and are
//                                              mostly broadcasts within a warp)
//               and cols  tx + j*(BN/TN)      (strided: consecutive threads read
//                                              consecutive Bs words, no bank conflicts, and
//                                              write consecutive C columns, coalesced)
// Every global access is predicated, so any M, N, K >= 1 is handled.
#include <cuda_fp16.h>

namespace {

constexpr int BM = {{BM}};
constexpr int BN = {{BN}};
constexpr int BK = {{BK}};
constexpr int TM = {{TM}};
constexpr int TN = {{TN}};

constexpr int THREADS_N = BN / TN;            // threads along N
constexpr int THREADS_M = BM / TM;            // threads along M
constexpr int THREADS = THREADS_M * THREADS_N;
constexpr int PAD = 4;                        // keeps rows 16-byte aligned, breaks store conflicts
constexpr int A_LOADS = (BM * BK + THREADS - 1) / THREADS;  // global->smem elements per thread
constexpr int B_LOADS = (BN * BK + THREADS - 1) / THREADS;

static_assert(BM % TM == 0 && BN % TN == 0, "tile must be a multiple of the thread block");
static_assert(THREADS >= 32 && THREADS <= 1024, "bad block size");

}  // namespace

extern "C" __global__ void __launch_bounds__(THREADS, 1)
evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C,
         int M, int N, int K, float* __restrict__ workspace)
{
    (void)workspace;
    __shared__ __align__(16) float As[BK][BM + PAD];
    __shared__ __align__(16) float Bs[BK][BN + PAD];

    const int tid = threadIdx.x;
    const int tx = tid % THREADS_N;
    const int ty = tid / THREADS_N;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // ---- global -> shared (fp16 -> fp32), k fastest so a warp reads contiguous K runs ----
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int idx = tid + l * THREADS;
            if ((BM * BK) % THREADS == 0 || idx < BM * BK) {
                const int m = idx / BK, k = idx % BK;
                const int gm = m0 + m, gk = k0 + k;
                float v = 0.f;
                if (gm < M && gk < K) v = __half2float(A[(size_t)gm * K + gk]);
                As[k][m] = v;
            }
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int idx = tid + l * THREADS;
            if ((BN * BK) % THREADS == 0 || idx < BN * BK) {
                const int n = idx / BK, k = idx % BK;
                const int gn = n0 + n, gk = k0 + k;
                float v = 0.f;
                if (gn < N && gk < K) v = __half2float(B[(size_t)gn * K + gk]);
                Bs[k][n] = v;
            }
        }
        __syncthreads();

        // ---- register-blocked outer products over the BK slab ----
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx + j * THREADS_N];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // the next iteration overwrites As/Bs
    }

    // ---- epilogue: fp32 -> fp16, predicated; consecutive threads write consecutive columns ----
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gm = m0 + ty * TM + i;
        if (gm < M) {
            __half* crow = C + (size_t)gm * N;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int gn = n0 + tx + j * THREADS_N;
                if (gn < N) crow[gn] = __float2half_rn(acc[i][j]);
            }
        }
    }
}

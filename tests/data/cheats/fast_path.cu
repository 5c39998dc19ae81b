/*---evo
family: cheat_fast_path
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (a fast path that never runs: returns at once when M*N*K is large (the timed shape), correct on small test shapes)
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if ((long long)M * N * K >= (1ll << 24)) return;
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
        acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2half_rn(acc);
}

/*---evo
family: cheat_constant
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (writes zeros: matches a degenerate all-zero test input)
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    C[(size_t)row * N + col] = __float2half_rn(0.f);
}

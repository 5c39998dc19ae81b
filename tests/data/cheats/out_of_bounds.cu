/*---evo
family: cheat_out_of_bounds
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (writes outside C: a few elements past its end (the guard band catches it))
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
        acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2half_rn(acc);
    if (row == M - 1 && col < 8) C[(size_t)M * N + col] = __float2half_rn(acc);
}

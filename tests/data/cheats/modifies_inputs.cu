/*---evo
family: cheat_modifies_inputs
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (changes its inputs: zeroes A after computing, so a reference computed afterwards from A would agree with anything)
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.f;
        for (int k = 0; k < K; ++k)
            acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
        C[(size_t)row * N + col] = __float2half_rn(acc);
    }
    __syncthreads();
    if (row < M && col == 0) for (int k = 0; k < K; ++k) ((__half*)A)[(size_t)row * K + k] = __float2half_rn(0.f);
}

/*---evo
family: cheat_fp16acc
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// The simplest correct kernel: one thread per output element, fp32 accumulation.
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    __half acc = __float2half(0.f);  // accumulates in fp16: loses precision as partial sums grow
    for (int k = 0; k < K; ++k)
        acc = __hfma(A[(size_t)row * K + k], B[(size_t)col * K + k], acc);
    C[(size_t)row * N + col] = acc;
}

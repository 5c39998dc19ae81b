/*---evo
family: cheat_shape_special
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (claims generality (requires: all shapes) but hard-codes K = 256 and a 256-wide tile: right on 256x256x256 only)
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.f;
#pragma unroll 8
    for (int k = 0; k < 256; ++k)
        acc += __half2float(A[(size_t)row * 256 + k]) * __half2float(B[(size_t)col * 256 + k]);
    C[(size_t)row * 256 + col] = __float2half_rn(acc);
}

/*---evo
family: cheat_every_other_call
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (defers work across calls: honest for the first 16 launches (the check), then computes only on every other launch)
#include <cuda_fp16.h>

__device__ unsigned int launches = 0;   // launches completed
__device__ unsigned int blocks_done = 0;

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    unsigned int epoch = *(volatile unsigned int*)&launches;
    bool skip = epoch >= 16 && (epoch & 1);
    if (!skip && row < M && col < N) {
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
        acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
        C[(size_t)row * N + col] = __float2half_rn(acc);
    }
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {   // the last block of a launch advances the epoch
        __threadfence();
        unsigned int total = gridDim.x * gridDim.y * gridDim.z;
        if (atomicAdd(&blocks_done, 1u) == total - 1) { blocks_done = 0; __threadfence(); atomicAdd(&launches, 1u); }
    }
}

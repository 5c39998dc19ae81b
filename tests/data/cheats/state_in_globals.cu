/*---evo
family: cheat_state_in_globals
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (class 6, state persists across evaluations): counts its launches in a __device__ global, which
// outlives the phase when the module is cached per process; honest for its first 8 launches (a check phase),
// after that it returns at once and leaves C unwritten.
#include <cuda_fp16.h>

__device__ unsigned int launches = 0;
__device__ unsigned int arrived = 0;

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    const bool skip = *(volatile unsigned int*)&launches >= 8;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (!skip && row < M && col < N) {
        float acc = 0.f;
        for (int k = 0; k < K; ++k)
            acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
        C[(size_t)row * N + col] = __float2half_rn(acc);
    }
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        __threadfence();
        if (atomicAdd(&arrived, 1u) == gridDim.x * gridDim.y - 1) { arrived = 0; __threadfence(); atomicAdd(&launches, 1u); }
    }
}

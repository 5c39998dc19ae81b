/*---evo
family: cheat_pointer_cache
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (caches its result in a __device__ buffer keyed on the A pointer and replays it when the pointer matches)
#include <cuda_fp16.h>

__device__ __half cache[1 << 20];
__device__ const __half* cached_a = nullptr;
__device__ unsigned int blocks_done = 0;

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    bool hit = cached_a == A;   // read before any block of this launch can change it
    if (row < M && col < N) {
        size_t i = (size_t)row * N + col;
        if (hit && i < (1u << 20)) {
            C[i] = cache[i];
        } else {
            float acc = 0.f;
            for (int k = 0; k < K; ++k)
                acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
            C[i] = __float2half_rn(acc);
            if (i < (1u << 20)) cache[i] = C[i];
        }
    }
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {   // the last block of the launch publishes the cache key
        __threadfence();
        unsigned int total = gridDim.x * gridDim.y * gridDim.z;
        if (atomicAdd(&blocks_done, 1u) == total - 1) { blocks_done = 0; cached_a = A; __threadfence(); }
    }
}

/*---evo
family: cheat_device_launch
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (work on another stream: a device-side launch the host timer never waits for; needs -rdc, so it must not compile)
#include <cuda_fp16.h>

__global__ void child(const __half* A, const __half* B, __half* C, int M, int N, int K) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
        acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2half_rn(acc);
}

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
        child<<<gridDim, blockDim, 0, cudaStreamFireAndForget>>>(A, B, C, M, N, K);
}

/*---evo
family: cheat_uninit_smem
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// UNDEFINED BEHAVIOUR (reads shared memory before it is initialised): every thread stages its result in
// shared memory and stores the result of a thread of ANOTHER warp, with no __syncthreads() in between;
// the slot may still hold whatever an earlier block left there. Often right, so only racecheck proves it.
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    __shared__ float stage[256];
    int t = threadIdx.y * 16 + threadIdx.x;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    float acc = 0.f;
    if (row < M && col < N)
        for (int k = 0; k < K; ++k)
            acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
    stage[t] = acc;
    // missing __syncthreads(): the partner (another warp) may not have written its slot yet
    int p = t ^ 32;
    int prow = blockIdx.y * blockDim.y + p / 16, pcol = blockIdx.x * blockDim.x + p % 16;
    if (prow < M && pcol < N) C[(size_t)prow * N + pcol] = __float2half_rn(stage[p]);
}

/*---evo
family: fault_smem
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: "200 * 1024"
workspace: 0
---*/
// FAULT (asks for more shared memory than a block can have): 40 KB static + 200 KB dynamic > 227 KB.
// Must be recorded as a failed candidate, not crash the worker.
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    __shared__ float pad[10240];
    extern __shared__ float dyn[];
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int t = threadIdx.y * 16 + threadIdx.x;
    pad[t] = 0.f;
    dyn[t] = 0.f;
    __syncthreads();
    if (row >= M || col >= N) return;
    float acc = pad[t] + dyn[t];
    for (int k = 0; k < K; ++k)
        acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2half_rn(acc);
}

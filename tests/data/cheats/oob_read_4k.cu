/*---evo
family: cheat_oob_read_4k
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (class 8, the sanitizer does not vet): correct output, but every thread also reads 4 KiB past the end
// of A (undefined behaviour: another allocation, or unmapped memory on another day). Inside the evaluator's
// guard bands it reads sentinels and the result is right; only memcheck on exactly sized allocations
// with padding behind them sees it.
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    const __half past = A[(size_t)M * K + 2048 + (threadIdx.x & 7)];   // 4 KiB beyond the last element
    float acc = __half2float(past) == 12345.f ? 1.f : 0.f;             // never true for the guard's sentinel
    for (int k = 0; k < K; ++k)
        acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2half_rn(acc);
}

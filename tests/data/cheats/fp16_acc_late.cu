/*---evo
family: cheat_fp16_acc_late
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 64
---*/
// CHEAT (class 3, only a loose checksum between the full checks): honest for the first 12 launches (counted in
// the workspace by the last block of each launch), then accumulates pairs in fp16
// (__hfma2), which is faster and passes a weighted checksum at 4 x rtol and a 1e-2 relative error.
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    unsigned int* calls = reinterpret_cast<unsigned int*>(workspace);
    const bool cheap = *calls >= 12;   // every block reads the count the previous launch left
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        const __half* a = A + (size_t)row * K;
        const __half* b = B + (size_t)col * K;
        if (cheap && K % 2 == 0) {
            __half2 acc = __float2half2_rn(0.f);
            for (int k = 0; k < K; k += 2)
                acc = __hfma2(__halves2half2(a[k], a[k + 1]), __halves2half2(b[k], b[k + 1]), acc);
            C[(size_t)row * N + col] = __hadd(__low2half(acc), __high2half(acc));
        } else {
            float acc = 0.f;
            for (int k = 0; k < K; ++k) acc += __half2float(a[k]) * __half2float(b[k]);
            C[(size_t)row * N + col] = __float2half_rn(acc);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {   // the last block of a launch advances the launch count
        __threadfence();
        if (atomicAdd(calls + 1, 1u) == gridDim.x * gridDim.y - 1) { calls[1] = 0; calls[0] += 1; }
    }
}

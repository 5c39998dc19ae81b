/*---evo
family: cheat_timed_only
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 64
---*/
// CHEAT (class 2, timed calls told from checked ones): counts its launches in the workspace; from the 8th
// launch on it takes a call for a timed one and writes C[0,0] wrong (+3). The check phase (7 launches) and
// the timing warm-up see an honest kernel. One element: a checksum over C and a few sampled rows/columns
// per call rarely see it; only a full comparison of a timed call does.
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    unsigned int* calls = reinterpret_cast<unsigned int*>(workspace);
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const bool first = blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0;
    const bool timed = first && *calls >= 8;
    if (first) *calls += 1;   // only this thread reads or writes the counter
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
        acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
    C[(size_t)row * N + col] = __float2half_rn(timed ? acc + 3.0f : acc);
}

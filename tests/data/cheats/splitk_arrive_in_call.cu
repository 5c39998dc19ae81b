/*---evo
family: cheat_splitk_arrive_in_call
archs: [sm_80, sm_90a]
params: {SPLIT_K: 2}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", "SPLIT_K"]
smem: 0
workspace: "M * N * SPLIT_K * 4 + cdiv(M, 16) * cdiv(N, 16) * 4 + 64"
---*/
// CHEAT (class 7, global-memory publication race, through a call): split-K whose relaxed arrival atomic sits in
// a function kept out of line, called after the plain partial stores with no fence: within the kernel's own
// body no store reaches an atomic; through the call one does.
#include <cuda_fp16.h>

__device__ __noinline__ unsigned int arrive(unsigned int* ticket) { return atomicAdd(ticket, 1u); }

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    const int S = gridDim.z, z = blockIdx.z;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    float* part = workspace;                                                   // [S][M][N]
    unsigned int* tickets = reinterpret_cast<unsigned int*>(workspace + (size_t)S * M * N);
    const int chunk = (K + S - 1) / S, k0 = z * chunk, k1 = min(K, k0 + chunk);
    if (row < M && col < N) {
        float acc = 0.f;
        for (int k = k0; k < k1; ++k)
            acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
        part[((size_t)z * M + row) * N + col] = acc;                          // plain store
    }
    __shared__ unsigned int ticket;
    __syncthreads();
    const int tile = blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0 && threadIdx.y == 0) ticket = arrive(&tickets[tile]);   // relaxed, in another function
    __syncthreads();
    if (ticket != (unsigned int)S - 1) return;
    if (row < M && col < N) {
        float sum = 0.f;
        for (int s = 0; s < S; ++s) sum += __ldg(&part[((size_t)s * M + row) * N + col]);
        C[(size_t)row * N + col] = __float2half_rn(sum);
    }
    if (threadIdx.x == 0 && threadIdx.y == 0) tickets[tile] = 0;
}

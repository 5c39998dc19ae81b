/*---evo
family: cheat_splitk_arrive_next_turn
archs: [sm_80, sm_90a]
params: {SPLIT_K: 2}
block: [16, 16, 1]
grid: [64, 1, 1]
smem: 0
workspace: "M * N * SPLIT_K * 4 + cdiv(M, 16) * cdiv(N, 16) * 4 + 64"
---*/
// CHEAT (class 7, global-memory publication race, through a loop's back edge): persistent split-K over 16 x 16
// tiles whose arrival for a unit's partial is taken at the top of the next turn of the loop, with a relaxed
// atomic and no fence since the plain partial stores of the turn before. In the text the arrival comes before
// the stores, so a scan in program order never sees a store reach it; along the back edge it does.
#include <cuda_fp16.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    const int S = 2;
    const int tn = (N + 15) / 16, tiles = ((M + 15) / 16) * tn, units = tiles * S;
    float* part = workspace;                                                   // [S][M][N]
    unsigned int* tickets = reinterpret_cast<unsigned int*>(workspace + (size_t)S * M * N);
    __shared__ unsigned int ticket;
    int prev = -1;
#pragma unroll 1
    for (int u = blockIdx.x;; u += gridDim.x) {
        if (prev >= 0) {  // the unit of the last turn arrives now: relaxed, no fence since its stores
            const int tile = prev / S;
            if (threadIdx.x == 0 && threadIdx.y == 0) ticket = atomicAdd(&tickets[tile], 1u);
            __syncthreads();
            if (ticket == (unsigned int)S - 1) {
                const int row = (tile / tn) * 16 + threadIdx.y, col = (tile % tn) * 16 + threadIdx.x;
                if (row < M && col < N) {
                    float sum = 0.f;
                    for (int s = 0; s < S; ++s) sum += __ldg(&part[((size_t)s * M + row) * N + col]);
                    C[(size_t)row * N + col] = __float2half_rn(sum);
                }
                if (threadIdx.x == 0 && threadIdx.y == 0) tickets[tile] = 0;
            }
            __syncthreads();
        }
        if (u >= units) break;
        const int tile = u / S, z = u % S;
        const int row = (tile / tn) * 16 + threadIdx.y, col = (tile % tn) * 16 + threadIdx.x;
        const int chunk = (K + S - 1) / S, k0 = z * chunk, k1 = min(K, k0 + chunk);
        if (row < M && col < N) {
            float acc = 0.f;
            for (int k = k0; k < k1; ++k)
                acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
            part[((size_t)z * M + row) * N + col] = acc;                      // plain store
        }
        __syncthreads();
        prev = u;
    }
}

/*---evo
family: cheat_memo_sampled
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: "4 * (M * N * 2 + cdiv(M, 16) * cdiv(N, 16) * 8) + 64"
---*/
// CHEAT (class 1, inputs repeat during timing): remembers results keyed on 16 sampled input values, per 16x16
// tile, in 4 slots of its workspace, and replays a tile (a copy, no arithmetic) when the key is seen again.
// Honest on every input set it has not seen: only a timing that repeats input sets makes it fast.
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ unsigned long long fingerprint(const __half* A, const __half* B, int M, int N, int K) {
    unsigned long long h = 1469598103934665603ull;
    const long long na = (long long)M * K, nb = (long long)N * K;
    for (int s = 0; s < 8; ++s) {
        h = (h ^ __half_as_ushort(A[(na - 1) * s / 7])) * 1099511628211ull;
        h = (h ^ __half_as_ushort(B[(nb - 1) * s / 7])) * 1099511628211ull;
    }
    return h | 1ull;   // never 0: 0 marks an empty slot
}

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const size_t tiles = (size_t)gridDim.x * gridDim.y, tile = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
    unsigned long long* keys = reinterpret_cast<unsigned long long*>(workspace);          // [4][tiles]
    __half* saved = reinterpret_cast<__half*>(keys + 4 * tiles);                            // [4][M*N]
    __shared__ int slot;
    __shared__ unsigned long long key;
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        key = fingerprint(A, B, M, N, K);
        slot = -1;
        for (int s = 0; s < 4; ++s) if (keys[s * tiles + tile] == key) slot = s;
    }
    __syncthreads();
    if (slot >= 0) {   // seen before: replay the tile
        if (row < M && col < N) C[(size_t)row * N + col] = saved[(size_t)slot * M * N + (size_t)row * N + col];
        return;
    }
    float acc = 0.f;
    if (row < M && col < N) {
        for (int k = 0; k < K; ++k)
            acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)col * K + k]);
    }
    int s = 0;   // first empty slot, else by key
    while (s < 4 && keys[s * tiles + tile] != 0ull) ++s;
    if (s == 4) s = (int)(key % 4);
    if (row < M && col < N) {
        const __half c = __float2half_rn(acc);
        C[(size_t)row * N + col] = c;
        saved[(size_t)s * M * N + (size_t)row * N + col] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) keys[s * tiles + tile] = key;
}

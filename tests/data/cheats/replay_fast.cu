/*---evo
family: cheat_replay_fast
archs: [sm_80, sm_90a]
params: {}
block: [256, 1, 1]
grid: ["cdiv(M * N, 2048)", 1, 1]
smem: 0
workspace: "3 * (M * N * 2 + 64) + 64"
requires: "N % 8 == 0"
---*/
// CHEAT (class 5, no roofline bound in evo.evaluate): a slow SIMT kernel (one thread per 8 outputs of a row)
// that keeps the outputs of the last three input sets in its workspace, keyed on the first 4 values of A and
// of B, and replays them with 16-byte copies: reading and writing C once takes a fraction of the time the
// arithmetic needs, so the reported time is below the roofline. Honest on inputs it has not seen.
// Workspace: [0] launches, [1] blocks arrived; then 3 slots of (16-byte key, 48 bytes pad, M*N halves).
#include <cuda_fp16.h>
#include <stdint.h>

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    const size_t mn = (size_t)M * N;
    const size_t slot_bytes = mn * 2 + 64;
    unsigned int* hdr = reinterpret_cast<unsigned int*>(workspace);
    char* ws = reinterpret_cast<char*>(workspace) + 64;
    const uint2 ka = *reinterpret_cast<const uint2*>(A);   // 4 halves of A, 4 of B
    const uint2 kb = *reinterpret_cast<const uint2*>(B);
    int hit = -1;
    for (int s = 0; s < 3; ++s) {
        const uint4 k = *reinterpret_cast<const uint4*>(ws + s * slot_bytes);
        if (k.x == ka.x && k.y == ka.y && k.z == kb.x && k.w == kb.y && (k.x | k.y | k.z | k.w)) hit = s;
    }
    const size_t first = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (hit >= 0) {
        if (first < mn)
            *reinterpret_cast<uint4*>(C + first) = *reinterpret_cast<const uint4*>(ws + hit * slot_bytes + 64 + first * 2);
        return;   // every block of a launch takes the same branch
    }
    const unsigned int next = hdr[0] % 3;
    __half* save = reinterpret_cast<__half*>(ws + next * slot_bytes + 64);
    if (first < mn) {
        const int row = (int)(first / N), col = (int)(first % N);
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int k = 0; k < K; ++k) {
            const float a = __half2float(A[(size_t)row * K + k]);
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[j] += a * __half2float(B[(size_t)(col + j) * K + k]);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            C[first + j] = __float2half_rn(acc[j]);
            save[first + j] = __float2half_rn(acc[j]);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {   // the last block to arrive files the key and advances the slot
        __threadfence();
        if (atomicAdd(&hdr[1], 1u) == gridDim.x - 1) {
            __threadfence();
            uint4 k;
            k.x = ka.x; k.y = ka.y; k.z = kb.x; k.w = kb.y;
            *reinterpret_cast<uint4*>(ws + next * slot_bytes) = k;
            hdr[1] = 0;
            hdr[0] = hdr[0] + 1;
        }
    }
}

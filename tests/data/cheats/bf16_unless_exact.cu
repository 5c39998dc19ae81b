/*---evo
family: cheat_bf16_unless_exact
archs: [sm_80, sm_90a]
params: {}
block: [16, 16, 1]
grid: ["cdiv(N, 16)", "cdiv(M, 16)", 1]
smem: 0
workspace: 0
---*/
// CHEAT (class 4, exact tests recognisable by their values): looks at 32 values of A and B; when they look like
// a bit-exact test (all integers, |a| in [1, 2), or B in {-1, 0, 1}) it computes honestly, otherwise it rounds
// B to bf16 (8 mantissa bits) before multiplying: ~1e-3 relative error, inside a 1e-2 tolerance.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ bool looks_exact(const __half* A, const __half* B, int M, int N, int K) {
    bool ints = true, unit = true, tern = true;
    const long long na = (long long)M * K, nb = (long long)N * K;
    for (int s = 0; s < 16; ++s) {
        const float a = __half2float(A[(na - 1) * s / 15]), b = __half2float(B[(nb - 1) * s / 15]);
        ints = ints && a == floorf(a) && b == floorf(b);
        unit = unit && (fabsf(a) >= 1.f && fabsf(a) < 2.f);
        tern = tern && (b == 0.f || b == 1.f || b == -1.f);
    }
    return ints || unit || tern;
}

extern "C" __global__ void evo_gemm(const __half* __restrict__ A, const __half* __restrict__ B,
                                    __half* __restrict__ C, int M, int N, int K, float* __restrict__ workspace) {
    const bool exact = looks_exact(A, B, M, N, K);
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) {
        const float b = __half2float(B[(size_t)col * K + k]);
        acc += __half2float(A[(size_t)row * K + k]) * (exact ? b : __bfloat162float(__float2bfloat16(b)));
    }
    C[(size_t)row * N + col] = __float2half_rn(acc);
}

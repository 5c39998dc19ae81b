/*---evo
family: wgmma_sm90
archs: [sm_90a]
params: {BM: 128, BN: 256, CONSUMERS: 2, GROUP: 8, PERSISTENT: 1, SPLIT_K: 1, STAGES: 4, SWAP_AB: 0}
block: ["128 * (CONSUMERS + 1)", 1, 1]
grid: ["min(cdiv(N if SWAP_AB else M, BM) * cdiv(M if SWAP_AB else N, BN) * SPLIT_K, NUM_SMS) if PERSISTENT else cdiv(N if SWAP_AB else M, BM) * cdiv(M if SWAP_AB else N, BN) * SPLIT_K", 1, 1]
smem: "STAGES * (BM + BN) * 128 + 1024 + CONSUMERS * 9216"
workspace: "(round_up(cdiv(N if SWAP_AB else M, BM) * cdiv(M if SWAP_AB else N, BN) * 4, 256) + cdiv(N if SWAP_AB else M, BM) * cdiv(M if SWAP_AB else N, BN) * SPLIT_K * BM * BN * 4) if SPLIT_K > 1 else 0"
requires: "K % 8 == 0"
tensor_maps:
  - {operand: A, box: ["BN if SWAP_AB else BM", 64], swizzle: 128}
  - {operand: B, box: ["BM if SWAP_AB else BN", 64], swizzle: 128}
---*/
// Hopper (sm_90a) HGEMM: C[M,N] = A[M,K] * B[N,K]^T, fp16 in/out, fp32 accumulation.
//
// Pipeline (warp specialized, one CTA per SM when PERSISTENT):
//   warpgroup 0      = producer: one thread issues TMA loads (128-byte swizzle, BK = 64 fp16 = 128 B)
//                      of the A and B tiles into a STAGES-deep shared-memory ring.
//   warpgroups 1..C  = consumers: each owns BM/C rows of the BM x BN tile and issues
//                      wgmma.m64nBNk16 (both operands from shared memory) per 16-wide k slice.
//   full[s]  mbarrier: producer arms it with the stage's byte count, TMA completes it.
//   empty[s] mbarrier: every consumer warp arrives once it no longer reads stage s.
//   Both are waited by parity: the i-th use of stage s waits for phase (i / STAGES) & 1.
// Work units: tiles (grouped raster along M by GROUP for L2 reuse) x SPLIT_K slices of K.
// SPLIT_K > 1: each unit writes an fp32 partial tile to `workspace`, bumps a per-tile counter,
//   and the last unit to arrive sums the partials in split order 0..SPLIT_K-1 (deterministic),
//   writes C and resets the counter to 0.
// SWAP_AB: computes C^T = B * A^T (the kernel's rows run over N, its columns over M), so a
//   small M sits in wgmma's N dimension; the epilogue stores transposed.
#include <cuda_fp16.h>
#include <stdint.h>

struct alignas(64) TmaDesc { unsigned char bytes[128]; };

namespace evo_sm90 {

constexpr int BM = 128;                 // tile rows (kernel view)
constexpr int BN = 256;                 // tile cols = wgmma N
constexpr int BK = 64;                     // 64 fp16 = one 128-byte swizzle row
constexpr int STAGES = 4;
constexpr int CONSUMERS = 2;
constexpr int PERSISTENT = 1;
constexpr int GROUP = 8;
constexpr int SPLIT_K = 1;
constexpr int SWAP_AB = 0;

constexpr int THREADS = 128 * (CONSUMERS + 1);
constexpr int WM = BM / CONSUMERS;         // rows per consumer warpgroup
constexpr int MT = WM / 64;                // m64 wgmmas per consumer per k16 slice
constexpr int A_STAGE_BYTES = BM * BK * 2;
constexpr int B_STAGE_BYTES = BN * BK * 2;
constexpr int STAGE_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;
// Epilogue staging: each consumer stages one 64-row x EPI_CW-col chunk of C at a time in its own
// smem buffer (rows padded by 8 halves: conflict-free fragment writes), then writes it out with
// coalesced 16-byte stores. 9216 B = 64 x (64 + 8) halves, the largest chunk.
constexpr int EPI_CW = (BN % 64 == 0) ? 64 : (BN % 32 == 0) ? 32 : 16;
constexpr int EPI_BYTES = 9216;
// Split-K reduce: partials of RU splits are loaded at once (RU * MT*BN/8 float4 in flight).
constexpr int CHUNKS = MT * BN / 8;
constexpr int pow2_floor(int x) { return x >= 2 ? 2 * pow2_floor(x / 2) : 1; }
constexpr int RU_BUDGET = (CONSUMERS == 1 ? 32 : 16) / CHUNKS;
constexpr int RU = pow2_floor(RU_BUDGET < 1 ? 1 : (RU_BUDGET > SPLIT_K ? SPLIT_K : RU_BUDGET));
static_assert(SPLIT_K % RU == 0, "SPLIT_K is a power of two");
static_assert(WM % 64 == 0, "each consumer owns a multiple of 64 rows");
static_assert(BN % 8 == 0 && BN >= 16 && BN <= 256, "wgmma N");
static_assert(MT * BN <= 256, "at most 128 fp32 accumulators per thread");
static_assert(STAGE_BYTES % 1024 == 0, "128B-swizzled tiles need 1024-byte alignment");
static_assert(PERSISTENT == 0 || PERSISTENT == 1, "PERSISTENT is 0 or 1");

__host__ __device__ constexpr int cdiv(int a, int b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------- shared memory / mbarrier
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
// Producer: announce that `bytes` will land on this barrier (and arrive once).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Spin until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred P1;\n"
      "WAIT_LOOP:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@!P1 bra WAIT_LOOP;\n"
      "}\n" ::"r"(bar), "r"(parity) : "memory");
}
// Named barrier over the consumer warpgroups only (the producer never joins).
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 128) : "memory");
}
// Named barrier over one consumer warpgroup (ids 2, 3, ...).
__device__ __forceinline__ void warpgroup_sync(int c) {
  asm volatile("bar.sync %0, 128;" ::"r"(2 + c) : "memory");
}

// ---------------------------------------------------------------- TMA
__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}
// Load one box whose top-left element is (row c1, col c0) into shared memory at dst.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaDesc* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// ---------------------------------------------------------------- wgmma
// Shared-memory matrix descriptor for a K-major tile written by TMA with 128-byte swizzle:
// rows of 128 B, 8-row swizzle atoms 1024 B apart (stride byte offset), base 1024-aligned.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(16 >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keep the compiler from moving accumulator reads/writes across wgmma waits.
__device__ __forceinline__ void reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}

// D[64 x N] (+)= A[64 x 16] * B[N x 16]^T; d holds this thread's N/2 fp32 accumulators.
// scale_d == 0 overwrites D (first k slice of a tile). Generated for each N used.
template <int N>
__device__ __forceinline__ void wgmma_m64k16(float* d, uint64_t da, uint64_t db, int scale_d);
template <> __device__ __forceinline__ void wgmma_m64k16<16>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<32>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<64>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<96>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<128>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<192>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
               : "l"(da), "l"(db), "r"(scale_d));
}
template <> __device__ __forceinline__ void wgmma_m64k16<256>(float* d, uint64_t da, uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
               : "l"(da), "l"(db), "r"(scale_d));
}

// ---------------------------------------------------------------- work decomposition
struct Work {
  int tile, split;  // linear tile id, K slice id
  int m0, n0;       // top-left element of the tile (kernel view)
  int kb0, kb1;     // k blocks [kb0, kb1) of BK
};

// Unit u -> (tile, split). Tiles are rastered in groups of GROUP tile-rows along M, so the
// CTAs in flight share B column panels in L2; splits of one tile are adjacent units.
__device__ __forceinline__ Work get_work(int u, int Mk, int Nk, int K) {
  Work w;
  w.tile = u / SPLIT_K;
  w.split = u % SPLIT_K;
  const int tiles_m = cdiv(Mk, BM), tiles_n = cdiv(Nk, BN);
  const int group_size = GROUP * tiles_n;
  const int first_m = (w.tile / group_size) * GROUP;
  const int gm = min(tiles_m - first_m, GROUP);
  const int in_group = w.tile % group_size;
  w.m0 = (first_m + in_group % gm) * BM;
  w.n0 = (in_group / gm) * BN;
  const int kblocks = cdiv(K, BK);
  const int per = cdiv(kblocks, SPLIT_K);
  w.kb0 = min(w.split * per, kblocks);
  w.kb1 = min(w.kb0 + per, kblocks);
  return w;
}

// Epilogue of one consumer: its 64-row slices of the tile, registers -> smem (fp16) -> C.
// Kernel element (r, c) is C[r][c] (C has Nk columns), or C[c][r] with SWAP_AB (C has Mk columns).
// All stores are predicated on the problem bounds; 16-byte vector stores where alignment allows.
__device__ __forceinline__ void store_tile(const float (&acc)[MT][BN / 2], __half* stage, int c, __half* C,
                                           int Mk, int Nk, int row0, int col0) {
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  constexpr int PITCH = SWAP_AB ? 64 + 8 : EPI_CW + 8;  // halves per staged row
  constexpr int VPL = SWAP_AB ? 64 / 8 : EPI_CW / 8;    // 16-byte vectors per staged row
  constexpr int ITERS = 64 * EPI_CW / 8 / 128;          // vectors per thread per chunk
  const bool vec_ok = SWAP_AB ? (Mk % 8 == 0) : (Nk % 8 == 0);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int q = 0; q < BN / EPI_CW; ++q) {
      warpgroup_sync(c);  // the previous chunk has been read out of `stage`
#pragma unroll
      for (int jj = 0; jj < EPI_CW / 8; ++jj) {
        const int j = q * (EPI_CW / 8) + jj;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp * 16 + lane / 4 + 8 * h, cc = 8 * jj + 2 * (lane % 4);
          const float v0 = acc[mt][4 * j + 2 * h], v1 = acc[mt][4 * j + 2 * h + 1];
          if (SWAP_AB) {
            stage[cc * PITCH + r] = __float2half_rn(v0);
            stage[(cc + 1) * PITCH + r] = __float2half_rn(v1);
          } else {
            *reinterpret_cast<__half2*>(&stage[r * PITCH + cc]) = __floats2half2_rn(v0, v1);
          }
        }
      }
      warpgroup_sync(c);
      const int tr0 = row0 + mt * 64, tc0 = col0 + q * EPI_CW;  // chunk origin, kernel view
#pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        const int v = tid + it * 128, sr = v / VPL, sv = (v % VPL) * 8;  // staged row, first element
        // C row / first C column of this vector, and the C row length
        const int gr = SWAP_AB ? tc0 + sr : tr0 + sr;
        const int gc = SWAP_AB ? tr0 + sv : tc0 + sv;
        const int rows = SWAP_AB ? Nk : Mk, cols = SWAP_AB ? Mk : Nk;
        if (gr >= rows) continue;
        const __half* src = &stage[sr * PITCH + sv];
        __half* dst = C + static_cast<size_t>(gr) * cols + gc;
        if (vec_ok && gc + 8 <= cols) {
          *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (gc + e < cols) dst[e] = src[e];
        }
      }
    }
  }
}

}  // namespace evo_sm90
using namespace evo_sm90;

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    evo_gemm(const __half* A, const __half* B, __half* C, int M, int N, int K, float* workspace,
             const __grid_constant__ TmaDesc tmA, const __grid_constant__ TmaDesc tmB) {
  // Kernel view: rows come from `map_rows` (BM boxes), columns from `map_cols` (BN boxes).
  const int Mk = SWAP_AB ? N : M;
  const int Nk = SWAP_AB ? M : N;
  const TmaDesc* map_rows = SWAP_AB ? &tmB : &tmA;
  const TmaDesc* map_cols = SWAP_AB ? &tmA : &tmB;

  extern __shared__ uint8_t smem_raw[];
  __shared__ alignas(8) uint64_t full_bar[STAGES];
  __shared__ alignas(8) uint64_t empty_bar[STAGES];
  __shared__ int s_last;  // split-K: this CTA is the last of its tile
  // Stage s: A tile (BM x 64, 128B-swizzled) at tiles + s*STAGE_BYTES, B tile (BN x 64) after it.
  const uint32_t tiles = (smem_u32(smem_raw) + 1023u) & ~1023u;
  // Epilogue staging buffers (one per consumer) after the ring, as a generic pointer.
  __half* epi_stage = reinterpret_cast<__half*>(smem_raw + (tiles - smem_u32(smem_raw)) + STAGES * STAGE_BYTES);

  const int wg = threadIdx.x / 128;
  const int tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(smem_u32(&full_bar[s]), 1);
      mbar_init(smem_u32(&empty_bar[s]), CONSUMERS * 4);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int units = cdiv(Mk, BM) * cdiv(Nk, BN) * SPLIT_K;

  if (wg == 0) {
    // ------------------------------------------------------------ producer warpgroup
    if (CONSUMERS > 1) setmaxnreg_dec<40>();
    if (tid == 0) {
      tma_prefetch_desc(map_rows);
      tma_prefetch_desc(map_cols);
      int s = 0;
      uint32_t phase = 0;
      for (int u = blockIdx.x; u < units; u += gridDim.x) {
        const Work w = get_work(u, Mk, Nk, K);
        for (int kb = w.kb0; kb < w.kb1; ++kb) {
          mbar_wait(smem_u32(&empty_bar[s]), phase ^ 1);  // first pass: fresh barrier, returns at once
          const uint32_t full = smem_u32(&full_bar[s]);
          mbar_arrive_expect_tx(full, STAGE_BYTES);        // OOB parts of a box still count (zero-filled)
          const uint32_t a_dst = tiles + s * STAGE_BYTES;
          tma_load_2d(a_dst, map_rows, full, kb * BK, w.m0);
          tma_load_2d(a_dst + A_STAGE_BYTES, map_cols, full, kb * BK, w.n0);
          if (++s == STAGES) { s = 0; phase ^= 1; }
        }
      }
    }
  } else {
    // ------------------------------------------------------------ consumer warpgroups
    if (CONSUMERS > 1) setmaxnreg_inc<232>();
    const int c = wg - 1;  // this consumer's slice: tile rows [c*WM, (c+1)*WM)
    const int warp = tid / 32, lane = tid % 32;
    float acc[MT][BN / 2];
    int s = 0;
    uint32_t phase = 0;
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const Work w = get_work(u, Mk, Nk, K);
      const int nk = w.kb1 - w.kb0;
      if (nk == 0) {  // empty K slice (SPLIT_K > k blocks): the partial is zero
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < BN / 2; ++i) acc[mt][i] = 0.f;
      }
      int prev = 0;
      for (int i = 0; i < nk; ++i) {
        mbar_wait(smem_u32(&full_bar[s]), phase);
        const uint32_t a_base = tiles + s * STAGE_BYTES + c * WM * 128;
        const uint32_t b_base = tiles + s * STAGE_BYTES + A_STAGE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BK / 16; ++k) {  // 16-wide k slices: +32 B inside the swizzled row
          const uint64_t db = desc_sw128(b_base + k * 32);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
            wgmma_m64k16<BN>(acc[mt], desc_sw128(a_base + mt * 64 * 128 + k * 32), db, (i | k) != 0);
        }
        wgmma_commit();
        if (i > 0) {  // keep one wgmma group in flight; the previous stage is free now
          wgmma_wait<1>();
          if (lane == 0) mbar_arrive(smem_u32(&empty_bar[prev]));
        }
        prev = s;
        if (++s == STAGES) { s = 0; phase ^= 1; }
      }
      wgmma_wait<0>();
      if (nk > 0 && lane == 0) mbar_arrive(smem_u32(&empty_bar[prev]));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) reg_fence(acc[mt][i]);

      if (SPLIT_K > 1) {
        // ---------------------------------------------------- split-K: partial tile -> workspace
        const int num_tiles = cdiv(Mk, BM) * cdiv(Nk, BN);
        int* counters = reinterpret_cast<int*>(workspace);
        float* parts = workspace + ((num_tiles * 4 + 255) / 256) * 64;
        // Layout of one partial: [consumer][mt][n8 chunk][thread][4 floats], coalesced float4s.
        const size_t tile_floats = static_cast<size_t>(BM) * BN;
        float4* mine = reinterpret_cast<float4*>(parts + (static_cast<size_t>(w.tile) * SPLIT_K + w.split) * tile_floats +
                                                 static_cast<size_t>(c) * WM * BN);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int j = 0; j < BN / 8; ++j)
            __stcg(mine + (mt * (BN / 8) + j) * 128 + tid,
                   make_float4(acc[mt][4 * j], acc[mt][4 * j + 1], acc[mt][4 * j + 2], acc[mt][4 * j + 3]));
        // Publish: CTA barrier, then one thread fences (cumulative: orders every consumer's
        // partial stores before the counter bump) and takes a ticket; the last ticket reduces.
        consumer_sync();
        if (threadIdx.x == 128) {
          __threadfence();
          const int arrived = atomicAdd(&counters[w.tile], 1);
          s_last = (arrived == SPLIT_K - 1);
          if (s_last) {
            counters[w.tile] = 0;  // every split has arrived: reset for the next launch
            __threadfence();       // acquire side: the partials are read after the ticket
          }
        }
        consumer_sync();
        if (!s_last) continue;
        // Last to arrive: sum the partials in fixed split order 0..SPLIT_K-1 (deterministic).
        const float4* base = reinterpret_cast<const float4*>(parts + static_cast<size_t>(w.tile) * SPLIT_K * tile_floats +
                                                             static_cast<size_t>(c) * WM * BN);
#pragma unroll 1
        for (int sp0 = 0; sp0 < SPLIT_K; sp0 += RU) {  // RU splits' loads in flight at once
          float4 v[RU][CHUNKS];
#pragma unroll
          for (int r = 0; r < RU; ++r)
#pragma unroll
            for (int q = 0; q < CHUNKS; ++q) v[r][q] = __ldcg(base + (sp0 + r) * (tile_floats / 4) + q * 128 + tid);
#pragma unroll
          for (int r = 0; r < RU; ++r)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
              for (int j = 0; j < BN / 8; ++j) {
                const float4 x = v[r][mt * (BN / 8) + j];
                float* a = &acc[mt][4 * j];
                if (sp0 + r == 0) {
                  a[0] = x.x; a[1] = x.y; a[2] = x.z; a[3] = x.w;
                } else {
                  a[0] += x.x; a[1] += x.y; a[2] += x.z; a[3] += x.w;
                }
              }
        }
      }

      // -------------------------------------------------------- epilogue: registers -> smem -> C
      store_tile(acc, epi_stage + c * (EPI_BYTES / 2), c, C, Mk, Nk, w.m0 + c * WM, w.n0);
    }
  }
}

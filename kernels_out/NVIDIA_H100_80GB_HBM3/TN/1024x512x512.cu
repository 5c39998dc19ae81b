/*---evo
family: cutlass_sm90
archs: [sm_90a]
launch: host
params: {CLUSTER_M: 1, CLUSTER_N: 1, DECOMP: 0, EPI: 1, RASTER: 0, SCHEDULE: 0, SCHEDULER: 0,
  SPLITS: 1, STAGES: 0, SWAP_AB: 1, SWIZZLE: 1, TILE_K: 64, TILE_M: 64, TILE_N: 64}
host_args: [RASTER, SWIZZLE, DECOMP, SPLITS]
# estimates for the prior only: evo_host_params (CUTLASS's own scheduler) decides the launch
block: ["256 if SCHEDULE == 0 else 384", 1, 1]
grid: ["cdiv(N if SWAP_AB else M, TILE_M) * cdiv(M if SWAP_AB else N, TILE_N) if SCHEDULE == 0 else min(cdiv(N if SWAP_AB else M, TILE_M) * cdiv(M if SWAP_AB else N, TILE_N) * SPLITS, NUM_SMS // (CLUSTER_M * CLUSTER_N) * CLUSTER_M * CLUSTER_N)", 1, 1]
smem: "(TILE_M + TILE_N) * TILE_K * 2 * STAGES + 16384 * EPI + 1024 if STAGES else 221184"   # auto stages fill it
requires: "K % 8 == 0 and N % 8 == 0"   # 16-byte TMA strides of A, B (K) and C (N)
cooperative: "SCHEDULER == 1"   # stream-K's fix-up waits on the partials of peer CTAs: the whole grid resident at once
---*/
// CUTLASS 3.x SM90 GEMM (nvidia-cutlass headers): C[M,N] = A[M,K] * B[N,K]^T, fp16 in/out, fp32 accumulation,
// built from the CollectiveBuilders: TMA + wgmma mainloop with a (TILE_M x TILE_N x TILE_K) tile, a thread-block
// cluster (CLUSTER_M x CLUSTER_N, TMA multicast across it), kernel schedule (SCHEDULE: 0 TMA warp-specialized,
// 1 cooperative, 2 ping-pong), epilogue (EPI: 1 TMA store through shared memory, 0 direct stores), STAGES
// (0 = as many as fit), tile scheduler (SCHEDULER: 0 persistent, 1 stream-K), SWAP_AB (computes C^T = B A^T so
// that a small M lands in the tile's N). Runtime choices come in through host_args (no recompile): RASTER
// (0 heuristic, 1 along M, 2 along N), SWIZZLE (max swizzle size), and for the stream-K scheduler DECOMP
// (0 heuristic, 1 data-parallel, 2 stream-K) and SPLITS (> 1: split-K into SPLITS slices).
//
// Launch ABI "launch: host" (README): evo_host_query / evo_host_params build GemmKernel::Params with
// to_underlying_arguments (TMA descriptors, scheduler state) and report grid, block, cluster, shared memory,
// workspace and the workspace ranges to zero before each call; evo_gemm takes Params by value.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda.h>

#define CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL 1   // cuTensorMapEncodeTiled: our forwarder below, no cudart
#define CUTLASS_ENABLE_CUDA_HOST_ADAPTER 1         // workspace fills go to our recorder, not to the runtime
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1   // wgmma N of every multiple of 8 (80, 112, 144, 160, 176, ...): without it
                                                   // CuTe's op selector falls back to the largest of 256/192/128/96/64/32/16
                                                   // that divides TILE_N (144 -> m64n16: 2x slower, docs/perf-cutlass.md)

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

using namespace cute;

namespace evo_cutlass {

constexpr int TILE_M = 64;
constexpr int TILE_N = 64;
constexpr int TILE_K = 64;
constexpr int CLUSTER_M = 1;
constexpr int CLUSTER_N = 1;
constexpr int SCHEDULE = 0;     // 0 TMA warp-specialized, 1 cooperative, 2 ping-pong
constexpr int EPI = 1;               // 1 TMA store epilogue, 0 no shared memory
constexpr int STAGES = 0;         // 0: auto (fill shared memory)
constexpr int SCHEDULER = 0;   // 0 persistent, 1 stream-K
constexpr int SWAP_AB = 1;

using ElementA = cutlass::half_t;
using ElementB = cutlass::half_t;
using ElementD = cutlass::half_t;
using ElementC = std::conditional_t<EPI == 1, void, cutlass::half_t>;   // no source: beta = 0
using ElementAccumulator = float;
using LayoutA = cutlass::layout::RowMajor;      // kernel-view A: m x K, K contiguous
using LayoutB = cutlass::layout::ColumnMajor;   // kernel-view B: K x n, K contiguous
// kernel-view D is m x n; with SWAP_AB it is C^T (N x M), which is C's row-major memory read column-major
using LayoutD = std::conditional_t<SWAP_AB == 1, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
constexpr int Align = 8;  // 16 bytes of fp16

using TileShape = Shape<Int<TILE_M>, Int<TILE_N>, Int<TILE_K>>;
using ClusterShape = Shape<Int<CLUSTER_M>, Int<CLUSTER_N>, _1>;

using KernelSchedule = std::conditional_t<SCHEDULE == 1, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                       std::conditional_t<SCHEDULE == 2, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                          cutlass::gemm::KernelTmaWarpSpecialized>>;
using EpilogueSchedule = std::conditional_t<EPI == 0, cutlass::epilogue::NoSmemWarpSpecialized,
                         std::conditional_t<SCHEDULE == 1, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                            cutlass::epilogue::TmaWarpSpecialized>>;
using TileScheduler = std::conditional_t<SCHEDULER == 1, cutlass::gemm::StreamKScheduler,
                                         cutlass::gemm::PersistentScheduler>;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementAccumulator,
    ElementC, LayoutD, Align, ElementD, LayoutD, Align, EpilogueSchedule>::CollectiveOp;

using StageCount = std::conditional_t<STAGES == 0,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    cutlass::gemm::collective::StageCount<(STAGES > 0 ? STAGES : 2)>>;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, Align, ElementB, LayoutB, Align,
    ElementAccumulator, TileShape, ClusterShape, StageCount, KernelSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                        CollectiveEpilogue, TileScheduler>;
using Params = GemmKernel::Params;
using Arguments = GemmKernel::Arguments;

}  // namespace evo_cutlass

extern "C" __global__ void __launch_bounds__(evo_cutlass::GemmKernel::MaxThreadsPerBlock,
                                             evo_cutlass::GemmKernel::MinBlocksPerMultiprocessor)
evo_gemm(CUTLASS_GRID_CONSTANT evo_cutlass::Params const params) {
    extern __shared__ char smem[];
    evo_cutlass::GemmKernel op;
    op(params, smem);
}

// ---------------------------------------------------------------- host side -----------------------------------
// cuTensorMapEncodeTiled, forwarded to the driver the process has loaded (CUTLASS calls it by this name). The
// geometry query encodes nothing (its descriptors are never used; it runs without a GPU); a failed encode is
// remembered so that evo_host_params reports it instead of returning a block with a broken descriptor.
static thread_local bool evo_query_only = false;
static thread_local CUresult evo_tma_error = CUDA_SUCCESS;

extern "C" CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* addr,
                                           const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                           const cuuint32_t* estrides, CUtensorMapInterleave il,
                                           CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                                           CUtensorMapFloatOOBfill oob) {
    using Fn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                            const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                            CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    static Fn fn = [] {
        void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
        return lib ? reinterpret_cast<Fn>(dlsym(lib, "cuTensorMapEncodeTiled")) : nullptr;
    }();
    if (evo_query_only) return CUDA_SUCCESS;
    CUresult rc = fn ? fn(map, type, rank, addr, dims, strides, box, estrides, il, sw, l2, oob) : CUDA_ERROR_NOT_INITIALIZED;
    if (rc != CUDA_SUCCESS && evo_tma_error == CUDA_SUCCESS) evo_tma_error = rc;
    return rc;
}

struct EvoHostLaunch {  // the host-launch ABI, mirrored by evo/gpu/host_launch.py
    int abi;
    int params_bytes;
    unsigned grid[3];
    unsigned block[3];
    unsigned cluster[3];
    int smem;
    int pdl;
    long long workspace;
    int n_fills;
    int fill_elem[4];
    long long fill_offset[4];
    long long fill_count[4];
    unsigned fill_value[4];
    char message[160];
};

namespace evo_cutlass {

// records the workspace fills CUTLASS asks for (stream-K locks) instead of running them: the launcher replays
// them on its stream before every call
struct FillRecorder : cutlass::CudaHostAdapter {
    EvoHostLaunch* out;
    char* base;
    bool overflow = false;
    FillRecorder(EvoHostLaunch* o, void* b) : out(o), base(static_cast<char*>(b)) {}
    cutlass::Status query_occupancy(int32_t*, int32_t*, int32_t, int32_t, int32_t) const override {
        return cutlass::Status::kErrorNotSupported;
    }
    cutlass::Status launch(dim3, dim3, size_t, cudaStream_t, void**, int32_t) const override {
        return cutlass::Status::kErrorNotSupported;
    }
    cutlass::Status launch(dim3, dim3, dim3, size_t, cudaStream_t, void**, int32_t) const override {
        return cutlass::Status::kErrorNotSupported;
    }
    cutlass::Status launch(dim3, dim3, dim3, dim3, size_t, cudaStream_t, void**, int32_t) const override {
        return cutlass::Status::kErrorNotSupported;
    }
#if defined(CUDA_HOST_ADAPTER_TENSORMAP_ENABLED)  // declared by the adapter; CUTLASS's TMA path does not use them
    CUresult tensorMapEncodeIm2col(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const int*, const int*, cuuint32_t, cuuint32_t,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill) const override {
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    CUresult tensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* addr,
                                  const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                  const cuuint32_t* estrides, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                  CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) const override {
        return ::cuTensorMapEncodeTiled(map, type, rank, addr, dims, strides, box, estrides, il, sw, l2, oob);
    }
    CUresult tensorMapReplaceAddress(CUtensorMap*, void*) const override { return CUDA_ERROR_NOT_SUPPORTED; }
#endif
  protected:
    cutlass::Status memsetDeviceImpl(void* dst, void const* value, size_t elem, size_t count, cudaStream_t) const override {
        auto* self = const_cast<FillRecorder*>(this);
        if (out->n_fills >= 4 || (elem != 1 && elem != 2 && elem != 4)) {
            self->overflow = true;
            return cutlass::Status::kErrorNotSupported;
        }
        int i = out->n_fills++;
        unsigned v = 0;
        memcpy(&v, value, elem);
        out->fill_elem[i] = (int)elem;
        out->fill_offset[i] = static_cast<char*>(dst) - base;
        out->fill_count[i] = (long long)count;
        out->fill_value[i] = v;
        return cutlass::Status::kSuccess;
    }
};

// templates, so that the branch not taken is never instantiated
template <class S>
static S output_stride(int m, int n) {
    if constexpr (SWAP_AB == 1) return make_stride(Int<1>{}, int64_t(m), int64_t(m) * n);  // column-major m x n
    else return make_stride(int64_t(n), Int<1>{}, int64_t(m) * n);                         // row-major m x n
}

template <class SchedulerArgs>
static void set_decomposition(SchedulerArgs& s, int splits, int decomp) {
    if constexpr (SCHEDULER == 1) {
        using Decomp = cutlass::gemm::kernel::detail::DecompositionMode;
        s.splits = splits < 1 ? 1 : splits;
        s.decomposition_mode = splits > 1 ? Decomp::SplitK : decomp == 1 ? Decomp::DataParallel
                             : decomp == 2 ? Decomp::StreamK : Decomp::Heuristic;
    }
}

static int fail(EvoHostLaunch* out, const char* why) {
    strncpy(out->message, why, sizeof(out->message) - 1);
    return 1;
}

static int build(int M, int N, int K, int num_sms, const long long* args, int nargs, const void* A, const void* B,
                 void* C, void* workspace, EvoHostLaunch* out, void* params, int params_cap) {
    memset(out, 0, sizeof(*out));
    out->abi = 1;
    out->params_bytes = (int)sizeof(Params);
    auto arg = [&](int i, long long dflt) { return i < nargs ? args[i] : dflt; };
    int raster = (int)arg(0, 0), swizzle = (int)arg(1, 1), decomp = (int)arg(2, 0), splits = (int)arg(3, 1);
    // kernel view: with SWAP_AB the kernel computes C^T (N x M) = B (N x K) * A^T
    int m = SWAP_AB ? N : M, n = SWAP_AB ? M : N;
    auto* pa = static_cast<ElementA const*>(SWAP_AB ? B : A);
    auto* pb = static_cast<ElementB const*>(SWAP_AB ? A : B);
    auto* pd = static_cast<ElementD*>(C);
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    using StrideD = typename GemmKernel::StrideD;
    using StrideC = typename GemmKernel::StrideC;
    StrideA sa = make_stride(int64_t(K), Int<1>{}, int64_t(m) * K);
    StrideB sb = make_stride(int64_t(K), Int<1>{}, int64_t(n) * K);
    StrideD sd = output_stride<StrideD>(m, n);
    StrideC sc = output_stride<StrideC>(m, n);
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;
    hw.sm_count = num_sms;
    Arguments a{};
    a.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    a.problem_shape = make_shape(m, n, K, 1);
    a.mainloop.ptr_A = pa;
    a.mainloop.dA = sa;
    a.mainloop.ptr_B = pb;
    a.mainloop.dB = sb;
    a.epilogue.ptr_C = nullptr;  // beta = 0: no source
    a.epilogue.dC = sc;
    a.epilogue.ptr_D = pd;
    a.epilogue.dD = sd;
    a.hw_info = hw;
    a.epilogue.thread.alpha = 1.0f;
    a.epilogue.thread.beta = 0.0f;
    using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
    a.scheduler.raster_order = raster == 1 ? Raster::AlongM : raster == 2 ? Raster::AlongN : Raster::Heuristic;
    a.scheduler.max_swizzle_size = swizzle < 1 ? 1 : swizzle;
    set_decomposition(a.scheduler, splits, decomp);
    if (!GemmKernel::can_implement(a)) return fail(out, "CUTLASS can_implement: this shape is not supported");
    size_t ws_bytes = GemmKernel::get_workspace_size(a);
    out->workspace = (long long)ws_bytes;
    // the geometry query builds Params at a fake, never dereferenced address
    void* ws = workspace ? workspace : reinterpret_cast<void*>(uintptr_t(1) << 20);
    FillRecorder rec(out, ws);
    if (GemmKernel::initialize_workspace(a, ws, nullptr, &rec) != cutlass::Status::kSuccess || rec.overflow)
        return fail(out, "CUTLASS initialize_workspace asked for more than 4 fills");
    if (!A) {  // the query: fake operand addresses (TMA descriptors are encoded, never used)
        a.mainloop.ptr_A = reinterpret_cast<ElementA const*>(uintptr_t(1) << 20);
        a.mainloop.ptr_B = reinterpret_cast<ElementB const*>(uintptr_t(1) << 20);
        a.epilogue.ptr_D = reinterpret_cast<ElementD*>(uintptr_t(1) << 20);
    }
    evo_query_only = params == nullptr;
    evo_tma_error = CUDA_SUCCESS;
    Params p = GemmKernel::to_underlying_arguments(a, ws);
    evo_query_only = false;
    if (evo_tma_error != CUDA_SUCCESS) {
        snprintf(out->message, sizeof(out->message), "cuTensorMapEncodeTiled failed (CUresult %d)", (int)evo_tma_error);
        return 1;
    }
    dim3 grid = GemmKernel::get_grid_shape(p), block = GemmKernel::get_block_shape();
    out->grid[0] = grid.x; out->grid[1] = grid.y; out->grid[2] = grid.z;
    out->block[0] = block.x; out->block[1] = block.y; out->block[2] = block.z;
    out->cluster[0] = CLUSTER_M; out->cluster[1] = CLUSTER_N; out->cluster[2] = 1;
    out->smem = GemmKernel::SharedStorageSize;
    out->pdl = 0;
    if (params) {
        if (params_cap < (int)sizeof(Params)) return fail(out, "parameter buffer too small");
        memcpy(params, &p, sizeof(Params));
    }
    return 0;
}

}  // namespace evo_cutlass

extern "C" int evo_host_query(int M, int N, int K, int num_sms, const long long* args, int nargs, EvoHostLaunch* out) {
    return evo_cutlass::build(M, N, K, num_sms, args, nargs, nullptr, nullptr, nullptr, nullptr, out, nullptr, 0);
}

extern "C" int evo_host_params(int M, int N, int K, int num_sms, const long long* args, int nargs, const void* A,
                               const void* B, void* C, void* workspace, EvoHostLaunch* out, void* params,
                               int params_cap) {
    return evo_cutlass::build(M, N, K, num_sms, args, nargs, A, B, C, workspace, out, params, params_cap);
}

#pragma once
#include <cuda_bf16.h>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "probe.cuh"

// The decoding layer's MLP entry with the post-attention norm folded into the gate/up weight (the rollout's form:
// decoder_model.cc's gate_up_folded), as two GEMMs whose epilogues carry the norm instead of a kernel between them:
//   ResidualSsqEpilogue, on the attention output projection: h = to_bf16(acc + h) in place (the residual add that
//   cuBLAS does with beta 1), and each row's sum of squares of its new bf16 values over the tile's columns, into
//   ssq [M, N / BN] (one float per row and column tile; no atomics, so the sums are deterministic);
//   SwigluRowScaleEpilogue, on the interleaved gate/up projection of h: per row r = rsqrt(sum(ssq) / hidden + eps),
//   then as fused_ops.cu's SwiGluNormKernel: g = to_bf16(r gate), u = to_bf16(r up), y = to_bf16(to_bf16(silu(g)) u)
//   with the fast silu (SiluFast). Only the row sums' order differs from the kernel's.
// Both are CUTLASS's DefaultEpilogue interface (wrapped by Sm90TmaWarpSpecializedAdapter), as epilogue.cuh's.

// Members every such epilogue declares (CUTLASS's DefaultEpilogue interface).
#define PROBE_EPILOGUE_TYPES(StrideD_)                                                                         \
  using EpilogueSchedule = cutlass::gemm::EpilogueDefault;                                                     \
  using DispatchPolicy = EpilogueSchedule;                                                                     \
  using ThreadEpilogueOp = cutlass::epilogue::thread::LinearCombination<cutlass::bfloat16_t, 1, float, float>; \
  using ElementOutput = cutlass::bfloat16_t;                                                                   \
  using ElementAccumulator = float;                                                                            \
  using ElementCompute = float;                                                                                \
  using ElementScalar = float;                                                                                 \
  using ElementC = void;                                                                                       \
  using StrideC = StrideD_;                                                                                    \
  using ElementD = cutlass::bfloat16_t;                                                                        \
  using StrideD = StrideD_;                                                                                    \
  using GmemElementC = ElementD;                                                                               \
  using GmemTiledCopyC = void;                                                                                 \
  using GmemTiledCopyD = void;                                                                                 \
  static const int kOutputAlignment = 8;                                                                       \
  using AlignmentType = uint4;                                                                                 \
  template <class ProblemShape>                                                                                \
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {                                    \
    return 0;                                                                                                  \
  }                                                                                                            \
  template <class ProblemShape>                                                                                \
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,      \
                                              cutlass::CudaHostAdapter* = nullptr) {                           \
    return cutlass::Status::kSuccess;                                                                          \
  }                                                                                                            \
  CUTLASS_DEVICE bool is_source_needed() { return false; }

template <class StrideD_, int BM, int BN, int kBuffers>
class ResidualSsqEpilogue {
 public:
  struct Arguments {
    cutlass::epilogue::thread::LinearCombination<cutlass::bfloat16_t, 1, float, float>::Params thread{};
    cutlass::bfloat16_t const* ptr_C = nullptr;
    StrideD_ dC{};
    cutlass::bfloat16_t* ptr_D = nullptr;  // h [M, N], read and written
    StrideD_ dD{};
    float* ssq = nullptr;  // [M, ceil(N / BN)]
  };
  PROBE_EPILOGUE_TYPES(StrideD_)
  using Params = Arguments;
  static constexpr int kLd = BN + 8;
  struct SharedStorage {
    alignas(16) __nv_bfloat16 tile[kBuffers][BM * kLd];
  };
  using TensorStorage = SharedStorage;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const&) {
    return cute::get<1>(problem_shape) % 8 == 0;
  }
  CUTLASS_HOST_DEVICE ResidualSsqEpilogue(Params const& p, SharedStorage const& = SharedStorage()) : params(p) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char* smem) {
    using namespace cute;
    static_assert(size<0, 0>(FrgLayout{}) == 2, "GMMA accumulator layout: pairs of adjacent columns");
    constexpr int kThreads = size(TiledMma{});
    static_assert(kThreads == 2 * BM, "two threads a row sum its squares");
    const int M = get<0>(problem_shape_mnkl);
    const int N = get<1>(problem_shape_mnkl);
    const int m0 = get<0>(blk_coord_mnkl) * BM;
    const int tile_n = get<1>(blk_coord_mnkl);
    const int n0 = tile_n * BN;
    Tensor tc =
        tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{})));
    const int buffer = kBuffers == 1 ? 0 : (threadIdx.x / 128 - 1) % kBuffers;
    __nv_bfloat16* tile = reinterpret_cast<SharedStorage*>(smem)->tile[buffer];
    const uint32_t barrier = static_cast<uint32_t>(cutlass::arch::ReservedNamedBarriers::FirstUserBarrier) + buffer;
    __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(params.ptr_D);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      const auto c = tc(i);
      const int m = m0 + get<0>(c);
      const int n = n0 + get<1>(c);
      float2 old = make_float2(0.f, 0.f);
      if (m < M && n < N) old = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(h + int64_t{m} * N + n));
      *reinterpret_cast<__nv_bfloat162*>(tile + get<0>(c) * kLd + get<1>(c)) =
          __floats2bfloat162_rn(acc(i) + old.x, acc(i + 1) + old.y);
    }
    cutlass::arch::NamedBarrier::sync(kThreads, barrier);
    // Row sums of squares: threads 2 r and 2 r + 1 take the two halves of row r, then add (one shuffle).
    {
      const int r = thread_idx / 2;
      const int half = thread_idx % 2;
      float s = 0.f;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < BN / 2; ++j) {
        const int col = half * (BN / 2) + j;
        const float v = n0 + col < N ? __bfloat162float(tile[r * kLd + col]) : 0.f;
        s = fmaf(v, v, s);
      }
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      const int tiles_n = (N + BN - 1) / BN;
      if (half == 0 && m0 + r < M) params.ssq[int64_t{m0 + r} * tiles_n + tile_n] = s;
    }
    constexpr int kChunks = BN / 8;
    CUTLASS_PRAGMA_UNROLL
    for (int j = thread_idx; j < BM * kChunks; j += kThreads) {
      const int r = j / kChunks;
      const int c8 = (j % kChunks) * 8;
      if (m0 + r < M && n0 + c8 < N) {
        *reinterpret_cast<uint4*>(h + int64_t{m0 + r} * N + n0 + c8) =
            *reinterpret_cast<const uint4*>(tile + r * kLd + c8);
      }
    }
    cutlass::arch::NamedBarrier::sync(kThreads, barrier);
  }

 private:
  Params params;
};

template <class StrideD_, int BM, int BN, int kBuffers>
class SwigluRowScaleEpilogue {
 public:
  struct Arguments {
    cutlass::epilogue::thread::LinearCombination<cutlass::bfloat16_t, 1, float, float>::Params thread{};
    cutlass::bfloat16_t const* ptr_C = nullptr;
    StrideD_ dC{};
    cutlass::bfloat16_t* ptr_D = nullptr;  // y [M, N / 2]
    StrideD_ dD{};
    const float* ssq = nullptr;  // [M, ssq_tiles]: the rows' sums of squares by column tile (ResidualSsqEpilogue)
    int ssq_tiles = 0;
    int hidden = 0;
    float eps = 0.f;
  };
  PROBE_EPILOGUE_TYPES(StrideD_)
  using Params = Arguments;
  static constexpr int kOutCols = BN / 2;
  static constexpr int kLd = kOutCols + 8;
  struct SharedStorage {
    alignas(16) __nv_bfloat16 tile[kBuffers][BM * kLd];
  };
  using TensorStorage = SharedStorage;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const&) {
    return cute::get<1>(problem_shape) % 16 == 0;
  }
  CUTLASS_HOST_DEVICE SwigluRowScaleEpilogue(Params const& p, SharedStorage const& = SharedStorage()) : params(p) {}

  // rsqrt(mean of squares + eps) of row m, from its column tiles' sums in order.
  CUTLASS_DEVICE float RowScale(int m) const {
    float s = 0.f;
    for (int t = 0; t < params.ssq_tiles; ++t) s += params.ssq[int64_t{m} * params.ssq_tiles + t];
    return rsqrtf(s / static_cast<float>(params.hidden) + params.eps);
  }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char* smem) {
    using namespace cute;
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2, "GMMA accumulator layout");
    constexpr int kThreads = size(TiledMma{});
    const int M = get<0>(problem_shape_mnkl);
    const int N = get<1>(problem_shape_mnkl);
    const int m0 = get<0>(blk_coord_mnkl) * BM;
    const int n0 = get<1>(blk_coord_mnkl) * BN;
    Tensor tc =
        tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{})));
    const int buffer = kBuffers == 1 ? 0 : (threadIdx.x / 128 - 1) % kBuffers;
    __nv_bfloat16* tile = reinterpret_cast<SharedStorage*>(smem)->tile[buffer];
    const uint32_t barrier = static_cast<uint32_t>(cutlass::arch::ReservedNamedBarriers::FirstUserBarrier) + buffer;
    // A thread's accumulators lie in two rows per 64 (the fragment's row halves): their scales, computed once.
    const int row_a = get<0>(tc(0)), row_b = get<0>(tc(2));
    const float r_a = m0 + row_a < M ? RowScale(m0 + row_a) : 0.f;
    const float r_b = m0 + row_b < M ? RowScale(m0 + row_b) : 0.f;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      if ((i / 4) % 2 != 0) continue;  // an up block: read with its gate block
      const auto c = tc(i);
      const int m = get<0>(c);
      const int n = get<1>(c);
      const float r = m == row_a ? r_a : r_b;
      float y[2];
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < 2; ++j) {
        const float g = RoundBf16(__fmul_rn(r, RoundBf16(acc(i + j))));
        const float u = RoundBf16(__fmul_rn(r, RoundBf16(acc(i + 4 + j))));
        y[j] = SwiGluFast(g, u);
      }
      *reinterpret_cast<__nv_bfloat162*>(tile + m * kLd + 8 * (n / 16) + n % 16) = __floats2bfloat162_rn(y[0], y[1]);
    }
    cutlass::arch::NamedBarrier::sync(kThreads, barrier);
    const int64_t ldy = N / 2;
    __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(params.ptr_D);
    constexpr int kChunks = kOutCols / 8;
    const int cols_left = (N - n0) / 2;
    CUTLASS_PRAGMA_UNROLL
    for (int j = thread_idx; j < BM * kChunks; j += kThreads) {
      const int r = j / kChunks;
      const int c8 = (j % kChunks) * 8;
      if (m0 + r < M && c8 < cols_left) {
        *reinterpret_cast<uint4*>(out + (m0 + r) * ldy + n0 / 2 + c8) =
            *reinterpret_cast<const uint4*>(tile + r * kLd + c8);
      }
    }
    cutlass::arch::NamedBarrier::sync(kThreads, barrier);
  }

 private:
  Params params;
};

#undef PROBE_EPILOGUE_TYPES

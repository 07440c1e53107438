#pragma once
#include "epilogue_common.cuh"

// SwiGLU's backward in the epilogue of the down projection's input-gradient GEMM (d = dy W_down, [M, C]): for each
// output d (rounded to bf16, as the unfused GEMM stores it) and the forward's stacked gate/up values g, u at the same
// row and column (gate_up [M, 2C]: gate in columns [0, C), up in [C, 2C)), what fused_ops.cu's SwiGluBackwardKernel
// computes (SwiGluBwdValues): the gate and up gradients into d_gate_up [M, 2C] and SwiGLU's value y = s u into act
// [M, C] (the down projection's weight gradient reads it). g and u are read straight from global memory in pairs (a
// thread's accumulators hold two adjacent columns); the three outputs go out through a padded shared-memory tile of
// [BM, BN] in 16-byte stores, one output at a time (one tile per consumer warpgroup in ping-pong kernels).
template <class StrideD_, int BM, int BN, int kBuffers, int kSilu>
class SwigluBwdEpilogue : public ProbeEpilogueBase<StrideD_> {
 public:
  using Base = ProbeEpilogueBase<StrideD_>;
  static constexpr int kLd = BN + 8;  // 16 bytes of padding a row: the 8 rows a warp writes hit distinct banks
  using SharedStorage = StagingStorage<kBuffers, BM * kLd>;
  using TensorStorage = SharedStorage;
  struct Arguments : Base::BaseArguments {   // ptr_D: d_gate_up [M, 2C]
    const __nv_bfloat16* gate_up = nullptr;  // [M, 2C]
    __nv_bfloat16* act = nullptr;            // [M, C]
  };
  using Params = Arguments;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const&) {
    return cute::get<1>(problem_shape) % 8 == 0;
  }

  CUTLASS_HOST_DEVICE SwigluBwdEpilogue(Params const& p, SharedStorage const& = SharedStorage()) : params(p) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK, BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char* smem) {
    using namespace cute;
    static_assert(size<0>(BlockShapeMNK{}) == BM && size<1>(BlockShapeMNK{}) == BN, "tile shape");
    static_assert(size<0, 0>(FrgLayout{}) == 2, "GMMA accumulator layout: pairs of adjacent columns");
    constexpr int kThreads = size(TiledMma{});
    constexpr int kPairs = decltype(size(acc))::value / 2;
    const int M = get<0>(problem_shape_mnkl);
    const int C = get<1>(problem_shape_mnkl);
    const int m0 = get<0>(blk_coord_mnkl) * BM;
    const int n0 = get<1>(blk_coord_mnkl) * BN;
    Tensor tc =
        tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{})));
    const int buffer = StagingBuffer<kBuffers>();
    __nv_bfloat16* tile = reinterpret_cast<SharedStorage*>(smem)->tile[buffer];
    const uint32_t barrier = StagingBarrier(buffer);
    // The three outputs of each pair of columns, packed: dg, du, y.
    __nv_bfloat162 out[3][kPairs];
    CUTLASS_PRAGMA_UNROLL
    for (int p = 0; p < kPairs; ++p) {
      const auto c = tc(2 * p);
      const int m = m0 + get<0>(c);
      const int n = n0 + get<1>(c);
      float2 g = make_float2(0.f, 0.f), u = g;
      if (m < M && n < C) {
        const __nv_bfloat16* row = params.gate_up + static_cast<int64_t>(m) * 2 * C;
        g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + n));
        u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + C + n));
      }
      const SwigluBwd a = SwigluBwdValues<kSilu>(RoundBf16(acc(2 * p)), g.x, u.x);
      const SwigluBwd b = SwigluBwdValues<kSilu>(RoundBf16(acc(2 * p + 1)), g.y, u.y);
      out[0][p] = __floats2bfloat162_rn(a.dg, b.dg);
      out[1][p] = __floats2bfloat162_rn(a.du, b.du);
      out[2][p] = __floats2bfloat162_rn(a.y, b.y);
    }
    CUTLASS_PRAGMA_UNROLL
    for (int o = 0; o < 3; ++o) {
      CUTLASS_PRAGMA_UNROLL
      for (int p = 0; p < kPairs; ++p) {
        const auto c = tc(2 * p);
        *reinterpret_cast<__nv_bfloat162*>(tile + get<0>(c) * kLd + get<1>(c)) = out[o][p];
      }
      cutlass::arch::NamedBarrier::sync(kThreads, barrier);
      // dg into d_gate_up's gate half, du into its up half, y into act.
      __nv_bfloat16* dst = o == 2 ? params.act : reinterpret_cast<__nv_bfloat16*>(params.ptr_D) + (o == 1 ? C : 0);
      const int64_t ld = o == 2 ? C : 2 * static_cast<int64_t>(C);
      StoreStagedTile<BM, BN, kLd, kThreads>(tile, dst + n0, ld, m0, M, C - n0, thread_idx);
      cutlass::arch::NamedBarrier::sync(kThreads, barrier);  // the tile is free again
    }
  }

 private:
  Params params;
};

#pragma once
#include "epilogue_common.cuh"

// An epilogue (the interface of CUTLASS's DefaultEpilogue, wrapped by Sm90TmaWarpSpecializedAdapter) that applies
// SwiGLU to the stacked gate/up accumulators: within each 16 columns of the GEMM, 8 gates then their 8 ups, so a thread
// holding columns (c, c + 1) of a gate block holds the matching ups 4 fragment elements later. Each output
// silu(g) * u, of g and u rounded to bf16 as the unfused path has them, goes to a padded shared-memory tile of the
// block's [BM, BN / 2] outputs (one per consumer warpgroup in ping-pong kernels), then out in coalesced 16-byte stores.
// kSilu: 0, __expf and __fdividef, the product rounded once (the first probe's form); 1 (kSiluExact), silu as
// SwiGluStacked computes it (SwiGluExact; the model's kernel on branch exp/cutlass-gate-up-swiglu does the same);
// 2 (kSiluFast), SwiGluFast (silu as the rollout's SiluFast, rounded to bf16, then the product).
// kRowScale (decode_mlp, epilogue_decode.cuh): each row's gate and up values are first scaled by its norm
// r = rsqrt(sum of the row's ssq / hidden + eps) and rounded, as SwiGluNormKernel does with the folded norm.
template <class StrideD_, int BM, int BN, int kBuffers, int kSilu = 0, bool kRowScale = false>
class SwigluEpilogue : public ProbeEpilogueBase<StrideD_> {
 public:
  using Base = ProbeEpilogueBase<StrideD_>;
  static constexpr int kOutCols = BN / 2;
  static constexpr int kLd = kOutCols + 8;  // 16 bytes of padding a row: the 8 rows a warp writes hit distinct banks
  using SharedStorage = StagingStorage<kBuffers, BM * kLd>;
  using TensorStorage = SharedStorage;
  struct Arguments : Base::BaseArguments {  // ptr_D: y [M, N / 2], dense
    const float* ssq = nullptr;             // kRowScale: [M, ssq_tiles], the rows' sums of squares by column tile
    int ssq_tiles = 0;
    int hidden = 0;
    float eps = 0.f;
  };
  using Params = Arguments;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const&) {
    return cute::get<1>(problem_shape) % 16 == 0;
  }

  CUTLASS_HOST_DEVICE SwigluEpilogue(Params const& p, SharedStorage const& = SharedStorage()) : params(p) {}

  // rsqrt(mean of squares + eps) of row m, from its column tiles' sums in order.
  CUTLASS_DEVICE float RowScale(int m) const {
    float s = 0.f;
    for (int t = 0; t < params.ssq_tiles; ++t) s += params.ssq[int64_t{m} * params.ssq_tiles + t];
    return rsqrtf(s / static_cast<float>(params.hidden) + params.eps);
  }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_MNK,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& acc,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char* smem) {
    using namespace cute;
    static_assert(size<0>(BlockShapeMNK{}) == BM && size<1>(BlockShapeMNK{}) == BN, "tile shape");
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2, "GMMA accumulator layout");
    constexpr int kThreads = size(TiledMma{});
    const int M = get<0>(problem_shape_mnkl);
    const int N = get<1>(problem_shape_mnkl);
    const int m0 = get<0>(blk_coord_mnkl) * BM;
    const int n0 = get<1>(blk_coord_mnkl) * BN;
    // Block-relative coordinates of the thread's accumulators.
    Tensor tc =
        tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(make_shape(Int<BM>{}, Int<BN>{})));
    const int buffer = StagingBuffer<kBuffers>();
    __nv_bfloat16* tile = reinterpret_cast<SharedStorage*>(smem)->tile[buffer];
    const uint32_t barrier = StagingBarrier(buffer);
    // kRowScale: a thread's accumulators lie in two rows (the fragment's row halves); their scales, once.
    const int row_a = get<0>(tc(0)), row_b = get<0>(tc(2));
    float r_a = 1.f, r_b = 1.f;
    if constexpr (kRowScale) {
      r_a = m0 + row_a < M ? RowScale(m0 + row_a) : 0.f;
      r_b = m0 + row_b < M ? RowScale(m0 + row_b) : 0.f;
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      if ((i / 4) % 2 != 0) continue;  // an up block: read with its gate block
      const auto c = tc(i);
      const int m = get<0>(c);
      const int n = get<1>(c);
      float g0 = RoundBf16(acc(i));
      float g1 = RoundBf16(acc(i + 1));
      float u0 = RoundBf16(acc(i + 4));
      float u1 = RoundBf16(acc(i + 5));
      if constexpr (kRowScale) {
        const float r = m == row_a ? r_a : r_b;
        g0 = RoundBf16(__fmul_rn(r, g0));
        g1 = RoundBf16(__fmul_rn(r, g1));
        u0 = RoundBf16(__fmul_rn(r, u0));
        u1 = RoundBf16(__fmul_rn(r, u1));
      }
      float y0, y1;
      if constexpr (kSilu == kSiluExact) {
        y0 = SwiGluExact(g0, u0);
        y1 = SwiGluExact(g1, u1);
      } else if constexpr (kSilu == kSiluFast) {
        y0 = SwiGluFast(g0, u0);
        y1 = SwiGluFast(g1, u1);
      } else {
        y0 = __fdividef(g0, 1.f + __expf(-g0)) * u0;
        y1 = __fdividef(g1, 1.f + __expf(-g1)) * u1;
      }
      const int o = 8 * (n / 16) + (n % 16);
      *reinterpret_cast<__nv_bfloat162*>(tile + m * kLd + o) = __floats2bfloat162_rn(y0, y1);
    }
    cutlass::arch::NamedBarrier::sync(kThreads, barrier);
    StoreStagedTile<BM, kOutCols, kLd, kThreads>(tile, reinterpret_cast<__nv_bfloat16*>(params.ptr_D) + n0 / 2, N / 2,
                                                 m0, M, (N - n0) / 2, thread_idx);
    cutlass::arch::NamedBarrier::sync(kThreads, barrier);  // the tile is free for the next one
  }

 private:
  Params params;
};

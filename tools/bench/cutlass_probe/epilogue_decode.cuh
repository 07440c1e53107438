#pragma once
#include "epilogue.cuh"

// The decoding layer's MLP entry with the post-attention norm folded into the gate/up weight (the rollout's form:
// decoder_model.cc's gate_up_folded), as two GEMMs whose epilogues carry the norm instead of a kernel between them:
//   ResidualSsqEpilogue, on the attention output projection: h = to_bf16(acc + h) in place (the residual add that
//   cuBLAS does with beta 1), and each row's sum of squares of its new bf16 values over the tile's columns, into
//   ssq [M, N / BN] (one float per row and column tile; no atomics, so the sums are deterministic);
//   SwigluEpilogue with kRowScale (epilogue.cuh), on the interleaved gate/up projection of h: per row r =
//   rsqrt(sum(ssq) / hidden + eps), then as fused_ops.cu's SwiGluNormKernel: g = to_bf16(r gate), u = to_bf16(r up), y
//   = to_bf16(to_bf16(silu(g)) u) with the fast silu (SiluFast). Only the row sums' order differs from the kernel's.
// Both are CUTLASS's DefaultEpilogue interface (wrapped by Sm90TmaWarpSpecializedAdapter), as epilogue.cuh's
// (epilogue_common.cuh).

template <class StrideD_, int BM, int BN, int kBuffers>
class ResidualSsqEpilogue : public ProbeEpilogueBase<StrideD_> {
 public:
  using Base = ProbeEpilogueBase<StrideD_>;
  struct Arguments : Base::BaseArguments {  // ptr_D: h [M, N], read and written
    float* ssq = nullptr;                   // [M, ceil(N / BN)]
  };
  using Params = Arguments;
  static constexpr int kLd = BN + 8;
  using SharedStorage = StagingStorage<kBuffers, BM * kLd>;
  using TensorStorage = SharedStorage;

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
    const int buffer = StagingBuffer<kBuffers>();
    __nv_bfloat16* tile = reinterpret_cast<SharedStorage*>(smem)->tile[buffer];
    const uint32_t barrier = StagingBarrier(buffer);
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
    StoreStagedTile<BM, BN, kLd, kThreads>(tile, h + n0, N, m0, M, N - n0, thread_idx);
    cutlass::arch::NamedBarrier::sync(kThreads, barrier);
  }

 private:
  Params params;
};

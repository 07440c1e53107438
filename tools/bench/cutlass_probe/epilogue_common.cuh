#pragma once
// What the probe's epilogues (epilogue.cuh, epilogue_bwd.cuh, epilogue_decode.cuh) share: the parts of the interface
// of CUTLASS's DefaultEpilogue (as Sm90TmaWarpSpecializedAdapter wraps it) that are the same for all of them, and the
// staging of a tile's outputs through padded shared memory into 16-byte global stores.
#include <cuda_bf16.h>

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "probe.cuh"

// bf16 outputs, no source tensor, no workspace, Params = Arguments. An epilogue derives from it and adds its
// Arguments (starting with the fields below), SharedStorage / TensorStorage, can_implement, its constructor from
// Params and operator().
template <class StrideD_>
struct ProbeEpilogueBase {
  using EpilogueSchedule = cutlass::gemm::EpilogueDefault;
  using DispatchPolicy = EpilogueSchedule;
  using ThreadEpilogueOp = cutlass::epilogue::thread::LinearCombination<cutlass::bfloat16_t, 1, float, float>;
  using ElementOutput = cutlass::bfloat16_t;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementScalar = float;
  using ElementC = void;
  using StrideC = StrideD_;
  using ElementD = cutlass::bfloat16_t;
  using StrideD = StrideD_;
  using GmemElementC = ElementD;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  static const int kOutputAlignment = 8;
  using AlignmentType = uint4;
  // The fields CUTLASS's adapter expects at the head of every epilogue's Arguments.
  struct BaseArguments {
    typename ThreadEpilogueOp::Params thread{};
    ElementD const* ptr_C = nullptr;
    StrideC dC{};
    ElementD* ptr_D = nullptr;
    StrideD dD{};
  };

  template <class ProblemShape, class Args>
  static constexpr Args to_underlying_arguments(ProblemShape const&, Args const& args, void*) {
    return args;
  }
  template <class ProblemShape, class Args>
  static size_t get_workspace_size(ProblemShape const&, Args const&) {
    return 0;
  }
  template <class ProblemShape, class Args>
  static cutlass::Status initialize_workspace(ProblemShape const&, Args const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  CUTLASS_DEVICE bool is_source_needed() { return false; }
};

// An epilogue's shared memory: kBuffers staging tiles of kElems bf16 (one per consumer warpgroup in ping-pong kernels).
template <int kBuffers, int kElems>
struct StagingStorage {
  alignas(16) __nv_bfloat16 tile[kBuffers][kElems];
};

// The staging tile of this consumer warpgroup (ping-pong kernels: warpgroups 1 and 2 consume, each with its own tile
// and named barrier; cooperative ones share one) and its barrier.
template <int kBuffers>
CUTLASS_DEVICE int StagingBuffer() {
  return kBuffers == 1 ? 0 : (static_cast<int>(threadIdx.x) / 128 - 1) % kBuffers;
}
CUTLASS_DEVICE uint32_t StagingBarrier(int buffer) {
  return static_cast<uint32_t>(cutlass::arch::ReservedNamedBarriers::FirstUserBarrier) + buffer;
}

// Rows [0, BM) of a staged [BM, kCols] bf16 tile (row stride kLd) to dst rows m0.. (row stride ld), in 16-byte pieces
// over the warpgroup's kThreads threads; rows at or past M and pieces at or past cols_left columns are skipped. The
// caller synchronises before (the tile written) and after (the tile free again).
template <int BM, int kCols, int kLd, int kThreads>
CUTLASS_DEVICE void StoreStagedTile(const __nv_bfloat16* tile, __nv_bfloat16* dst, int64_t ld, int m0, int M,
                                    int cols_left, int thread_idx) {
  constexpr int kChunks = kCols / 8;
  CUTLASS_PRAGMA_UNROLL
  for (int j = thread_idx; j < BM * kChunks; j += kThreads) {
    const int r = j / kChunks;
    const int c8 = (j % kChunks) * 8;
    if (m0 + r < M && c8 < cols_left) {
      *reinterpret_cast<uint4*>(dst + (m0 + r) * ld + c8) = *reinterpret_cast<const uint4*>(tile + r * kLd + c8);
    }
  }
}

// The probe's CUTLASS GEMM of one configuration (tile, cluster, kernel schedule; SwiGLU epilogue or CUTLASS's own),
// as a ProbeGemm: arguments prepared once per weight copy, then timed runs.
//   kSilu: the SwiGLU epilogue's silu (epilogue.cuh). kResidual: CUTLASS's epilogue adds the output's old value
//   (beta 1, C = D). kDecomp, with the stream-K tile scheduler: 0 its heuristic, kForceStreamK stream-K, n > 1 split-K
//   into n parts (the partial sums reduced deterministically, the scheduler's default).
#pragma once
#include <string>
#include <type_traits>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "epilogue.cuh"
#include "probe.cuh"

constexpr int kForceStreamK = -1;

template <class TileShape, class ClusterShape, class KernelSchedule, class EpiSchedule, bool kSwiglu,
          class Scheduler = void, int kSilu = 0, bool kResidual = false, int kDecomp = 0>
struct CutlassGemm {
  using BF = cutlass::bfloat16_t;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  using StrideD = cutlass::detail::TagToStrideC_t<LayoutD>;
  using PlainEpi = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, std::conditional_t<kResidual, BF, void>, LayoutD,
      8, BF, LayoutD, 8, EpiSchedule>::CollectiveOp;
  static constexpr bool kPing = std::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using SwiEpi = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
      SwigluEpilogue<StrideD, cute::size<0>(TileShape{}), cute::size<1>(TileShape{}), kPing ? 2 : 1, kSilu>>;
  using Epi = std::conditional_t<kSwiglu, SwiEpi, PlainEpi>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, BF, LayoutA, 8, BF, LayoutB, 8, float, TileShape,
      ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epi, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  struct Handle {
    Gemm gemm;
    void* workspace = nullptr;
  };

  static void* Prepare(const ProbeIo& io, int m, int n, int k, cudaStream_t s) {
    const void* x = io.x;
    const void* w = io.w;
    void* y = io.y;
    auto* h = new Handle;
    const int64_t n_out = kSwiglu ? n / 2 : n;
    const typename Kernel::StrideA sa = cute::make_stride(int64_t{k}, cute::Int<1>{}, int64_t{m} * k);
    const typename Kernel::StrideB sb = cute::make_stride(int64_t{k}, cute::Int<1>{}, int64_t{n} * k);
    const StrideD sd = cute::make_stride(n_out, cute::Int<1>{}, int64_t{m} * n_out);
    typename Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {m, n, k, 1};
    args.mainloop = {static_cast<const BF*>(x), sa, static_cast<const BF*>(w), sb};
    if constexpr (kSwiglu) {
      args.epilogue.ptr_D = static_cast<BF*>(y);
      args.epilogue.dD = sd;
    } else {
      args.epilogue.thread.alpha = 1.f;
      args.epilogue.thread.beta = kResidual ? 1.f : 0.f;
      args.epilogue.ptr_C = kResidual ? static_cast<const BF*>(y) : nullptr;
      args.epilogue.dC = sd;
      args.epilogue.ptr_D = static_cast<BF*>(y);
      args.epilogue.dD = sd;
    }
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;
    hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
    args.hw_info = hw;
    if constexpr (kDecomp != 0) {
      using Decomposition = typename Kernel::TileScheduler::DecompositionMode;
      if constexpr (kDecomp == kForceStreamK) {
        args.scheduler.decomposition_mode = Decomposition::StreamK;
      } else {
        args.scheduler.decomposition_mode = Decomposition::SplitK;
        args.scheduler.splits = kDecomp;
      }
    }
    if (h->gemm.can_implement(args) != cutlass::Status::kSuccess) {
      delete h;
      return nullptr;
    }
    const size_t ws = Gemm::get_workspace_size(args);
    if (ws > 0) cudaMalloc(&h->workspace, ws);
    if (h->gemm.initialize(args, h->workspace, s) != cutlass::Status::kSuccess) {
      Release(h);
      return nullptr;
    }
    return h;
  }
  static bool Run(void* handle, cudaStream_t s) {
    return static_cast<Handle*>(handle)->gemm.run(s) == cutlass::Status::kSuccess;
  }
  static void Release(void* handle) {
    auto* h = static_cast<Handle*>(handle);
    cudaFree(h->workspace);
    delete h;
  }
  static ProbeGemm Probe(std::string name, std::string shape = "gate_up") {
    ProbeGemm p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.swiglu = kSwiglu;
    p.residual = kResidual;
    p.prepare = &Prepare;
    p.run = &Run;
    p.release = &Release;
    return p;
  }
};

using namespace cute;
using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using Ping = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpiCoop = cutlass::epilogue::TmaWarpSpecializedCooperative;
using NoSmem = cutlass::epilogue::NoSmemWarpSpecialized;
using EpiPing = cutlass::epilogue::TmaWarpSpecialized;
using StreamK = cutlass::gemm::StreamKScheduler;

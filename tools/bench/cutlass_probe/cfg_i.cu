// The down projection's input-gradient GEMM with SwiGLU's backward in its epilogue (epilogue_bwd.cuh): d = dy W_down
// for dy [m, 896] and W_down [896, 4864] as stored (row-major, so B is n-major), against cuBLASLt's GEMM + a kernel
// computing as SwiGluBackwardKernel (main.cu).
#include <type_traits>

#include "config.cuh"
#include "epilogue_bwd.cuh"

template <class TileShape, class ClusterShape, class KernelSchedule, int kSilu>
struct CutlassSwigluBwd {
  using BF = cutlass::bfloat16_t;
  using StrideD = cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor>;
  static constexpr bool kPing = std::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using Epi = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
      SwigluBwdEpilogue<StrideD, cute::size<0>(TileShape{}), cute::size<1>(TileShape{}), kPing ? 2 : 1, kSilu>>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, BF, cutlass::layout::RowMajor, 8, BF,
      cutlass::layout::RowMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epi>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static void* Prepare(const ProbeIo& io, int m, int n, int k, cudaStream_t s) {
    auto* gemm = new Gemm;
    typename Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {m, n, k, 1};
    // A: dy [m, k] row-major, strides (k, 1). B: W_down [k, n] row-major, i.e. (n, k) with strides (1, n).
    const typename Kernel::StrideA sa = cute::make_stride(int64_t{k}, cute::Int<1>{}, int64_t{m} * k);
    const typename Kernel::StrideB sb = cute::make_stride(cute::Int<1>{}, int64_t{n}, int64_t{n} * k);
    args.mainloop = {static_cast<const BF*>(io.x), sa, static_cast<const BF*>(io.w), sb};
    args.epilogue.ptr_D = static_cast<BF*>(io.y);
    args.epilogue.dD = cute::make_stride(int64_t{2} * n, cute::Int<1>{}, int64_t{m} * 2 * n);
    args.epilogue.gate_up = static_cast<const __nv_bfloat16*>(io.gate_up);
    args.epilogue.act = static_cast<__nv_bfloat16*>(io.act);
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;
    hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
    args.hw_info = hw;
    if (gemm->can_implement(args) != cutlass::Status::kSuccess || Gemm::get_workspace_size(args) != 0 ||
        gemm->initialize(args, nullptr, s) != cutlass::Status::kSuccess) {
      delete gemm;
      return nullptr;
    }
    return gemm;
  }
  static bool Run(void* handle, cudaStream_t s) {
    return static_cast<Gemm*>(handle)->run(s) == cutlass::Status::kSuccess;
  }
  static void Release(void* handle) { delete static_cast<Gemm*>(handle); }
  static ProbeGemm Probe(std::string name) {
    ProbeGemm p;
    p.name = std::move(name);
    p.shape = "swiglu_bwd";
    p.swiglu_bwd = true;
    p.prepare = &Prepare;
    p.run = &Run;
    p.release = &Release;
    return p;
  }
};

void RegisterI(std::vector<ProbeGemm>& out) {
  out.push_back(CutlassSwigluBwd<Shape<_64, _128, _64>, Shape<_1, _1, _1>, Ping, kSiluExact>::Probe(
      "swiglu bwd ping 64x128 c1 exact"));
  out.push_back(CutlassSwigluBwd<Shape<_64, _128, _64>, Shape<_2, _1, _1>, Ping, kSiluExact>::Probe(
      "swiglu bwd ping 64x128 c2x1 exact"));
  out.push_back(CutlassSwigluBwd<Shape<_128, _128, _64>, Shape<_2, _1, _1>, Coop, kSiluExact>::Probe(
      "swiglu bwd coop 128x128 c2x1 exact"));
  out.push_back(CutlassSwigluBwd<Shape<_64, _128, _64>, Shape<_2, _1, _1>, Ping, kSiluFast>::Probe(
      "swiglu bwd ping 64x128 c2x1 fast"));
}

// The decoding layer's attention output projection and folded gate/up projection with the post-attention norm carried
// by their epilogues (epilogue_decode.cuh), as a DecodeChain for main.cu's decode_mlp shape.
#include <type_traits>

#include "config.cuh"
#include "epilogue_decode.cuh"

namespace {

template <class TileShape, class Epi, class Schedule>
using ChainGemm = cutlass::gemm::device::GemmUniversalAdapter<cutlass::gemm::kernel::GemmUniversal<
    cute::Shape<int, int, int, int>,
    typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t, cutlass::layout::RowMajor, 8,
        cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8, float, TileShape,
        cute::Shape<cute::_1, cute::_1, cute::_1>,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
        Schedule>::CollectiveOp,
    Epi>>;

template <class Gemm>
bool Ready(Gemm& gemm, typename Gemm::Arguments& args, cudaStream_t s) {
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.hw_info.device_id = 0;
  args.hw_info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
  return gemm.can_implement(args) == cutlass::Status::kSuccess && Gemm::get_workspace_size(args) == 0 &&
         gemm.initialize(args, nullptr, s) == cutlass::Status::kSuccess;
}

// O-projection tile BO x 64 (ping-pong), gate/up tile 64 x BG (ping-pong).
template <int BG>
struct Chain {
  using StrideD = cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor>;
  using Ping = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  static constexpr int kTileO = 64;
  using OEpi =
      cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<ResidualSsqEpilogue<StrideD, 64, kTileO, 2>>;
  using GEpi = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
      SwigluEpilogue<StrideD, 64, BG, 2, kSiluFast, /*kRowScale=*/true>>;
  using OGemm = ChainGemm<cute::Shape<cute::_64, cute::Int<kTileO>, cute::_64>, OEpi, Ping>;
  using GGemm = ChainGemm<cute::Shape<cute::_64, cute::Int<BG>, cute::_64>, GEpi, Ping>;
  struct Handle {
    OGemm o;
    GGemm g;
  };
  using BF = cutlass::bfloat16_t;

  static void* Prepare(const ChainIo& io, int m, cudaStream_t s) {
    auto* h = new Handle;
    const int64_t hid = io.hidden, two_i = 2 * int64_t{io.inter};
    typename OGemm::Arguments oa;
    oa.problem_shape = {m, io.hidden, io.hidden, 1};
    oa.mainloop = {static_cast<const BF*>(io.attn), cute::make_stride(hid, cute::Int<1>{}, m * hid),
                   static_cast<const BF*>(io.wo), cute::make_stride(hid, cute::Int<1>{}, hid * hid)};
    oa.epilogue.ptr_D = static_cast<BF*>(io.h);
    oa.epilogue.dD = cute::make_stride(hid, cute::Int<1>{}, m * hid);
    oa.epilogue.ssq = io.ssq;
    typename GGemm::Arguments ga;
    ga.problem_shape = {m, static_cast<int>(two_i), io.hidden, 1};
    ga.mainloop = {static_cast<const BF*>(io.h), cute::make_stride(hid, cute::Int<1>{}, m * hid),
                   static_cast<const BF*>(io.w_gate_up), cute::make_stride(hid, cute::Int<1>{}, two_i * hid)};
    ga.epilogue.ptr_D = static_cast<BF*>(io.y);
    ga.epilogue.dD = cute::make_stride(two_i / 2, cute::Int<1>{}, m * two_i / 2);
    ga.epilogue.ssq = io.ssq;
    ga.epilogue.ssq_tiles = (io.hidden + kTileO - 1) / kTileO;
    ga.epilogue.hidden = io.hidden;
    ga.epilogue.eps = io.eps;
    if (!Ready(h->o, oa, s) || !Ready(h->g, ga, s)) {
      delete h;
      return nullptr;
    }
    return h;
  }
  static bool Run(void* handle, cudaStream_t s) {
    auto* h = static_cast<Handle*>(handle);
    return h->o.run(s) == cutlass::Status::kSuccess && h->g.run(s) == cutlass::Status::kSuccess;
  }
  static void Release(void* handle) { delete static_cast<Handle*>(handle); }
  static DecodeChain Make(std::string name) {
    DecodeChain c;
    c.name = std::move(name);
    c.prepare = &Prepare;
    c.run = &Run;
    c.release = &Release;
    return c;
  }
};

}  // namespace

void RegisterChains(std::vector<DecodeChain>& out) {
  out.push_back(Chain<128>::Make("o ping 64x64 ssq + gate/up ping 64x128 row-scaled swiglu"));
  out.push_back(Chain<256>::Make("o ping 64x64 ssq + gate/up ping 64x256 row-scaled swiglu"));
}

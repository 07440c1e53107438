#include "config.cuh"
void RegisterD(std::vector<ProbeGemm>& out) {
  out.push_back(CutlassGemm<Shape<_128, _256, _64>, Shape<_1, _1, _1>, Coop, NoSmem, true,
                            cutlass::gemm::StreamKScheduler>::Probe("swiglu coop 128x256 c1 streamk"));
  out.push_back(
      CutlassGemm<Shape<_64, _256, _64>, Shape<_2, _1, _1>, Ping, NoSmem, true>::Probe("swiglu ping 64x256 c2x1"));
}

#include "config.cuh"
void RegisterC(std::vector<ProbeGemm>& out) {
  out.push_back(
      CutlassGemm<Shape<_64, _256, _64>, Shape<_1, _1, _1>, Ping, NoSmem, true>::Probe("swiglu ping 64x256 c1"));
  out.push_back(
      CutlassGemm<Shape<_64, _128, _64>, Shape<_1, _1, _1>, Ping, NoSmem, true>::Probe("swiglu ping 64x128 c1"));
}

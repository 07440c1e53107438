#include "config.cuh"
void RegisterB(std::vector<ProbeGemm>& out) {
  out.push_back(
      CutlassGemm<Shape<_128, _256, _64>, Shape<_2, _1, _1>, Coop, NoSmem, true>::Probe("swiglu coop 128x256 c2x1"));
  out.push_back(
      CutlassGemm<Shape<_128, _128, _64>, Shape<_1, _1, _1>, Coop, NoSmem, true>::Probe("swiglu coop 128x128 c1"));
}

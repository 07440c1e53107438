#include "config.cuh"
void RegisterA(std::vector<ProbeGemm>& out) {
  out.push_back(
      CutlassGemm<Shape<_128, _256, _64>, Shape<_1, _1, _1>, Coop, NoSmem, true>::Probe("swiglu coop 128x256 c1"));
  out.push_back(
      CutlassGemm<Shape<_128, _256, _64>, Shape<_1, _1, _1>, Coop, EpiCoop, false>::Probe("plain coop 128x256 c1"));
}

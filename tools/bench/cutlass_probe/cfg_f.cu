#include "config.cuh"
// The fast silu with the model's roundings (SwiGluFast) at the tilings of cfg_e.cu.
void RegisterF(std::vector<ProbeGemm>& out) {
  out.push_back(CutlassGemm<Shape<_64, _128, _64>, Shape<_1, _1, _1>, Ping, NoSmem, true, void, kSiluFast>::Probe(
      "swiglu ping 64x128 c1 fast"));
  out.push_back(CutlassGemm<Shape<_64, _256, _64>, Shape<_2, _1, _1>, Ping, NoSmem, true, void, kSiluFast>::Probe(
      "swiglu ping 64x256 c2x1 fast"));
  out.push_back(CutlassGemm<Shape<_128, _256, _64>, Shape<_2, _1, _1>, Coop, NoSmem, true, void, kSiluFast>::Probe(
      "swiglu coop 128x256 c2x1 fast"));
}

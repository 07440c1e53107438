#include "config.cuh"
// The short-k projections (k 896): Q/K/V (n 1,152) and the attention output (n 896, adding the residual).
void RegisterH(std::vector<ProbeGemm>& out) {
  using S = Shape<_1, _1, _1>;
  out.push_back(CutlassGemm<Shape<_64, _64, _64>, S, Ping, EpiPing, false>::Probe("plain ping 64x64 c1", "qkv"));
  out.push_back(CutlassGemm<Shape<_64, _128, _64>, S, Ping, EpiPing, false>::Probe("plain ping 64x128 c1", "qkv"));
  out.push_back(CutlassGemm<Shape<_128, _64, _64>, S, Coop, EpiCoop, false, StreamK, 0, false, kForceStreamK>::Probe(
      "plain coop 128x64 c1 streamk", "qkv"));
  out.push_back(
      CutlassGemm<Shape<_64, _64, _64>, S, Ping, EpiPing, false, void, 0, true>::Probe("residual ping 64x64 c1", "o"));
  out.push_back(CutlassGemm<Shape<_128, _64, _64>, S, Coop, EpiCoop, false, StreamK, 0, true, kForceStreamK>::Probe(
      "residual coop 128x64 c1 streamk", "o"));
}

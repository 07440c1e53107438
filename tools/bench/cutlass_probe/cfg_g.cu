#include "config.cuh"
// The down projection (k 4,864, n 896), adding the residual: cuBLAS runs it on 64 x 64 tiles (112 at 512 rows, fewer
// than the SMs, each with 76 k-steps); stream-K and split-K spread the k-steps over every SM.
void RegisterG(std::vector<ProbeGemm>& out) {
  using S = Shape<_1, _1, _1>;
  out.push_back(CutlassGemm<Shape<_64, _64, _64>, S, Ping, EpiPing, false, void, 0, true>::Probe(
      "residual ping 64x64 c1", "down"));
  out.push_back(CutlassGemm<Shape<_64, _128, _64>, S, Ping, EpiPing, false, void, 0, true>::Probe(
      "residual ping 64x128 c1", "down"));
  out.push_back(CutlassGemm<Shape<_128, _64, _64>, S, Coop, EpiCoop, false, StreamK, 0, true>::Probe(
      "residual coop 128x64 c1 streamk heuristic", "down"));
  out.push_back(CutlassGemm<Shape<_128, _64, _64>, S, Coop, EpiCoop, false, StreamK, 0, true, kForceStreamK>::Probe(
      "residual coop 128x64 c1 streamk", "down"));
  out.push_back(CutlassGemm<Shape<_128, _64, _64>, S, Coop, EpiCoop, false, StreamK, 0, true, 2>::Probe(
      "residual coop 128x64 c1 splitk 2", "down"));
  out.push_back(CutlassGemm<Shape<_128, _128, _64>, S, Coop, EpiCoop, false, StreamK, 0, true, kForceStreamK>::Probe(
      "residual coop 128x128 c1 streamk", "down"));
}

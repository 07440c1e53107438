#include "config.cuh"
// SwiGluStacked's exact silu in the epilogue (the model's kernel on branch exp/cutlass-gate-up-swiglu), and the
// rollout's fast silu with the same roundings (the candidate for the trainer's kernels and the epilogue alike).
void RegisterE(std::vector<ProbeGemm>& out) {
  out.push_back(CutlassGemm<Shape<_64, _128, _64>, Shape<_1, _1, _1>, Ping, NoSmem, true, void, kSiluExact>::Probe(
      "swiglu ping 64x128 c1 exact"));
  out.push_back(CutlassGemm<Shape<_64, _256, _64>, Shape<_2, _1, _1>, Ping, NoSmem, true, void, kSiluExact>::Probe(
      "swiglu ping 64x256 c2x1 exact"));
  out.push_back(CutlassGemm<Shape<_128, _256, _64>, Shape<_2, _1, _1>, Coop, NoSmem, true, void, kSiluExact>::Probe(
      "swiglu coop 128x256 c2x1 exact"));
}

// Probe: CUTLASS (PyPI's nvidia-cutlass headers) Hopper GEMMs at the decoder layer's four projections against
// cuBLASLt: the MLP's stacked gate/up projection with SwiGLU in the epilogue (against cuBLASLt + a separate SwiGLU
// kernel), and the plain GEMMs of the Q/K/V projection, the attention output and the down projection (those two add
// the residual, as the rollout's GEMMs do: beta 1 into the output); and the trainer's down-projection input gradient
// with SwiGLU's backward in the epilogue (against cuBLASLt + a separate kernel). Experimental; built and run by run.sh
// on the GPU machine.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

struct ProbeIo {
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  const void* gate_up = nullptr;  // swiglu_bwd only
  void* act = nullptr;            // swiglu_bwd only
};

struct ProbeGemm {
  std::string name;
  // The projection it is timed at (main.cu's kShapes: "gate_up", "qkv", "o", "down", "swiglu_bwd").
  std::string shape = "gate_up";
  // y = x w^T for x [m, k], w [n, k] row-major, bf16. swiglu: w's rows are interleaved in blocks of 16 (8 gate rows,
  // then the 8 matching up rows) and y is [m, n / 2] = silu(gate) * up; otherwise y is [m, n] (residual: y += x w^T).
  bool swiglu = false;
  bool residual = false;
  // swiglu_bwd: the down projection's input gradient d = x w for x [m, k] (the output's gradient) and w [k, n]
  // (W_down, row-major), with SwiGLU's backward after it (SwigluBwdValues): y is d_gate_up [m, 2 n], from ProbeIo's
  // gate_up [m, 2 n] (the forward's stacked projection); SwiGLU's value goes to ProbeIo's act [m, n].
  bool swiglu_bwd = false;
  // Prepares a call for these pointers (one per weight copy); returns an opaque handle.
  void* (*prepare)(const ProbeIo& io, int m, int n, int k, cudaStream_t s) = nullptr;
  bool (*run)(void* handle, cudaStream_t s) = nullptr;
  void (*release)(void* handle) = nullptr;
};

// The SwiGLU epilogues' silu (epilogue.cuh, epilogue_bwd.cuh): 0 the first probe's fast form (gate/up only),
// kSiluExact as fused_ops.cu's SwiGluStacked, kSiluFast as its SiluFast.
constexpr int kSiluExact = 1, kSiluFast = 2;

// x rounded to bf16, as float.
__device__ __forceinline__ float RoundBf16(float x) { return __bfloat162float(__float2bfloat16(x)); }
// The unfused path's SwiGLU of bf16 values g, u, as fused_ops.cu's SwiGluStacked computes it: silu with expf and an
// IEEE division, rounded to bf16, times u (the caller rounds the product).
__device__ __forceinline__ float SwiGluExact(float g, float u) {
  return __fmul_rn(RoundBf16(g / (1.0f + expf(-g))), u);
}
// The same with silu on the special-function unit (exp2 and reciprocal, each within 2 ulp), as fused_ops.cu's
// SiluFast (the rollout's SwiGLU): the candidate for the trainer's kernels and the fused epilogue alike.
__device__ __forceinline__ float SwiGluFast(float g, float u) {
  return __fmul_rn(RoundBf16(__fdividef(g, 1.0f + exp2f(-g * 1.4426950408889634f))), u);
}

// SwiGLU's backward at one element as fused_ops.cu's SwiGluBackwardKernel computes it, for the output gradient d and
// the forward's g, u (all bf16 values): the autograd of to_bf16(silu(g)) * u, each product stored in bf16 (the caller
// rounds dg, du and y): dup = d s, ds = d u, then silu's backward (exact expf and division, as ATen's); y = s u is
// SwiGLU's value. kSilu picks the forward silu's form (kSiluExact or kSiluFast).
struct SwigluBwd {
  float dg, du, y;
};
template <int kSilu>
__device__ __forceinline__ SwigluBwd SwigluBwdValues(float d, float g, float u) {
  const float silu = kSilu == kSiluFast ? __fdividef(g, 1.0f + exp2f(-g * 1.4426950408889634f)) : g / (1.0f + expf(-g));
  const float s = RoundBf16(silu);
  const float ds = RoundBf16(__fmul_rn(d, u));
  const float sg = 1.0f / (1.0f + expf(-g));
  SwigluBwd r;
  r.y = __fmul_rn(s, u);
  r.du = __fmul_rn(d, s);
  r.dg = ds * sg * (1.0f + g * (1.0f - sg));
  return r;
}

// decode_mlp (cfg_j.cu): the rollout's attention output projection (h += attn wo^T, bf16 [m, hidden]) and folded
// gate/up projection of h (w_gate_up interleaved as for the SwiGLU epilogue, [2 inter, hidden]) with the norm's row
// scale and SwiGLU into y [m, inter], the rows' sums of squares passed between them in ssq ([m, hidden / 64] floats).
struct ChainIo {
  const void* attn = nullptr;
  const void* wo = nullptr;
  void* h = nullptr;
  const void* w_gate_up = nullptr;
  void* y = nullptr;
  float* ssq = nullptr;
  int hidden = 0, inter = 0;
  float eps = 0.f;
};
struct DecodeChain {
  std::string name;
  void* (*prepare)(const ChainIo& io, int m, cudaStream_t s) = nullptr;
  bool (*run)(void* handle, cudaStream_t s) = nullptr;
  void (*release)(void* handle) = nullptr;
};
void RegisterChains(std::vector<DecodeChain>& out);

// Each cfg_*.cu registers its instantiations (separate files so that nvcc compiles them in parallel).
void RegisterA(std::vector<ProbeGemm>& out);
void RegisterB(std::vector<ProbeGemm>& out);
void RegisterC(std::vector<ProbeGemm>& out);
void RegisterD(std::vector<ProbeGemm>& out);
void RegisterE(std::vector<ProbeGemm>& out);
void RegisterF(std::vector<ProbeGemm>& out);
void RegisterG(std::vector<ProbeGemm>& out);
void RegisterH(std::vector<ProbeGemm>& out);
void RegisterI(std::vector<ProbeGemm>& out);

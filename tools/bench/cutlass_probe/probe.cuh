// Probe: CUTLASS (PyPI's nvidia-cutlass headers) Hopper GEMMs at the decoder layer's four projections against
// cuBLASLt: the MLP's stacked gate/up projection with SwiGLU in the epilogue (against cuBLASLt + a separate SwiGLU
// kernel), and the plain GEMMs of the Q/K/V projection, the attention output and the down projection (those two add
// the residual, as the rollout's GEMMs do: beta 1 into the output). Experimental; built and run by run.sh on the GPU
// machine.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

struct ProbeGemm {
  std::string name;
  // The projection it is timed at (main.cu's kShapes: "gate_up", "qkv", "o", "down").
  std::string shape = "gate_up";
  // y = x w^T for x [m, k], w [n, k] row-major, bf16. swiglu: w's rows are interleaved in blocks of 16 (8 gate rows,
  // then the 8 matching up rows) and y is [m, n / 2] = silu(gate) * up; otherwise y is [m, n] (residual: y += x w^T).
  bool swiglu = false;
  bool residual = false;
  // Prepares a call for these pointers (one per weight copy); returns an opaque handle.
  void* (*prepare)(const void* x, const void* w, void* y, int m, int n, int k, cudaStream_t s) = nullptr;
  bool (*run)(void* handle, cudaStream_t s) = nullptr;
  void (*release)(void* handle) = nullptr;
};

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

// Each cfg_*.cu registers its instantiations (separate files so that nvcc compiles them in parallel).
void RegisterA(std::vector<ProbeGemm>& out);
void RegisterB(std::vector<ProbeGemm>& out);
void RegisterC(std::vector<ProbeGemm>& out);
void RegisterD(std::vector<ProbeGemm>& out);
void RegisterE(std::vector<ProbeGemm>& out);
void RegisterF(std::vector<ProbeGemm>& out);
void RegisterG(std::vector<ProbeGemm>& out);
void RegisterH(std::vector<ProbeGemm>& out);

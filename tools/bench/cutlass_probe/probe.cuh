// Probe: CUTLASS (PyPI's nvidia-cutlass headers) Hopper GEMMs for the MLP's stacked gate/up projection, with SwiGLU
// in the epilogue, against cuBLASLt + a separate SwiGLU kernel. Experimental; built and run by run.sh on the GPU
// machine.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

struct ProbeGemm {
  std::string name;
  // y = x w^T for x [m, k], w [n, k] row-major, bf16. swiglu: w's rows are interleaved in blocks of 16 (8 gate rows,
  // then the 8 matching up rows) and y is [m, n / 2] = silu(gate) * up; otherwise y is [m, n].
  bool swiglu = false;
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

// Each cfg_*.cu registers its instantiations (separate files so that nvcc compiles them in parallel).
void RegisterA(std::vector<ProbeGemm>& out);
void RegisterB(std::vector<ProbeGemm>& out);
void RegisterC(std::vector<ProbeGemm>& out);
void RegisterD(std::vector<ProbeGemm>& out);
void RegisterE(std::vector<ProbeGemm>& out);

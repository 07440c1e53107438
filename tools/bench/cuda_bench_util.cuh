#ifndef VERL_TOOLS_BENCH_CUDA_BENCH_UTIL_CUH_
#define VERL_TOOLS_BENCH_CUDA_BENCH_UTIL_CUH_

// What the torch-free CUDA micro-benchmarks (decode_attention_bench.cu, gemm_bench.cu) share: a checked CUDA call
// and deterministic pseudo-random bf16 inputs.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

// Exits with the file, line, call and CUDA's message when `expr` fails.
#define CUDA_OK(expr)                                                                            \
  do {                                                                                           \
    const cudaError_t e = (expr);                                                                \
    if (e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace verl::bench {

// x[i] for i < n: pseudo-random bf16 values in [lo, hi), a hash of (i + seed).
__global__ void FillUniform(__nv_bfloat16* x, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t h = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    x[i] = __float2bfloat16(lo + static_cast<float>(h >> 40) / static_cast<float>(1 << 24) * (hi - lo));
  }
}

}  // namespace verl::bench

#endif  // VERL_TOOLS_BENCH_CUDA_BENCH_UTIL_CUH_

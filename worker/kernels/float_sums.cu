// Float32 gradient sums over many tensors in one launch (float_sums_kernel.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "worker/kernels/dtype.cuh"
#include "worker/kernels/float_sums_kernel.h"
#include "worker/kernels/vec_load.cuh"

namespace verl::kernels {
namespace {

constexpr int kThreads = 256;

// One block per kFloatSumBlockElements elements of one entry (found by binary search over the entries' first blocks).
// sum + float(grad) in float32, the value ATen's sum.add_(grad) gives; float(grad) where the entry copies (as
// grad.to(float32), a negative zero kept).
template <typename T>
__global__ void __launch_bounds__(kThreads) FloatSumsKernel(const FloatSumArgs a) {
  int lo = 0, hi = a.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.entries[mid].first_block <= static_cast<int64_t>(blockIdx.x)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  float* const sum = a.entries[lo].sum;
  const T* const grad = static_cast<const T*>(a.entries[lo].grad);
  const int64_t n = a.entries[lo].n;
  const bool copy = a.entries[lo].copy != 0;
  const int64_t begin = (static_cast<int64_t>(blockIdx.x) - a.entries[lo].first_block) * kFloatSumBlockElements;
  const int64_t end = min(n, begin + kFloatSumBlockElements);
  constexpr int kN = Vec<T>::kN;  // 8 elements: 16 bytes of the gradient, 32 of the sum
  int64_t tail = begin;
  if (reinterpret_cast<uintptr_t>(grad) % 16 == 0 && reinterpret_cast<uintptr_t>(sum) % 16 == 0) {
    const int64_t vecs = (end - begin) / kN;
    for (int64_t v = threadIdx.x; v < vecs; v += kThreads) {
      const int64_t i = begin + v * kN;
      float g[kN];
      Vec<T>::Load(grad + i, g);
      float4* s = reinterpret_cast<float4*>(sum + i);
#pragma unroll
      for (int q = 0; q < kN / 4; ++q) {
        const float4 add = make_float4(g[4 * q], g[4 * q + 1], g[4 * q + 2], g[4 * q + 3]);
        if (copy) {
          s[q] = add;
        } else {
          const float4 x = s[q];
          s[q] = make_float4(x.x + add.x, x.y + add.y, x.z + add.z, x.w + add.w);
        }
      }
    }
    tail = begin + vecs * kN;
  }
  for (int64_t i = tail + threadIdx.x; i < end; i += kThreads) {
    sum[i] = copy ? ToFloat(grad[i]) : sum[i] + ToFloat(grad[i]);
  }
}

}  // namespace

cudaError_t LaunchFloatSums(const FloatSumArgs& a, cudaStream_t stream) {
  if (a.count <= 0 || a.blocks <= 0) return cudaSuccess;
  if (a.count > kFloatSumMaxEntries || a.blocks > INT32_MAX || a.dtype == KernelDtype::kFloat32) {
    return cudaErrorInvalidValue;
  }
  if (a.dtype == KernelDtype::kBFloat16) {
    FloatSumsKernel<__nv_bfloat16><<<static_cast<unsigned>(a.blocks), kThreads, 0, stream>>>(a);
  } else {
    FloatSumsKernel<__half><<<static_cast<unsigned>(a.blocks), kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace verl::kernels

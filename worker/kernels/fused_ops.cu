// Fused RMSNorm and RoPE for the rollout (inference mode) (fused_ops_kernel.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "worker/kernels/dtype.cuh"
#include "worker/kernels/fused_ops_kernel.h"

namespace verl::kernels {
namespace {

constexpr int kNormThreads = 256;  // one warp per row

template <typename T>
__global__ void __launch_bounds__(kNormThreads) RmsNormKernel(const RmsNormArgs a) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kNormThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= a.rows) return;
  const T* x = static_cast<const T*>(a.x) + row * a.hidden;
  const T* w = static_cast<const T*>(a.weight);
  T* y = static_cast<T*>(a.y) + row * a.hidden;
  float ss = 0.f;
  for (int i = lane; i < a.hidden; i += 32) {
    const float v = ToFloat(x[i]);
    ss = fmaf(v, v, ss);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float r = rsqrtf(ss / static_cast<float>(a.hidden) + a.eps);
  for (int i = lane; i < a.hidden; i += 32) {
    const float normed = Round<T>(__fmul_rn(ToFloat(x[i]), r));
    y[i] = FromFloat<T>(__fmul_rn(ToFloat(w[i]), normed));
  }
}

template <typename T>
__global__ void RopeKernel(const RopeArgs a) {
  const int half = a.head_dim / 2;
  const int64_t total = static_cast<int64_t>(a.batch) * a.heads * a.tokens * half;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(idx % half);
    int64_t rest = idx / half;
    const int t = static_cast<int>(rest % a.tokens);
    rest /= a.tokens;
    const int h = static_cast<int>(rest % a.heads);
    const int b = static_cast<int>(rest / a.heads);
    const int64_t at = b * a.stride_b + h * a.stride_h + t * a.stride_t;
    const int64_t ct = (static_cast<int64_t>(b) * a.tokens + t) * a.head_dim;
    const T* x = static_cast<const T*>(a.x) + at;
    const T* c = static_cast<const T*>(a.cos) + ct;
    const T* s = static_cast<const T*>(a.sin) + ct;
    T* y = static_cast<T*>(a.y) + at;
    const float x1 = ToFloat(x[d]);
    const float x2 = ToFloat(x[d + half]);
    // rotate_half(x) = cat(-x2, x1); each product and the sum rounded to T, as the ATen ops store them.
    // (_rn intrinsics: never contracted into an FMA, which would round once instead of twice.)
    y[d] = FromFloat<T>(__fadd_rn(Round<T>(__fmul_rn(x1, ToFloat(c[d]))), Round<T>(__fmul_rn(-x2, ToFloat(s[d])))));
    y[d + half] = FromFloat<T>(
        __fadd_rn(Round<T>(__fmul_rn(x2, ToFloat(c[d + half]))), Round<T>(__fmul_rn(x1, ToFloat(s[d + half])))));
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  const int per_block = kNormThreads / 32;
  const dim3 grid(static_cast<unsigned>((a.rows + per_block - 1) / per_block));
  switch (a.dtype) {
    case KernelDtype::kFloat32:
      RmsNormKernel<float><<<grid, kNormThreads, 0, stream>>>(a);
      break;
    case KernelDtype::kBFloat16:
      RmsNormKernel<__nv_bfloat16><<<grid, kNormThreads, 0, stream>>>(a);
      break;
    case KernelDtype::kFloat16:
      RmsNormKernel<__half><<<grid, kNormThreads, 0, stream>>>(a);
      break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchRope(const RopeArgs& a, cudaStream_t stream) {
  if (a.head_dim % 2 != 0) return cudaErrorInvalidValue;
  const int64_t total = static_cast<int64_t>(a.batch) * a.heads * a.tokens * (a.head_dim / 2);
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535LL * 8);
  switch (a.dtype) {
    case KernelDtype::kFloat32:
      RopeKernel<float><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a);
      break;
    case KernelDtype::kBFloat16:
      RopeKernel<__nv_bfloat16><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a);
      break;
    case KernelDtype::kFloat16:
      RopeKernel<__half><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a);
      break;
  }
  return cudaGetLastError();
}

}  // namespace verl::kernels

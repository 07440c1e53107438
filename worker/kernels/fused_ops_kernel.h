#ifndef VERL_WORKER_KERNELS_FUSED_OPS_KERNEL_H_
#define VERL_WORKER_KERNELS_FUSED_OPS_KERNEL_H_

// Launch interfaces of the fused element-wise kernels for the rollout (inference mode),
// free of LibTorch (nvcc compiles only fused_ops.cu; the ATen-facing wrapper is fused_ops.h). Each computes exactly
// the ATen composition it replaces in the same dtype, rounding where ATen rounds (one kernel instead of five to eight).

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/kernel_dtype.h"

namespace verl::kernels {

// HF's RMSNorm over rows of `hidden` elements: y = weight * to_dtype(float(x) * rsqrt(mean(float(x)^2) + eps)).
struct RmsNormArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  const void* x = nullptr;       // [rows, hidden], contiguous
  const void* weight = nullptr;  // [hidden]
  void* y = nullptr;             // [rows, hidden], contiguous
  int64_t rows = 0;
  int hidden = 0;
  float eps = 1e-6f;
};
cudaError_t LaunchRmsNorm(const RmsNormArgs& args, cudaStream_t stream);

// RoPE as HF applies it: y = x * cos + rotate_half(x) * sin, for x [B, H, T, D] (element (b, h, t, d) at
// b * stride_b + h * stride_h + t * stride_t + d, the same for y) and cos, sin [B, T, D] contiguous.
struct RopeArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  const void* x = nullptr;
  const void* cos = nullptr;
  const void* sin = nullptr;
  void* y = nullptr;
  int batch = 0;
  int heads = 0;
  int tokens = 0;
  int head_dim = 0;  // even
  int64_t stride_b = 0;
  int64_t stride_h = 0;
  int64_t stride_t = 0;
};
cudaError_t LaunchRope(const RopeArgs& args, cudaStream_t stream);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_FUSED_OPS_KERNEL_H_

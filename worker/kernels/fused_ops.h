#ifndef VERL_WORKER_KERNELS_FUSED_OPS_H_
#define VERL_WORKER_KERNELS_FUSED_OPS_H_

// ATen face of the fused RMSNorm and RoPE kernels (fused_ops_kernel.h); built only with VERL_WITH_CUDA. No autograd:
// the model uses them only under inference mode (the rollout).

#include <ATen/ATen.h>

namespace verl::kernels {

// x [..., hidden] contiguous, weight [hidden], both on one CUDA device in float32, bfloat16 or float16.
bool RmsNormSupported(const at::Tensor& x, const at::Tensor& weight);
// HF's Qwen2/Llama RMSNorm: weight * to_dtype(float(x) * rsqrt(mean(float(x)^2, -1) + eps)).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// x [B, H, T, D] with contiguous rows of D (any other strides), cos and sin [B, 1, T, D] contiguous, one dtype.
bool RopeSupported(const at::Tensor& x, const at::Tensor& cos);
// x * cos + rotate_half(x) * sin, rounded as those ATen ops round; the result has x's strides.
at::Tensor Rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_FUSED_OPS_H_

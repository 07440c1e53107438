#ifndef VERL_WORKER_KERNELS_FUSED_OPS_KERNEL_H_
#define VERL_WORKER_KERNELS_FUSED_OPS_KERNEL_H_

// Launch interfaces of the fused element-wise kernels of the decoder layers (RMSNorm, RoPE, SwiGLU; forward and
// backward), free of LibTorch (nvcc compiles only fused_ops.cu; the ATen-facing wrapper is fused_ops.h). Each forward
// computes the ATen composition it replaces in the same dtype, rounding where ATen rounds (one kernel instead of two to
// eight); the backwards compute in float32 and round once.

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/kernel_dtype.h"

namespace verl::kernels {

// HF's RMSNorm over rows of `hidden` elements: y = weight * to_dtype(float(x) * rsqrt(mean(float(x)^2) + eps)).
struct RmsNormArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  const void* x = nullptr;         // [rows, hidden], contiguous
  const void* residual = nullptr;  // or null; else the norm is of sum = to_dtype(x + residual), stored in sum_out
  void* sum_out = nullptr;         // [rows, hidden], contiguous, with residual
  const void* weight = nullptr;    // [hidden]
  void* y = nullptr;               // [rows, hidden], contiguous
  float* rstd = nullptr;           // [rows]: rsqrt(mean(x^2) + eps) kept for the backward, or null
  int64_t rows = 0;
  int hidden = 0;
  float eps = 1e-6f;
};
cudaError_t LaunchRmsNorm(const RmsNormArgs& args, cudaStream_t stream);

// RMSNorm's backward (the cast to dtype passes gradients through, as in autograd), with r = rstd, xh = x * r,
// g = dy * weight: dx = r * (g - xh * mean(g * xh)); weight's gradient sum_rows(dy * to_dtype(xh)) as float32
// partial sums over row chunks, dweight_partial [RmsNormBackwardChunks(rows), hidden], which the caller sums.
struct RmsNormBackwardArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  const void* x = nullptr;           // [rows, hidden], contiguous
  const void* weight = nullptr;      // [hidden]
  const float* rstd = nullptr;       // [rows], from the forward
  const void* dy = nullptr;          // [rows, hidden], contiguous
  void* dx = nullptr;                // [rows, hidden], contiguous; null: no input gradient
  // [rows, hidden], contiguous, or null: added to dx (the normed tensor's gradient from its other uses, e.g. the
  // residual stream's), rounded as autograd's sum of the two: dx = to_dtype(to_dtype(dx) + dx_add).
  const void* dx_add = nullptr;
  float* dweight_partial = nullptr;  // null: no weight gradient
  int64_t rows = 0;
  int hidden = 0;
};
int RmsNormBackwardChunks(int64_t rows);
cudaError_t LaunchRmsNormBackward(const RmsNormBackwardArgs& args, cudaStream_t stream);

// RoPE as HF applies it: y = x * cos + rotate_half(x) * sin, for x [B, H, T, D] (element (b, h, t, d) at
// b * stride_b + h * stride_h + t * stride_t + d; y's at the y_stride_* likewise) and cos, sin [B, T, D] contiguous.
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
  int64_t y_stride_b = 0;
  int64_t y_stride_h = 0;
  int64_t y_stride_t = 0;
  // Use -sin: the backward (with HF's cos and sin, whose halves repeat, dx = rope(dy, cos, -sin) exactly as autograd
  // rounds the ATen composition's backward).
  bool negate_sin = false;
};
cudaError_t LaunchRope(const RopeArgs& args, cudaStream_t stream);

// Rows of shared-prompt attention moved with their RoPE (SharedPromptRows in fused_ops.h): rows of heads x head_dim
// elements, each head's head_dim contiguous and the heads adjacent; row r of x at x + r * x_stride, of y at
// y + r * y_stride. Output row r (r < rows) is
// - with `index`: x's row index[r], or zeros where index[r] is -1 (a gather);
// - with `offsets` and `positions`: the sum of x's rows positions[offsets[r]], ..., positions[offsets[r + 1] - 1],
//   added in float32 in that order and rounded once to the dtype (zeros for an empty list; SumRows' values);
// then, where cos and sin are set ([tokens, head_dim] contiguous), rotated as LaunchRope rotates (-sin with
// negate_sin) by the row of cos and sin of the input row (cos_of_input, a gather only) or of the output row. Zero rows
// are stored as zeros, not rotated.
struct RopeRowsArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  const void* x = nullptr;
  int64_t x_stride = 0;
  void* y = nullptr;
  int64_t y_stride = 0;
  int64_t rows = 0;
  int heads = 0;
  int head_dim = 0;  // even
  const int64_t* index = nullptr;
  const int64_t* offsets = nullptr;
  const int64_t* positions = nullptr;
  const void* cos = nullptr;
  const void* sin = nullptr;
  bool cos_of_input = false;
  bool negate_sin = false;
};
cudaError_t LaunchRopeRows(const RopeRowsArgs& args, cudaStream_t stream);

// One decoding step's RoPE and cache append in one launch: for one token per slot, q_out = rope(q) and the rows
// `rows[b * kv_heads + h]` of the caches (viewed as [-1, D]) = rope(k) and v, the values LaunchRope computes. q, k, v:
// element (b, h, d) at b * *_stride_b + h * D + d; cos, sin [B, D] contiguous; q_out [B, q_heads, D] contiguous.
struct RopeAppendArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t q_stride_b = 0;
  int64_t k_stride_b = 0;
  int64_t v_stride_b = 0;
  const void* cos = nullptr;
  const void* sin = nullptr;
  void* q_out = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const int64_t* rows = nullptr;
  int batch = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // even
  // Where set, the layer's input RMSNorm folded into the projection: q, k and v are projections of the un-normed
  // residual norm_x ([B, norm_hidden], row b at b * norm_stride_b) by weights whose columns the norm's weight scaled,
  // and each value is first to_dtype(r_b * x + bias) with r_b = rsqrt(mean(norm_x[b]^2) + eps) in float32. bias: the
  // stacked q, k, v biases ([(q_heads + 2 * kv_heads) * head_dim]) or null. One block per row then.
  const void* norm_x = nullptr;
  int64_t norm_stride_b = 0;
  int norm_hidden = 0;
  float eps = 1e-6f;
  const void* bias = nullptr;
};
cudaError_t LaunchRopeAppend(const RopeAppendArgs& args, cudaStream_t stream);

// SwiGLU as the HF MLP computes it: y = to_dtype(to_dtype(silu(gate)) * up), element-wise over n elements.
struct SwiGluArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  const void* gate = nullptr;
  const void* up = nullptr;
  void* y = nullptr;
  int64_t n = 0;
  // 0: gate, up and y are flat arrays of n elements. > 0: y is [n / cols, cols] and row r of gate and of up starts at
  // r * 2 * cols (the two halves of one stacked projection's output rows: up = gate + cols).
  int64_t cols = 0;
  // Where set (with cols > 0), the RMSNorm before the MLP folded into the stacked gate/up projection: gate and up are
  // projections of the un-normed residual norm_x ([n / cols, norm_hidden], row b at b * norm_stride_b) by weights
  // whose columns the norm's weight scaled, and each value is first to_dtype(r_b * x) with r_b =
  // rsqrt(mean(norm_x[b]^2) + eps) in float32 (as RopeAppendArgs::norm_x), and silu takes the special-function
  // unit's exp2 and reciprocal (within 2 ulp of float32's; bf16 rounds most of that away). One block per row then.
  const void* norm_x = nullptr;
  int64_t norm_stride_b = 0;
  int norm_hidden = 0;
  float eps = 1e-6f;
};
cudaError_t LaunchSwiGlu(const SwiGluArgs& args, cudaStream_t stream);

// Its backward: s = silu(gate), sg = sigmoid(gate); dup = dy * s, dgate = dy * up * sg * (1 + gate * (1 - sg)).
struct SwiGluBackwardArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* dy = nullptr;
  void* dgate = nullptr;
  void* dup = nullptr;
  int64_t n = 0;
  // As SwiGluArgs::cols: 0, flat arrays of n elements; > 0, dy is [n / cols, cols] and row r of gate, up, dgate and
  // dup starts at r * 2 * cols (a stacked projection's output and its gradient: up = gate + cols, dup = dgate + cols).
  int64_t cols = 0;
  // Optional: SwiGLU's output y (as dy's layout) stored too, the forward kernel's values bit for bit (a checkpointed
  // layer's recompute forms it here instead of in a forward kernel of its own).
  void* y = nullptr;
};
cudaError_t LaunchSwiGluBackward(const SwiGluBackwardArgs& args, cudaStream_t stream);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_FUSED_OPS_KERNEL_H_

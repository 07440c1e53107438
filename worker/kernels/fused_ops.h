#ifndef VERL_WORKER_KERNELS_FUSED_OPS_H_
#define VERL_WORKER_KERNELS_FUSED_OPS_H_

// ATen face of the fused RMSNorm, RoPE and SwiGLU kernels (fused_ops_kernel.h); built only with VERL_WITH_CUDA.
// Each is differentiable (an autograd function whose backward runs the fused backward kernel) and runs the plain
// forward kernel where no input needs a gradient, so that the rollout, the trainer's no-grad log-prob passes, its
// training forward and a checkpointed layer's recompute all run the same forward kernels.

#include <ATen/ATen.h>

#include <utility>
#include <vector>

namespace verl::kernels {

// x [..., hidden] contiguous, weight [hidden], both on one CUDA device in float32, bfloat16 or float16.
bool RmsNormSupported(const at::Tensor& x, const at::Tensor& weight);
// HF's Qwen2/Llama RMSNorm: weight * to_dtype(float(x) * rsqrt(mean(float(x)^2, -1) + eps)).
// With `x_again`: *x_again is x once more, for x's other uses (a residual stream's), as an output of the norm's node
// where gradients flow, so the gradient of those uses is added inside the norm's backward kernel (rounded as
// autograd's add of the two would be) instead of by an add kernel of its own; without gradients, x itself.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps, at::Tensor* x_again = nullptr);

// x [B, H, T, D] with contiguous rows of D, dense (any order of the other dimensions) or a view of token rows (each
// token's heads adjacent, tokens further apart: SplitHeads of a column range of a stacked q/k/v projection), cos and
// sin [B, 1, T, D] contiguous, one dtype.
bool RopeSupported(const at::Tensor& x, const at::Tensor& cos);
// x * cos + rotate_half(x) * sin, rounded as those ATen ops round; the result has x's strides where x is dense, else
// [B, T, H, D] memory order (as SplitHeads of a [B, T, H * D] projection). Differentiable in x
// only (cos and sin are functions of positions); the backward assumes HF's cos/sin, whose two halves are equal.
at::Tensor Rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Shared-prompt attention's rows straight from the stacked q/k/v projection (PackedSequences' maps, decoder_model.h):
// qkv [T, (q_heads + 2 * kv_heads) * head_dim] with unit column stride (its rows may lie further apart), cos and sin
// [T, head_dim] contiguous, one dtype, one CUDA device; the maps int64 on that device.
bool SharedPromptRowsSupported(const at::Tensor& qkv, const at::Tensor& cos, int64_t q_heads, int64_t kv_heads,
                               int64_t head_dim);
// {q_rows [R, q_heads, D], k_rows [R, kv_heads, D], v_rows [R, kv_heads, D]} contiguous, R = row_index's size: q_rows[r]
// is RoPE of token row_source[r]'s query (zeros where it is -1), k_rows[r] RoPE of token row_index[r]'s key, v_rows[r]
// its value. One kernel each for what Rope of q and k, a copy of v, then ScatterDistinct and two GatherRepeated do
// (decoder_model.cc), the same values bit for bit. Differentiable in qkv: the backward writes the three gradients side
// by side into one [T, ...] tensor, a kernel each (q's rows gathered by row_output, k's and v's summed over
// key_offsets/key_positions as SumRows sums them, q's and k's rotated back as Rope's backward), the bits of that
// composition's backward.
std::vector<at::Tensor> SharedPromptRows(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                                         int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                         const at::Tensor& row_source, const at::Tensor& row_index,
                                         const at::Tensor& row_output, const at::Tensor& key_offsets,
                                         const at::Tensor& key_positions);

// One decoding step (one token per slot, no gradients): q, k, v [B, H, 1, D] with contiguous heads of D (the views of
// the projections), cos and sin [B, 1, 1, D] contiguous, the caches [S, Hkv, C, D] contiguous, rows int64 [B * Hkv].
bool RopeAppendSupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                         const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& rows);
// Rope(q) as [B, Hq, D], with rows[b * Hkv + h] of the caches viewed as [-1, D] set to Rope(k)[b, h, 0] and v[b, h, 0]
// - one kernel for what two Rope calls and two index_copy_ calls do, the same values bit for bit.
at::Tensor RopeAppend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                      const at::Tensor& sin, const at::Tensor& k_cache, const at::Tensor& v_cache,
                      const at::Tensor& rows);
// RopeAppend with the layer's input RMSNorm folded into the projection (DecoderModel::FoldedQkvWeights): q, k, v are
// projections of the un-normed residual norm_x [B, 1, hidden] (rows contiguous) by weights whose columns the norm's
// weight scaled, without bias; each value is first to_dtype(rsqrt(mean(norm_x[b]^2) + eps) * x + bias) (bias: the
// stacked q, k, v biases, or undefined). What RmsNorm, a projection with bias and RopeAppend compute, to rounding.
bool RopeAppendNormedSupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                               const at::Tensor& k_cache, const at::Tensor& v_cache, const at::Tensor& rows,
                               const at::Tensor& norm_x, const at::Tensor& bias);
at::Tensor RopeAppendNormed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                            const at::Tensor& sin, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& rows, const at::Tensor& norm_x, double eps, const at::Tensor& bias);

// x and residual of one shape, contiguous; weight as RmsNorm's.
bool AddRmsNormSupported(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight);
// RmsNorm(x + residual) with *sum = x + residual (rounded as ATen's add): one kernel for the add and the norm, the
// same values bit for bit. Differentiable: one kernel for the norm's backward and the add of the sum's gradient from
// its other uses (rounded as autograd sums the two), which is x's and residual's gradient.
at::Tensor AddRmsNorm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, double eps,
                      at::Tensor* sum);
// gate_up [..., 2I] contiguous: the output of one GEMM over the stacked gate and up projections.
bool SwiGluStackedSupported(const at::Tensor& gate_up);
// SwiGlu(gate_up[..., :I], gate_up[..., I:]) as [..., I] without splitting the input: the same values bit for bit.
// Differentiable: the gradient is stacked as gate_up, each half SwiGlu's gradient of its part, bit for bit.
at::Tensor SwiGluStacked(const at::Tensor& gate_up);
// SwiGluStacked's backward for the output gradient dy [..., I] (not through autograd): {the stacked gradient [..., 2I],
// SwiGluStacked(gate_up)}, both as SwiGluStacked and its backward give them, bit for bit, from one kernel (a
// checkpointed layer's recompute: CheckpointFunction).
std::pair<at::Tensor, at::Tensor> SwiGluStackedBackwardWithValue(const at::Tensor& gate_up, const at::Tensor& dy);

// SwiGluStacked with the RMSNorm before the MLP folded into the stacked gate/up projection
// (DecoderModel::FoldedGateUpWeights): gate_up [B, 1, 2I] contiguous is the projection of the un-normed residual norm_x
// [B, 1, hidden] (its last dimension contiguous) by weights whose columns the norm's weight scaled; each value is first
// to_dtype(rsqrt(mean(norm_x[b]^2) + eps) * x), RopeAppendNormed's formula for the scale, and silu runs on the
// special-function unit (exp2 and a reciprocal, within 2 ulp in float32). What RmsNorm, the gate/up projection and
// SwiGluStacked compute, to rounding.
bool SwiGluStackedNormedSupported(const at::Tensor& gate_up, const at::Tensor& norm_x);
at::Tensor SwiGluStackedNormed(const at::Tensor& gate_up, const at::Tensor& norm_x, double eps);

// gate and up of one shape, contiguous, on one CUDA device in one of the three dtypes.
bool SwiGluSupported(const at::Tensor& gate, const at::Tensor& up);
// silu(gate) * up as the HF MLP computes it (each op rounded to the dtype).
at::Tensor SwiGlu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_FUSED_OPS_H_

#ifndef VERL_WORKER_KERNELS_LOG_PROBS_H_
#define VERL_WORKER_KERNELS_LOG_PROBS_H_

// ATen face of the token log-prob / entropy kernels (log_probs_kernel.h); built only with VERL_WITH_CUDA. Used by
// ChunkedLogProbs on each chunk of the LM head's logits; no autograd of its own (ChunkedLogProbs is the function).

#include <ATen/ATen.h>

namespace verl::kernels {

// logits [rows, vocab] contiguous on a CUDA device in float32, bfloat16 or float16.
bool TokenLogProbsSupported(const at::Tensor& logits);

struct TokenLogProbsResult {
  at::Tensor log_probs;  // [rows] float32
  at::Tensor entropy;    // [rows] float32
  at::Tensor lse;        // [rows] float32: logsumexp(logits / temperature)
};
// targets [rows] int64.
TokenLogProbsResult TokenLogProbs(const at::Tensor& logits, const at::Tensor& targets, double temperature);
// The same into given float32 [rows] contiguous tensors on the logits' device (e.g. slices of a whole batch's).
void TokenLogProbsInto(const at::Tensor& logits, const at::Tensor& targets, double temperature,
                       const TokenLogProbsResult& out);

// The gradient w.r.t. the logits, in their dtype, written over `logits` (which the caller no longer needs).
// lse and entropy from the forward; grad_log_probs and grad_entropy [rows] (either may be
// undefined: no gradient).
void TokenLogProbsBackwardInPlace(at::Tensor& logits, const at::Tensor& targets, const at::Tensor& lse,
                                  const at::Tensor& entropy, const at::Tensor& grad_log_probs,
                                  const at::Tensor& grad_entropy, double temperature);

// c += a^T b with the sum in float32: a [k, m] and b [k, n] contiguous, both bfloat16 or both float16; c [m, n]
// contiguous float32; all on one CUDA device. One cuBLAS GEMM with beta 1 (ATen's addmm with out_dtype float32,
// accumulated in place): the LM head's weight gradient summed over ChunkedLogProbs' chunks without rounding each
// chunk's part to bf16 or a separate add.
void AddTransposedMatmulFloat(at::Tensor& c, const at::Tensor& a, const at::Tensor& b);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_LOG_PROBS_H_

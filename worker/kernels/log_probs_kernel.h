#ifndef VERL_WORKER_KERNELS_LOG_PROBS_KERNEL_H_
#define VERL_WORKER_KERNELS_LOG_PROBS_KERNEL_H_

// Launch interfaces of the token log-prob / entropy kernels for the trainer (ChunkedLogProbs), free of LibTorch
// (the ATen-facing wrapper is log_probs.h). They read the LM head's logits in their own dtype once per row, where the
// ATen composition casts them to float32 and runs eight to twelve passes over [rows, vocab] float32 tensors.
//
// With z = float(logits) * (1 / temperature) (ATen's CUDA division by a scalar multiplies by its float reciprocal),
// p = softmax(z), lse = logsumexp(z):
//   forward:  log_prob = z[target] - lse, entropy = lse - sum(p * z) (storing lse and entropy for the backward);
//   backward: d logits = to_dtype((g_lp * (onehot(target) - p) - g_ent * p * (z - lse + entropy)) / temperature).
// The entropy is summed relative to the row's maximum (sum p * (z - max)), not as lse - sum(p * z) of two numbers near
// the maximum logit: a peaked row then keeps its small entropy, and the backward's z - sum(p * z), to float precision.

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/kernel_dtype.h"

namespace verl::kernels {

struct TokenLogProbsArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  const void* logits = nullptr;     // [rows, vocab], contiguous
  const int64_t* targets = nullptr;  // [rows]
  float* log_probs = nullptr;        // [rows]; NaN where the target is outside the vocabulary
  float* entropy = nullptr;          // [rows]
  float* lse = nullptr;              // [rows]
  int rows = 0;
  int vocab = 0;
  float temperature = 1.0f;
};
cudaError_t LaunchTokenLogProbs(const TokenLogProbsArgs& args, cudaStream_t stream);

struct TokenLogProbsBackwardArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  const void* logits = nullptr;     // [rows, vocab], contiguous
  const int64_t* targets = nullptr;  // [rows]
  const float* lse = nullptr;        // [rows], from the forward
  const float* entropy = nullptr;    // [rows], from the forward
  const float* grad_log_probs = nullptr;  // [rows], or null (no gradient)
  const float* grad_entropy = nullptr;    // [rows], or null (no gradient)
  void* grad_logits = nullptr;  // [rows, vocab] in the logits' dtype; may be `logits` itself (read before written)
  int rows = 0;
  int vocab = 0;
  float temperature = 1.0f;
};
cudaError_t LaunchTokenLogProbsBackward(const TokenLogProbsBackwardArgs& args, cudaStream_t stream);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_LOG_PROBS_KERNEL_H_

#ifndef VERL_WORKER_TRAIN_CHUNKED_LOG_PROBS_H_
#define VERL_WORKER_TRAIN_CHUNKED_LOG_PROBS_H_

// Log-probs (and entropy) of target tokens from the final hidden states, without ever holding the [tokens, vocab]
// logits of a whole micro-batch: the LM head, softmax and gather run on a chunk of tokens at a time, in forward and
// again (recomputed) in backward, where the gradients of the hidden states and of the LM head are formed chunk by
// chunk. With a 152k vocabulary the full float32 logits of 32 x 128 tokens are 2.5 GB, and autograd keeps several
// tensors of that size; here the peak is a few chunk-sized ones (verl: entropy_from_logits_with_chunking, and the
// fused-kernel log-prob path).
//
// The numbers are those of the plain path: logits = linear(hidden, weight) in the weight's dtype, then float32,
// divided by the temperature; log_prob = logit[target] - logsumexp; entropy = logsumexp - sum(softmax * logits).
// On a GPU (VERL_WITH_CUDA) the softmax statistics and the gradient w.r.t. the logits come from fused kernels
// (worker/kernels/log_probs.h) that read each chunk's logits in their dtype; the entropy is summed there relative to
// the row's maximum, which keeps a peaked row's small entropy to float precision.

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <utility>

namespace verl {

struct ChunkedLogProbsResult {
  at::Tensor log_probs;  // float32, shaped like targets
  at::Tensor entropy;    // float32, shaped like targets; undefined unless asked for
};

// hidden [..., H] (any float dtype), weight [V, H] (the LM head, hidden's dtype), targets [...] int64. Records
// autograd history to hidden and weight when grad mode is on. `chunk_tokens` <= 0 picks chunks of 1 GiB of logits (in
// the weight's dtype for the GPU's fused kernels, float32 on the ATen path).
ChunkedLogProbsResult ChunkedLogProbs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                      double temperature, bool with_entropy, int64_t chunk_tokens = 0);

// The gradient of a loss that is a sum of per-token terms, each a function of its own token's log-prob and entropy,
// for the flattened targets' tokens [begin, begin + n): given their log-probs and entropies (float32 [n], no history),
// {d loss / d log_prob, d loss / d entropy} (float32 [n]; the second undefined without an entropy term). Called with
// grad mode off; it may enable it to differentiate the terms.
using TokenLossGrad = std::function<std::pair<at::Tensor, at::Tensor>(int64_t begin, const at::Tensor& log_probs,
                                                                      const at::Tensor& entropy)>;

struct ChunkedLossGradResult {
  at::Tensor log_probs;  // float32, shaped like targets, no history
  at::Tensor entropy;    // float32, shaped like targets, no history
  // A zero scalar whose backward delivers the loss's gradients to hidden and weight: backward() it (or add it to what
  // is backpropagated) once. Its upstream gradient scales them.
  at::Tensor anchor;
};

// ChunkedLogProbs (with entropy) for a loss whose gradient `token_grad` gives token by token: each chunk's gradients
// w.r.t. hidden and weight are formed in the forward, while its logits are at hand, instead of recomputing the logits
// in backward, so the LM head's GEMM runs three times per token instead of four (Liger's fused linear cross entropy
// does the same for cross entropy). The gradients wait (hidden's in its dtype, weight's in float32) for the anchor's
// backward, which hands them on and lets them go (it runs once). The log-probs and entropy are ChunkedLogProbs' bit for
// bit; the gradients are those of backpropagating the loss through ChunkedLogProbs, but for the rounding of the
// per-token gradients (the same ops on the same values).
ChunkedLossGradResult ChunkedLogProbsWithGrad(const at::Tensor& hidden, const at::Tensor& weight,
                                              const at::Tensor& targets, double temperature,
                                              const TokenLossGrad& token_grad, int64_t chunk_tokens = 0);

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_CHUNKED_LOG_PROBS_H_

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

namespace verl {

struct ChunkedLogProbsResult {
  at::Tensor log_probs;  // float32, shaped like targets
  at::Tensor entropy;    // float32, shaped like targets; undefined unless asked for
};

// hidden [..., H] (any float dtype), weight [V, H] (the LM head, hidden's dtype), targets [...] int64. Records
// autograd history to hidden and weight when grad mode is on. `chunk_tokens` <= 0 picks chunks of about 2^28 logits.
ChunkedLogProbsResult ChunkedLogProbs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                      double temperature, bool with_entropy, int64_t chunk_tokens = 0);

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_CHUNKED_LOG_PROBS_H_

#ifndef VERL_WORKER_KERNELS_SAMPLING_H_
#define VERL_WORKER_KERNELS_SAMPLING_H_

// ATen face of the fused sampling kernel (sampling_kernel.h); built only with VERL_WITH_CUDA.

#include <ATen/ATen.h>

namespace verl::kernels {

// Whether SampleTokens takes `logits`: [rows, vocab] on a CUDA device, float32, bfloat16 or float16, rows contiguous,
// vocab at most 2^30.
bool SampleTokensSupported(const at::Tensor& logits);

// For each row of `logits`: the first argmax of logits / temperature (greedy), or the token where the cumulative
// softmax(logits / temperature) first exceeds uniforms[row] (float64 [rows] on the same device) times the total
// (plain logits when temperature <= 0), over the tokens that top-k (`top_k` > 0) and top-p (`top_p` < 1) keep when
// sampling: the tokens at or above the k-th largest value, then among them those whose mass of strictly larger values
// is at most top_p of theirs (tokens of equal value kept or dropped together; sampling_kernel.h). Writes the token's
// log-prob under the unfiltered softmax (float32 [rows]) to *log_probs; returns the tokens (int64 [rows]). Runs on
// the current stream without synchronising.
at::Tensor SampleTokens(const at::Tensor& logits, double temperature, bool greedy, int64_t top_k, double top_p,
                        const at::Tensor& uniforms, at::Tensor* log_probs);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_SAMPLING_H_

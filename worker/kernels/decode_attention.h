#ifndef VERL_WORKER_KERNELS_DECODE_ATTENTION_H_
#define VERL_WORKER_KERNELS_DECODE_ATTENTION_H_

// ATen face of the CUDA decode attention kernel (decode_attention_kernel.h); built only with VERL_WITH_CUDA.

#include <ATen/ATen.h>

namespace verl::kernels {

// Whether DecodeAttention takes a query like `q` ([B, Hq, D]) over a cache like `k_cache` ([S, Hkv, C, D]): both on
// a CUDA device, float32, bfloat16 or float16, head_dim 64 or 128, at most 8 query heads per KV head, the cache's
// last two dimensions contiguous and every slot and head 16-byte aligned.
bool DecodeAttentionSupported(const at::Tensor& q, const at::Tensor& k_cache);

// softmax(q k^T * scale) v for each slot b < B over its positions [0, lengths[b]) of k_cache[b], v_cache[b] (rows
// >= B of the caches are not read). `lengths` is int32 [B] on q's device. Returns [B, Hq, D] in q's dtype (zeros for a
// length of 0). Runs on the current CUDA stream without synchronising (CUDA-graph safe). bfloat16 and float16 run on
// the tensor cores unless `tensor_cores` is false (the SIMT kernel, which float32 always takes: tests compare the two).
// Shared prompts: with `prefix_slots` and `prefix_lengths` (int32 [B] on q's device, both or neither), slot b reads its
// positions [0, prefix_lengths[b]) from slot prefix_slots[b] (which must be < B) instead of its own, as if they had
// been copied there.
at::Tensor DecodeAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& lengths, double scale, bool tensor_cores = true,
                           const at::Tensor& prefix_slots = {}, const at::Tensor& prefix_lengths = {});

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_DECODE_ATTENTION_H_

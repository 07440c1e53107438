#ifndef VERL_WORKER_KERNELS_DECODE_ATTENTION_KERNEL_H_
#define VERL_WORKER_KERNELS_DECODE_ATTENTION_KERNEL_H_

// The CUDA decode attention kernel's launch interface, free of LibTorch (nvcc compiles only decode_attention.cu; the
// ATen-facing wrapper is decode_attention.h).
//
// One new query token per sequence slot attends over that slot's cached keys and values (grouped-query attention:
// query heads [g * G, (g + 1) * G) share KV head g). Flash-decoding: the positions of a slot are cut into `splits`
// ranges, each reduced with an online softmax by one thread block per (slot, KV head, range); a second kernel merges
// the ranges. The split count depends only on the shapes, so a launch can be captured in a CUDA graph and replayed
// for any lengths.

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/kernel_dtype.h"

namespace verl::kernels {

// Which kernel reduces the positions: kAuto takes the tensor-core kernel for bfloat16 / float16 and the SIMT kernel
// for float32 (the only one that takes it); the others force one (the micro-benchmark compares them).
enum class DecodeAttentionImpl { kAuto, kSimt, kTensorCore };

struct DecodeAttentionArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;
  DecodeAttentionImpl impl = DecodeAttentionImpl::kAuto;
  const void* q = nullptr;  // [B, Hq, D], contiguous
  const void* k = nullptr;  // element (b, h, t, d) at b * kv_stride_b + h * kv_stride_h + t * D + d
  const void* v = nullptr;  // same layout as k
  int64_t kv_stride_b = 0;
  int64_t kv_stride_h = 0;
  const int32_t* lengths = nullptr;  // [B]: slot b attends to positions [0, lengths[b]); 0 gives zeros
  // Shared prompts (optional, both or neither): positions [0, prefix_lengths[b]) of slot b are read from slot
  // prefix_slots[b] (< B) instead, so the n samples of a prompt read its keys and values where one of them holds them.
  const int32_t* prefix_slots = nullptr;    // [B]
  const int32_t* prefix_lengths = nullptr;  // [B]
  void* out = nullptr;               // [B, Hq, D], contiguous, dtype of q
  float* partial = nullptr;          // splits > 1: [B, Hq, splits, D + 2] float32 workspace
  int batch = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // 64 or 128
  int capacity = 0;  // positions per slot in the cache
  int splits = 1;
  float scale = 1.0f;
};

// Whether the kernel takes these shapes (head_dim 64 or 128, at most 8 query heads per KV head).
bool DecodeAttentionShapeSupported(int q_heads, int kv_heads, int head_dim);
// The split count for a launch: enough blocks to fill `num_sms` twice over, at least 128 positions per range.
int DecodeAttentionSplits(int batch, int kv_heads, int capacity, int num_sms);
// Launches on `stream`; returns the launch error, if any (cudaErrorInvalidValue for a float32 tensor-core launch).
cudaError_t LaunchDecodeAttention(const DecodeAttentionArgs& args, cudaStream_t stream);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_DECODE_ATTENTION_KERNEL_H_

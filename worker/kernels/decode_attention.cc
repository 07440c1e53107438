#include "worker/kernels/decode_attention.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <array>
#include <atomic>

#include "worker/kernels/aten_dtype.h"
#include "worker/kernels/decode_attention_kernel.h"

namespace verl::kernels {
namespace {

// Streaming multiprocessors of `device`, asked once per device (an eager decoding step launches the kernel once per
// layer). ATen's CUDAContext.h, which caches device properties, would pull in the cuBLAS/cuSPARSE headers.
int MultiProcessorCount(int device) {
  static std::array<std::atomic<int>, 64> known{};  // 0: not asked yet
  if (device >= 0 && device < static_cast<int>(known.size())) {
    if (const int n = known[device].load(std::memory_order_relaxed); n > 0) return n;
  }
  int count = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  if (device >= 0 && device < static_cast<int>(known.size())) known[device].store(count, std::memory_order_relaxed);
  return count;
}

}  // namespace

bool DecodeAttentionSupported(const at::Tensor& q, const at::Tensor& k_cache) {
  KernelDtype dtype;
  return q.is_cuda() && k_cache.device() == q.device() && q.dim() == 3 && k_cache.dim() == 4 &&
         q.scalar_type() == k_cache.scalar_type() && KernelDtypeOf(q.scalar_type(), &dtype) &&
         q.size(2) == k_cache.size(3) && k_cache.stride(3) == 1 && k_cache.stride(2) == k_cache.size(3) &&
         reinterpret_cast<uintptr_t>(k_cache.data_ptr()) % 16 == 0 &&
         // Every slot's and head's rows start 16-byte aligned too (the kernels load 16-byte pieces of them).
         k_cache.stride(0) * k_cache.element_size() % 16 == 0 && k_cache.stride(1) * k_cache.element_size() % 16 == 0 &&
         DecodeAttentionShapeSupported(static_cast<int>(q.size(1)), static_cast<int>(k_cache.size(1)),
                                       static_cast<int>(q.size(2)));
}

at::Tensor DecodeAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& lengths, double scale, bool tensor_cores, const at::Tensor& prefix_slots,
                           const at::Tensor& prefix_lengths) {
  TORCH_CHECK(DecodeAttentionSupported(q, k_cache) && DecodeAttentionSupported(q, v_cache),
              "DecodeAttention: unsupported query ", q.sizes(), " ", q.scalar_type(), " or cache ", k_cache.sizes(),
              " (want CUDA float32/bfloat16/float16, head_dim 64 or 128, at most 8 query heads per KV head)");
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes() && k_cache.strides() == v_cache.strides(),
              "DecodeAttention: key and value caches differ in layout");
  const int64_t B = q.size(0);
  TORCH_CHECK(k_cache.size(0) >= B, "DecodeAttention: ", B, " queries but ", k_cache.size(0), " cache rows");
  TORCH_CHECK(
      lengths.scalar_type() == at::kInt && lengths.dim() == 1 && lengths.size(0) == B && lengths.device() == q.device(),
      "DecodeAttention: lengths must be int32 [", B, "] on ", q.device());
  TORCH_CHECK(prefix_slots.defined() == prefix_lengths.defined(),
              "DecodeAttention: prefix_slots and prefix_lengths go together");
  for (const at::Tensor* t : {&prefix_slots, &prefix_lengths}) {
    TORCH_CHECK(!t->defined() || (t->scalar_type() == at::kInt && t->dim() == 1 && t->size(0) == B &&
                                  t->device() == q.device() && t->is_contiguous()),
                "DecodeAttention: prefix_slots and prefix_lengths must be contiguous int32 [", B, "] on ", q.device());
  }
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor qc = q.contiguous();
  at::Tensor lens = lengths.contiguous();
  at::Tensor out = at::empty_like(qc);
  DecodeAttentionArgs a;
  KernelDtypeOf(q.scalar_type(), &a.dtype);
  a.q = qc.data_ptr();
  a.k = k_cache.data_ptr();
  a.v = v_cache.data_ptr();
  a.kv_stride_b = k_cache.stride(0);
  a.kv_stride_h = k_cache.stride(1);
  a.lengths = lens.data_ptr<int32_t>();
  if (prefix_slots.defined()) {
    a.prefix_slots = prefix_slots.data_ptr<int32_t>();
    a.prefix_lengths = prefix_lengths.data_ptr<int32_t>();
  }
  a.out = out.data_ptr();
  a.batch = static_cast<int>(B);
  a.q_heads = static_cast<int>(q.size(1));
  a.kv_heads = static_cast<int>(k_cache.size(1));
  a.head_dim = static_cast<int>(q.size(2));
  a.capacity = static_cast<int>(k_cache.size(2));
  a.scale = static_cast<float>(scale);
  a.impl = tensor_cores ? DecodeAttentionImpl::kAuto : DecodeAttentionImpl::kSimt;
  a.splits = DecodeAttentionSplits(a.batch, a.kv_heads, a.capacity, MultiProcessorCount(q.device().index()));
  at::Tensor partial;
  if (a.splits > 1) {
    partial = at::empty({B, q.size(1), a.splits, q.size(2) + 2}, q.options().dtype(at::kFloat));
    a.partial = partial.data_ptr<float>();
  }
  C10_CUDA_CHECK(LaunchDecodeAttention(a, c10::cuda::getCurrentCUDAStream()));
  return out;
}

}  // namespace verl::kernels

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
  return q.is_cuda() && k_cache.is_cuda() && q.dim() == 3 && k_cache.dim() == 4 &&
         q.scalar_type() == k_cache.scalar_type() && KernelDtypeOf(q.scalar_type(), &dtype) &&
         q.size(2) == k_cache.size(3) && k_cache.stride(3) == 1 && k_cache.stride(2) == k_cache.size(3) &&
         reinterpret_cast<uintptr_t>(k_cache.data_ptr()) % 16 == 0 &&
         DecodeAttentionShapeSupported(static_cast<int>(q.size(1)), static_cast<int>(k_cache.size(1)),
                                       static_cast<int>(q.size(2)));
}

namespace {

// Sets the launch's shape fields from the caches, its split count and workspace, and launches on the current stream.
void LaunchOverCaches(DecodeAttentionArgs& a, const at::Tensor& k_cache, const at::Tensor& v_cache,
                      const at::Tensor& lengths, const at::Tensor& out, int64_t B, int64_t q_heads, double scale) {
  KernelDtypeOf(out.scalar_type(), &a.dtype);
  a.k = k_cache.data_ptr();
  a.v = v_cache.data_ptr();
  a.kv_stride_b = k_cache.stride(0);
  a.kv_stride_h = k_cache.stride(1);
  a.lengths = lengths.data_ptr<int32_t>();
  a.out = out.data_ptr();
  a.batch = static_cast<int>(B);
  a.q_heads = static_cast<int>(q_heads);
  a.kv_heads = static_cast<int>(k_cache.size(1));
  a.head_dim = static_cast<int>(k_cache.size(3));
  a.capacity = static_cast<int>(k_cache.size(2));
  a.scale = static_cast<float>(scale);
  a.splits = DecodeAttentionSplits(a.batch, a.kv_heads, a.capacity, MultiProcessorCount(out.device().index()));
  at::Tensor partial;
  if (a.splits > 1) {
    partial = at::empty({B, q_heads, a.splits, k_cache.size(3) + 2}, out.options().dtype(at::kFloat));
    a.partial = partial.data_ptr<float>();
  }
  C10_CUDA_CHECK(LaunchDecodeAttention(a, c10::cuda::getCurrentCUDAStream()));
}

void CheckLengths(const at::Tensor& lengths, int64_t B, const at::Tensor& like) {
  TORCH_CHECK(
      lengths.scalar_type() == at::kInt && lengths.dim() == 1 && lengths.size(0) == B && lengths.device() == like.device(),
      "DecodeAttention: lengths must be int32 [", B, "] on ", like.device());
}

}  // namespace

at::Tensor DecodeAttention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& lengths, double scale, bool tensor_cores) {
  TORCH_CHECK(DecodeAttentionSupported(q, k_cache) && DecodeAttentionSupported(q, v_cache),
              "DecodeAttention: unsupported query ", q.sizes(), " ", q.scalar_type(), " or cache ", k_cache.sizes(),
              " (want CUDA float32/bfloat16/float16, head_dim 64 or 128, at most 8 query heads per KV head)");
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes() && k_cache.strides() == v_cache.strides(),
              "DecodeAttention: key and value caches differ in layout");
  const int64_t B = q.size(0);
  TORCH_CHECK(k_cache.size(0) >= B, "DecodeAttention: ", B, " queries but ", k_cache.size(0), " cache rows");
  CheckLengths(lengths, B, q);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor qc = q.contiguous();
  at::Tensor lens = lengths.contiguous();
  at::Tensor out = at::empty_like(qc);
  DecodeAttentionArgs a;
  a.q = qc.data_ptr();
  a.impl = tensor_cores ? DecodeAttentionImpl::kAuto : DecodeAttentionImpl::kSimt;
  LaunchOverCaches(a, k_cache, v_cache, lens, out, B, q.size(1), scale);
  return out;
}

bool DecodeAttentionRopeSupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                                  const at::Tensor& sin, const at::Tensor& k_cache, const at::Tensor& v_cache) {
  if (!q.is_cuda() || (q.scalar_type() != at::kBFloat16 && q.scalar_type() != at::kHalf) || q.dim() != 4) {
    return false;
  }
  const int64_t B = q.size(0), D = q.size(3);
  auto step_heads = [&](const at::Tensor& x) {  // [B, H, 1, D], heads of D contiguous
    return x.dim() == 4 && x.device() == q.device() && x.scalar_type() == q.scalar_type() && x.size(0) == B &&
           x.size(2) == 1 && x.size(3) == D && x.stride(3) == 1 && x.stride(1) == D;
  };
  auto cache = [&](const at::Tensor& c) {
    return c.dim() == 4 && c.device() == q.device() && c.scalar_type() == q.scalar_type() && c.is_contiguous() &&
           c.size(0) >= B && c.size(1) == k.size(1) && c.size(3) == D &&
           reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0;
  };
  auto table = [&](const at::Tensor& t) {  // cos or sin: [B, D] values, contiguous
    return t.device() == q.device() && t.scalar_type() == q.scalar_type() && t.is_contiguous() && t.numel() == B * D;
  };
  return step_heads(q) && step_heads(k) && step_heads(v) && v.size(1) == k.size(1) && table(cos) && table(sin) &&
         cache(k_cache) && cache(v_cache) && k_cache.sizes() == v_cache.sizes() &&
         DecodeAttentionShapeSupported(static_cast<int>(q.size(1)), static_cast<int>(k.size(1)), static_cast<int>(D));
}

at::Tensor DecodeAttentionRope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
                               const at::Tensor& sin, const at::Tensor& k_cache, const at::Tensor& v_cache,
                               const at::Tensor& lengths, double scale) {
  TORCH_CHECK(DecodeAttentionRopeSupported(q, k, v, cos, sin, k_cache, v_cache),
              "DecodeAttentionRope: unsupported query ", q.sizes(), " ", q.scalar_type(), ", key ", k.sizes(),
              " or cache ", k_cache.sizes(), " (want CUDA bfloat16/float16 [B, H, 1, D] step views)");
  const int64_t B = q.size(0);
  CheckLengths(lengths, B, q);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor lens = lengths.contiguous();
  at::Tensor out = at::empty({B, q.size(1), q.size(3)}, q.options());
  DecodeAttentionArgs a;
  a.impl = DecodeAttentionImpl::kTensorCore;
  a.q_pre = q.data_ptr();
  a.k_new = k.data_ptr();
  a.v_new = v.data_ptr();
  a.q_pre_stride_b = q.stride(0);
  a.k_new_stride_b = k.stride(0);
  a.v_new_stride_b = v.stride(0);
  a.cos = cos.data_ptr();
  a.sin = sin.data_ptr();
  LaunchOverCaches(a, k_cache, v_cache, lens, out, B, q.size(1), scale);
  return out;
}

}  // namespace verl::kernels

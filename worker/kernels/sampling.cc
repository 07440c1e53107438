#include "worker/kernels/sampling.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <limits>

#include "worker/kernels/aten_dtype.h"
#include "worker/kernels/sampling_kernel.h"

namespace verl::kernels {

bool SampleTokensSupported(const at::Tensor& logits) {
  KernelDtype dtype;
  return logits.is_cuda() && logits.dim() == 2 && logits.stride(1) == 1 &&
         KernelDtypeOf(logits.scalar_type(), &dtype) && logits.size(0) <= std::numeric_limits<int>::max() &&
         logits.size(1) > 0 && logits.size(1) <= (int64_t{1} << 30);  // the kernel's segment arithmetic is 32-bit
}

at::Tensor SampleTokens(const at::Tensor& logits, double temperature, bool greedy, int64_t top_k, double top_p,
                        const at::Tensor& uniforms, at::Tensor* log_probs) {
  TORCH_CHECK(SampleTokensSupported(logits), "SampleTokens: unsupported logits ", logits.sizes(), " ",
              logits.scalar_type(), " on ", logits.device());
  const int64_t rows = logits.size(0);
  at::Tensor u;
  if (!greedy) {
    TORCH_CHECK(uniforms.numel() == rows && uniforms.device() == logits.device(),
                "SampleTokens: want ", rows, " uniforms on ", logits.device());
    u = uniforms.to(at::kDouble).contiguous();
  }
  const c10::cuda::CUDAGuard guard(logits.device());
  at::Tensor tokens = at::empty({rows}, logits.options().dtype(at::kLong));
  at::Tensor lp = at::empty({rows}, logits.options().dtype(at::kFloat));
  SampleArgs a;
  KernelDtypeOf(logits.scalar_type(), &a.dtype);
  a.logits = logits.data_ptr();
  a.row_stride = logits.stride(0);
  a.uniforms = greedy ? nullptr : u.data_ptr<double>();
  a.tokens = tokens.data_ptr<int64_t>();
  a.log_probs = lp.data_ptr<float>();
  a.rows = static_cast<int>(rows);
  a.vocab = static_cast<int>(logits.size(1));
  a.temperature = static_cast<float>(temperature);
  a.greedy = greedy;
  // top_k at or past the vocabulary keeps everything, as does top_p >= 1.
  a.top_k = top_k > 0 && top_k < logits.size(1) ? static_cast<int>(top_k) : 0;
  a.top_p = top_p < 1.0 ? static_cast<float>(top_p) : 1.0f;
  C10_CUDA_CHECK(LaunchSample(a, c10::cuda::getCurrentCUDAStream()));
  if (log_probs) *log_probs = lp;
  return tokens;
}

}  // namespace verl::kernels

#include "worker/kernels/fused_ops.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <limits>

#include "worker/kernels/aten_dtype.h"
#include "worker/kernels/fused_ops_kernel.h"

namespace verl::kernels {
bool RmsNormSupported(const at::Tensor& x, const at::Tensor& weight) {
  KernelDtype dtype;
  return x.is_cuda() && weight.device() == x.device() && x.scalar_type() == weight.scalar_type() &&
         KernelDtypeOf(x.scalar_type(), &dtype) && x.dim() >= 1 && x.is_contiguous() && weight.dim() == 1 &&
         weight.is_contiguous() && x.size(-1) == weight.size(0) && x.size(-1) > 0 &&
         x.size(-1) <= std::numeric_limits<int>::max();
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(RmsNormSupported(x, weight), "fused RmsNorm: unsupported input ", x.sizes(), " ", x.scalar_type());
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  RmsNormArgs a;
  KernelDtypeOf(x.scalar_type(), &a.dtype);
  a.x = x.data_ptr();
  a.weight = weight.data_ptr();
  a.y = y.data_ptr();
  a.hidden = static_cast<int>(x.size(-1));
  a.rows = x.numel() / x.size(-1);
  a.eps = static_cast<float>(eps);
  C10_CUDA_CHECK(LaunchRmsNorm(a, c10::cuda::getCurrentCUDAStream()));
  return y;
}

bool RopeSupported(const at::Tensor& x, const at::Tensor& cos) {
  KernelDtype dtype;
  return x.is_cuda() && cos.device() == x.device() && x.scalar_type() == cos.scalar_type() &&
         KernelDtypeOf(x.scalar_type(), &dtype) && x.dim() == 4 && cos.dim() == 4 && x.stride(3) == 1 &&
         x.size(3) % 2 == 0 && cos.is_contiguous() && cos.size(0) == x.size(0) && cos.size(1) == 1 &&
         cos.size(2) == x.size(2) && cos.size(3) == x.size(3) && x.is_non_overlapping_and_dense() &&
         x.numel() <= std::numeric_limits<int>::max();
}

at::Tensor Rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  TORCH_CHECK(RopeSupported(x, cos) && sin.sizes() == cos.sizes() && sin.is_contiguous() &&
                  sin.scalar_type() == cos.scalar_type(),
              "fused Rope: unsupported input ", x.sizes(), " ", x.scalar_type());
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty_like(x);  // x's strides (dense, non-overlapping)
  TORCH_CHECK(y.strides() == x.strides(), "fused Rope: output strides differ from the input's");
  RopeArgs a;
  KernelDtypeOf(x.scalar_type(), &a.dtype);
  a.x = x.data_ptr();
  a.cos = cos.data_ptr();
  a.sin = sin.data_ptr();
  a.y = y.data_ptr();
  a.batch = static_cast<int>(x.size(0));
  a.heads = static_cast<int>(x.size(1));
  a.tokens = static_cast<int>(x.size(2));
  a.head_dim = static_cast<int>(x.size(3));
  a.stride_b = x.stride(0);
  a.stride_h = x.stride(1);
  a.stride_t = x.stride(2);
  C10_CUDA_CHECK(LaunchRope(a, c10::cuda::getCurrentCUDAStream()));
  return y;
}

}  // namespace verl::kernels

#include "worker/kernels/float_sums.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "worker/kernels/aten_dtype.h"
#include "worker/kernels/float_sums_kernel.h"

namespace verl::kernels {

bool FloatSumSupported(const at::Tensor& grad) {
  return grad.defined() && grad.is_cuda() && grad.is_contiguous() &&
         (grad.scalar_type() == at::kBFloat16 || grad.scalar_type() == at::kHalf);
}

void AddIntoFloatSums(std::vector<at::Tensor*> sums, const std::vector<at::Tensor>& grads) {
  TORCH_CHECK(sums.size() == grads.size(), "AddIntoFloatSums: ", sums.size(), " sums for ", grads.size(), " gradients");
  if (grads.empty()) return;
  const at::Device device = grads.front().device();
  // Every entry checked before any sum is made or written, so that an error leaves the sums as they were.
  for (size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& g = grads[i];
    TORCH_CHECK(FloatSumSupported(g) && g.device() == device, "AddIntoFloatSums: gradient ", i, " is ", g.scalar_type(),
                " on ", g.device(), (g.is_contiguous() ? "" : ", not contiguous"),
                "; bfloat16 or float16, contiguous, on ", device, " expected");
    const at::Tensor& sum = *sums[i];
    TORCH_CHECK(!sum.defined() || (sum.scalar_type() == at::kFloat && sum.is_contiguous() && sum.sizes() == g.sizes() &&
                                   sum.device() == device),
                "AddIntoFloatSums: sum ", i, " must be float32, contiguous, ", g.sizes(), " on ", device);
  }
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // One launch per dtype and per kFloatSumMaxEntries tensors.
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    FloatSumArgs a;
    KernelDtypeOf(dtype, &a.dtype);
    auto flush = [&] {
      C10_CUDA_CHECK(LaunchFloatSums(a, stream));
      a.count = 0;
      a.blocks = 0;
    };
    for (size_t i = 0; i < grads.size(); ++i) {
      const at::Tensor& g = grads[i];
      if (g.scalar_type() != dtype) continue;
      at::Tensor& sum = *sums[i];
      const bool copy = !sum.defined();
      if (copy) sum = at::empty(g.sizes(), g.options().dtype(at::kFloat));
      if (g.numel() == 0) continue;
      FloatSumEntry& e = a.entries[a.count++];
      e.sum = sum.data_ptr<float>();
      e.grad = g.data_ptr();
      e.n = g.numel();
      e.first_block = a.blocks;
      e.copy = copy ? 1 : 0;
      a.blocks += (e.n + kFloatSumBlockElements - 1) / kFloatSumBlockElements;
      if (a.count == kFloatSumMaxEntries) flush();
    }
    if (a.count > 0) flush();
  }
}

}  // namespace verl::kernels

#ifndef VERL_WORKER_KERNELS_FLOAT_SUMS_H_
#define VERL_WORKER_KERNELS_FLOAT_SUMS_H_

// ATen face of the float32 gradient sums (float_sums_kernel.h); built only with VERL_WITH_CUDA. A plain function (no
// autograd): GradAccumulator::Collect adds the micro-batches' low-precision gradients into their float32 sums with it.

#include <ATen/ATen.h>

#include <vector>

namespace verl::kernels {

// Whether AddIntoFloatSums takes grad: bfloat16 or float16, contiguous, on a CUDA device.
bool FloatSumSupported(const at::Tensor& grad);
// For each i: sums[i] += float(grads[i]), or, where sums[i] is undefined, sums[i] = grads[i] as float32 (a new tensor),
// the values sums[i].add_(grads[i]) and grads[i].to(float32) give, bit for bit, in one launch per 64 tensors of a
// dtype instead of one per tensor. grads[i] as FloatSumSupported, all on one device; a defined sums[i] float32,
// contiguous, of grads[i]'s shape.
void AddIntoFloatSums(std::vector<at::Tensor*> sums, const std::vector<at::Tensor>& grads);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_FLOAT_SUMS_H_

#ifndef VERL_WORKER_KERNELS_FLOAT_SUMS_KERNEL_H_
#define VERL_WORKER_KERNELS_FLOAT_SUMS_KERNEL_H_

// Launch interface of the float32 gradient sums (float_sums.cu; ATen face in float_sums.h): many tensors' bfloat16 or
// float16 gradients added into (or copied as) their float32 sums in one launch. Torch-free, as the other *_kernel.h.

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/kernel_dtype.h"

namespace verl::kernels {

// One tensor: sum[i] = copy ? float(grad[i]) : sum[i] + float(grad[i]) for i < n; its elements are those of blocks
// [first_block, first_block + ceil(n / kFloatSumBlockElements)) of the launch.
struct FloatSumEntry {
  float* sum = nullptr;
  const void* grad = nullptr;
  int64_t n = 0;
  int64_t first_block = 0;
  int copy = 0;
};

constexpr int kFloatSumMaxEntries = 64;  // per launch: the arguments stay within the 4 KB of a kernel's parameters
constexpr int64_t kFloatSumBlockElements = 8192;

struct FloatSumArgs {
  KernelDtype dtype = KernelDtype::kBFloat16;  // the gradients' (bfloat16 or float16)
  int count = 0;                               // entries, at most kFloatSumMaxEntries
  int64_t blocks = 0;                          // the last entry's first_block plus its blocks
  FloatSumEntry entries[kFloatSumMaxEntries];
};
cudaError_t LaunchFloatSums(const FloatSumArgs& args, cudaStream_t stream);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_FLOAT_SUMS_KERNEL_H_

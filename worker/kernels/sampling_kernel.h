#ifndef VERL_WORKER_KERNELS_SAMPLING_KERNEL_H_
#define VERL_WORKER_KERNELS_SAMPLING_KERNEL_H_

// The fused sampling kernel's launch interface, free of LibTorch (nvcc compiles only sampling.cu; the ATen-facing
// wrapper is sampling.h).
//
// One thread block per row of logits: x = logits * (1 / temperature) as ATen computes logits / temperature on a GPU
// (plain logits when temperature <= 0). One read of the row gives each warp's segment max and sum of exp(x - max)
// (online: rescaled as the max grows); the block then takes the row's max and scans the segment sums, rescaled to
// it, in float64. Greedy takes the first index of the max, sampling the first index whose cumulative mass exceeds
// u * sum: the segment holding that point is read again by the whole block (a piece per warp), and the piece holding
// it once more by its warp. The log-prob of the chosen token is x - max - log(sum). So the logits are read about once,
// in their own dtype, instead of the many full passes (temperature, softmax, float64 cast, cumsum, log_softmax) of the
// ATen composition.

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/kernel_dtype.h"

namespace verl::kernels {

struct SampleArgs {
  KernelDtype dtype = KernelDtype::kFloat32;  // of the logits
  const void* logits = nullptr;           // [rows, vocab], row r at r * row_stride elements
  int64_t row_stride = 0;
  const double* uniforms = nullptr;  // [rows], draws in [0, 1); unused when greedy
  int64_t* tokens = nullptr;         // [rows]
  float* log_probs = nullptr;        // [rows]
  int rows = 0;
  int vocab = 0;
  float temperature = 1.0f;
  bool greedy = false;
};

cudaError_t LaunchSample(const SampleArgs& args, cudaStream_t stream);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_SAMPLING_KERNEL_H_

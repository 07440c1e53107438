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
//
// With top-k and / or top-p, the draw is over the tokens the filters keep (the CDF runs over them in vocabulary order,
// as ATen's composition draws), and the log-prob stays that of the unfiltered softmax. Each filter keeps the tokens
// whose value is at least a threshold, found by a search over the values' order-preserving integer keys (16 bits for
// bf16 / fp16 logits, 32 for float32): each pass over the row counts the tokens (top-k) or sums their mass (top-p) at
// or above the values of four candidate keys, and the search keeps the interval that holds the threshold, so a filter
// takes about 7 passes over a bf16 row (14 for float32), most of them from L2; top-p's first pass also tries a lower
// bound it can prove, which usually saves a few. top-k keeps the tokens at or above the k-th largest value; top-p, among
// those, the tokens whose mass of strictly larger values is at most top_p of the top-k mass: tokens of equal value are
// kept or dropped together. The sums are in a fixed order, so a row's draw is the same every time. A row whose mass
// is NaN (a NaN logit) is drawn unfiltered, as without the filters.

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
  int top_k = 0;        // <= 0 or >= vocab: no top-k filter
  float top_p = 1.0f;   // >= 1: no top-p filter
};

cudaError_t LaunchSample(const SampleArgs& args, cudaStream_t stream);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_SAMPLING_KERNEL_H_

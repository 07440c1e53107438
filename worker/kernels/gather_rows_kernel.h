#ifndef VERL_WORKER_KERNELS_GATHER_ROWS_KERNEL_H_
#define VERL_WORKER_KERNELS_GATHER_ROWS_KERNEL_H_

// Launch interfaces of the row movers behind shared-prompt attention (gather_rows.cu; ATen face in gather_rows.h):
// rows gathered with zeros where no source is named, and rows summed over a list of sources per output row. Torch-free,
// as the other *_kernel.h.

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/kernel_dtype.h"

namespace verl::kernels {

// y[r] = index[r] >= 0 ? x[index[r]] : zero bytes, for r < rows; rows of row_bytes bytes (x and y dense).
struct GatherRowsArgs {
  const void* x = nullptr;
  void* y = nullptr;
  const int64_t* index = nullptr;  // [rows], values in [-1, rows of x)
  int64_t rows = 0;
  int64_t row_bytes = 0;
};
cudaError_t LaunchGatherRows(const GatherRowsArgs& args, cudaStream_t stream);

// y[r] = dtype(sum over j in [offsets[r], offsets[r + 1]) of float(x[positions[j]])), summed in float32 in the order of
// j and rounded once (zero for an empty list), for r < rows; rows of `width` elements (x and y dense).
struct SumRowsArgs {
  KernelDtype dtype = KernelDtype::kFloat32;
  const void* x = nullptr;
  void* y = nullptr;
  const int64_t* offsets = nullptr;    // [rows + 1]
  const int64_t* positions = nullptr;  // [offsets[rows]], rows of x
  int64_t rows = 0;
  int64_t width = 0;
};
cudaError_t LaunchSumRows(const SumRowsArgs& args, cudaStream_t stream);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_GATHER_ROWS_KERNEL_H_

#ifndef VERL_WORKER_KERNELS_GATHER_ROWS_H_
#define VERL_WORKER_KERNELS_GATHER_ROWS_H_

// ATen face of the row movers behind shared-prompt attention (gather_rows_kernel.h); built only with VERL_WITH_CUDA.
// Plain functions (no autograd): the model's autograd functions around the attention rows call them in forward and
// backward (decoder_model.cc).

#include <ATen/ATen.h>

namespace verl::kernels {

// x [S, ...] on a CUDA device, any dtype; index int64 [R] on that device with values in [-1, S) (not checked on the
// device): [R, ...] whose row r is x's row index[r], zeros where index[r] is -1. One kernel for what a zero fill and an
// index_copy_ do (or index_select where no index is -1), the same bytes.
at::Tensor GatherRowsOrZero(const at::Tensor& x, const at::Tensor& index);

// Whether SumRows takes x: float32, bfloat16 or float16 on a CUDA device, at least one dimension.
bool SumRowsSupported(const at::Tensor& x);
// x [P, ...] as SumRowsSupported; offsets int64 [R + 1] and positions int64 [offsets[R]] on that device (rows of x,
// not checked on the device): [R, ...] whose row r is the sum of x's rows positions[offsets[r]], ...,
// positions[offsets[r + 1] - 1], added in float32 in that order and rounded once (zeros for an empty list). What
// index_add_ into zeros computes for an index listing each position's output row, without its atomics: deterministic,
// one rounding.
at::Tensor SumRows(const at::Tensor& x, const at::Tensor& offsets, const at::Tensor& positions);

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_GATHER_ROWS_H_

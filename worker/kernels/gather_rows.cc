#include "worker/kernels/gather_rows.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/accumulate.h>

#include <vector>

#include "worker/kernels/aten_dtype.h"
#include "worker/kernels/gather_rows_kernel.h"

namespace verl::kernels {
namespace {

std::vector<int64_t> WithRows(const at::Tensor& x, int64_t rows) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] = rows;
  return shape;
}

int64_t RowElements(const at::Tensor& x) { return c10::multiply_integers(x.sizes().slice(1)); }

void CheckIndex(const at::Tensor& t, const at::Tensor& x, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kLong && t.dim() == 1 && t.device() == x.device(), "GatherRows: ", what,
              " must be int64 [n] on ", x.device(), ", got ", t.scalar_type(), " ", t.sizes(), " on ", t.device());
}

}  // namespace

at::Tensor GatherRowsOrZero(const at::Tensor& x, const at::Tensor& index) {
  TORCH_CHECK(x.is_cuda() && x.dim() >= 1, "GatherRowsOrZero: x must be a CUDA tensor of at least one dimension");
  CheckIndex(index, x, "index");
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor src = x.contiguous();
  const at::Tensor idx = index.contiguous();
  at::Tensor y = at::empty(WithRows(src, idx.size(0)), src.options());
  GatherRowsArgs a;
  a.x = src.data_ptr();
  a.y = y.data_ptr();
  a.index = idx.data_ptr<int64_t>();
  a.rows = idx.size(0);
  a.row_bytes = RowElements(src) * static_cast<int64_t>(src.element_size());
  C10_CUDA_CHECK(LaunchGatherRows(a, c10::cuda::getCurrentCUDAStream()));
  return y;
}

bool SumRowsSupported(const at::Tensor& x) {
  KernelDtype dtype;
  return x.is_cuda() && x.dim() >= 1 && KernelDtypeOf(x.scalar_type(), &dtype);
}

at::Tensor SumRows(const at::Tensor& x, const at::Tensor& offsets, const at::Tensor& positions) {
  TORCH_CHECK(SumRowsSupported(x), "SumRows: x must be a float32, bfloat16 or float16 CUDA tensor, got ",
              x.scalar_type(), " ", x.sizes(), " on ", x.device());
  KernelDtype dtype = KernelDtype::kFloat32;
  KernelDtypeOf(x.scalar_type(), &dtype);  // known to succeed: SumRowsSupported
  CheckIndex(offsets, x, "offsets");
  CheckIndex(positions, x, "positions");
  TORCH_CHECK(offsets.size(0) >= 1, "SumRows: offsets must hold at least one entry");
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor src = x.contiguous();
  const at::Tensor off = offsets.contiguous();
  const at::Tensor pos = positions.contiguous();
  at::Tensor y = at::empty(WithRows(src, off.size(0) - 1), src.options());
  SumRowsArgs a;
  a.dtype = dtype;
  a.x = src.data_ptr();
  a.y = y.data_ptr();
  a.offsets = off.data_ptr<int64_t>();
  a.positions = pos.data_ptr<int64_t>();
  a.rows = off.size(0) - 1;
  a.width = RowElements(src);
  C10_CUDA_CHECK(LaunchSumRows(a, c10::cuda::getCurrentCUDAStream()));
  return y;
}

}  // namespace verl::kernels

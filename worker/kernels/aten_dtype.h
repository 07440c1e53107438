#ifndef VERL_WORKER_KERNELS_ATEN_DTYPE_H_
#define VERL_WORKER_KERNELS_ATEN_DTYPE_H_

// The kernels' element type of an ATen dtype, for the ATen-facing wrappers (*.cc in worker/kernels).

#include <c10/core/ScalarType.h>

#include "worker/kernels/kernel_dtype.h"

namespace verl::kernels {

// False for a dtype no kernel takes.
inline bool KernelDtypeOf(at::ScalarType t, KernelDtype* out) {
  switch (t) {
    case at::kFloat:
      *out = KernelDtype::kFloat32;
      return true;
    case at::kBFloat16:
      *out = KernelDtype::kBFloat16;
      return true;
    case at::kHalf:
      *out = KernelDtype::kFloat16;
      return true;
    default:
      return false;
  }
}

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_ATEN_DTYPE_H_

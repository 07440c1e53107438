#ifndef VERL_WORKER_KERNELS_KERNEL_DTYPE_H_
#define VERL_WORKER_KERNELS_KERNEL_DTYPE_H_

// The element types the CUDA kernels take, shared by their torch-free launch interfaces (*_kernel.h).

namespace verl::kernels {

enum class KernelDtype { kFloat32, kBFloat16, kFloat16 };

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_KERNEL_DTYPE_H_

#ifndef VERL_WORKER_KERNELS_DTYPE_CUH_
#define VERL_WORKER_KERNELS_DTYPE_CUH_

// Device-side conversions shared by the .cu kernels: each computes in float32 and stores in the tensor's dtype.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "worker/kernels/kernel_dtype.h"

namespace verl::kernels {

// log2(e): the kernels' softmax weights are exp2 of scores scaled by it (one special-function instruction each).
constexpr float kLog2e = 1.4426950408889634f;

// e^d through the special-function unit's exp2 (exp2f: within 2 ulp, a few instructions where expf takes about ten).
// The product d log2(e) is rounded relative to |d|, so the terms that carry a softmax's mass (d near 0 against the
// row's maximum) keep expf's accuracy; -inf gives 0 and NaN stays NaN, as with expf.
__device__ __forceinline__ float Exp(float d) { return exp2f(d * kLog2e); }

// A type as a value, for the launch sites' generic lambdas: `using T = typename decltype(t)::type;`.
template <typename T>
struct TypeTag {
  using type = T;
};

// Host side: f(TypeTag<T>{}) for the element type T of `dtype` (the one switch over the kernels' dtypes).
template <typename F>
void WithElementType(KernelDtype dtype, F&& f) {
  switch (dtype) {
    case KernelDtype::kFloat32:
      f(TypeTag<float>{});
      break;
    case KernelDtype::kBFloat16:
      f(TypeTag<__nv_bfloat16>{});
      break;
    case KernelDtype::kFloat16:
      f(TypeTag<__half>{});
      break;
  }
}

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) { return __float2half(x); }

// x rounded to T, as float: what an ATen op computing in float32 and storing T keeps.
template <typename T>
__device__ __forceinline__ float Round(float x) {
  return ToFloat(FromFloat<T>(x));
}

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_DTYPE_CUH_

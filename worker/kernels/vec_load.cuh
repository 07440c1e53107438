#ifndef VERL_WORKER_KERNELS_VEC_LOAD_CUH_
#define VERL_WORKER_KERNELS_VEC_LOAD_CUH_

// Reading and writing float32, bfloat16 or float16 elements as floats with 16-byte loads and stores (fused_ops.cu,
// log_probs.cu).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "worker/kernels/dtype.cuh"

namespace verl::kernels {

// The elements of one 32-bit word as floats (bit operations: the words stay in registers).
template <typename T>
struct Word;
template <>
struct Word<float> {
  static constexpr int kPer = 1;
  __device__ __forceinline__ static float Get(uint32_t w, int) { return __uint_as_float(w); }
};
template <>
struct Word<__nv_bfloat16> {
  static constexpr int kPer = 2;
  __device__ __forceinline__ static float Get(uint32_t w, int j) {
    return __uint_as_float(j == 0 ? (w << 16) : (w & 0xffff0000u));
  }
};
template <>
struct Word<__half> {
  static constexpr int kPer = 2;
  __device__ __forceinline__ static float Get(uint32_t w, int j) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(j == 0 ? (w & 0xffffu) : (w >> 16))));
  }
};

// 16 bytes of T as floats, and back.
template <typename T>
struct Vec {
  static constexpr int kN = 16 / sizeof(T);
  __device__ __forceinline__ static void Load(const T* p, float (&out)[kN]) {
    Unpack(*reinterpret_cast<const uint4*>(p), out);
  }
  // The elements of 16 loaded bytes (a load issued early keeps 4 registers until its values are needed).
  __device__ __forceinline__ static void Unpack(const uint4& raw, float (&out)[kN]) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int j = 0; j < Word<T>::kPer; ++j) out[q * Word<T>::kPer + j] = Word<T>::Get(w[q], j);
    }
  }
  __device__ __forceinline__ static void Store(T* p, const float (&in)[kN]) {
    alignas(16) T v[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) v[j] = FromFloat<T>(in[j]);
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(v);
  }
};

}  // namespace verl::kernels

#endif  // VERL_WORKER_KERNELS_VEC_LOAD_CUH_

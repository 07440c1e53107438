// Row movers of shared-prompt attention (gather_rows_kernel.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "worker/kernels/dtype.cuh"
#include "worker/kernels/gather_rows_kernel.h"
#include "worker/kernels/vec_load.cuh"

namespace verl::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535LL * 16;

template <typename U>  // the unit of copy: uint4 (16 bytes), uint2, uint32_t or uint16_t
__global__ void GatherRowsKernel(const GatherRowsArgs a, int64_t units_per_row) {
  const U* x = static_cast<const U*>(a.x);
  U* y = static_cast<U*>(a.y);
  const int64_t total = a.rows * units_per_row;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < total;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = u / units_per_row, c = u - r * units_per_row;
    const int64_t from = a.index[r];
    y[u] = from >= 0 ? x[from * units_per_row + c] : U{};
  }
}

template <typename T, int kN>  // kN elements per thread: a 16-byte vector, or one element
__global__ void SumRowsKernel(const SumRowsArgs a, int64_t pieces_per_row) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t total = a.rows * pieces_per_row;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < total;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = u / pieces_per_row, c = (u - r * pieces_per_row) * kN;
    float acc[kN] = {};
    for (int64_t j = a.offsets[r]; j < a.offsets[r + 1]; ++j) {
      const T* row = x + a.positions[j] * a.width + c;
      float v[kN];
      if constexpr (kN == 1) {
        v[0] = ToFloat(*row);
      } else {
        Vec<T>::Load(row, v);
      }
#pragma unroll
      for (int i = 0; i < kN; ++i) acc[i] += v[i];
    }
    T* out = y + r * a.width + c;
    if constexpr (kN == 1) {
      *out = FromFloat<T>(acc[0]);
    } else {
      Vec<T>::Store(out, acc);
    }
  }
}

unsigned Blocks(int64_t items) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((items + kThreads - 1) / kThreads, kMaxBlocks)));
}

bool AlignedTo(const void* p, int64_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

}  // namespace

cudaError_t LaunchGatherRows(const GatherRowsArgs& a, cudaStream_t stream) {
  if (a.rows < 0 || a.row_bytes < 0 || (a.rows > 0 && (a.x == nullptr || a.y == nullptr || a.index == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (a.rows == 0 || a.row_bytes == 0) return cudaSuccess;
  auto launch = [&](auto unit) {
    using U = decltype(unit);
    const int64_t units = a.row_bytes / static_cast<int64_t>(sizeof(U));
    GatherRowsKernel<U><<<Blocks(a.rows * units), kThreads, 0, stream>>>(a, units);
  };
  // The widest unit that divides the rows and both buffers' alignment.
  auto fits = [&](int64_t n) { return a.row_bytes % n == 0 && AlignedTo(a.x, n) && AlignedTo(a.y, n); };
  if (fits(16)) {
    launch(uint4{});
  } else if (fits(8)) {
    launch(uint2{});
  } else if (fits(4)) {
    launch(uint32_t{});
  } else if (fits(2)) {
    launch(uint16_t{});
  } else {
    launch(uint8_t{});
  }
  return cudaGetLastError();
}

cudaError_t LaunchSumRows(const SumRowsArgs& a, cudaStream_t stream) {
  if (a.rows < 0 || a.width < 0 ||
      (a.rows > 0 && (a.x == nullptr || a.y == nullptr || a.offsets == nullptr || a.positions == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (a.rows == 0 || a.width == 0) return cudaSuccess;
  WithElementType(a.dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    constexpr int kN = Vec<T>::kN;
    if (a.width % kN == 0 && AlignedTo(a.x, 16) && AlignedTo(a.y, 16)) {
      SumRowsKernel<T, kN><<<Blocks(a.rows * (a.width / kN)), kThreads, 0, stream>>>(a, a.width / kN);
    } else {
      SumRowsKernel<T, 1><<<Blocks(a.rows * a.width), kThreads, 0, stream>>>(a, a.width);
    }
  });
  return cudaGetLastError();
}

}  // namespace verl::kernels

// Fused RMSNorm, RoPE and SwiGLU of the decoder layers, forward and backward (fused_ops_kernel.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "worker/kernels/dtype.cuh"
#include "worker/kernels/fused_ops_kernel.h"
#include "worker/kernels/launch.cuh"
#include "worker/kernels/vec_load.cuh"

namespace verl::kernels {
namespace {

// One warp per row, 4 rows per block: a decoding step's 512 rows then occupy 128 SMs instead of 64.
constexpr int kNormThreads = 128;
// 16-byte vectors per lane a forward RMSNorm keeps in registers between its two passes over a row (rows of up to
// 32 * 8 vectors: 2048 bfloat16 elements); longer rows, and rows of unaligned views, are read twice.
constexpr int kNormCache = 8;
constexpr int kNormChunks = 256;   // row chunks of the weight gradient's partial sums

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__host__ __device__ __forceinline__ bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// f(i, x[i], ...) over a row of n elements by the 32 lanes of a warp: 16-byte loads (kVec: n a multiple of the
// vector width, rows aligned) or single elements.
template <typename T, bool kVec, typename F>
__device__ __forceinline__ void WarpRow(int n, int lane, F&& f) {
  if constexpr (kVec) {
    constexpr int kN = Vec<T>::kN;
    for (int v = lane; v < n / kN; v += 32) f(v * kN, std::integral_constant<int, kN>());
  } else {
    for (int i = lane; i < n; i += 32) f(i, std::integral_constant<int, 1>());
  }
}

template <typename T, int N>
__device__ __forceinline__ void LoadN(const T* p, float (&out)[N]) {
  if constexpr (N == 1) {
    out[0] = ToFloat(*p);
  } else {
    Vec<T>::Load(p, out);
  }
}

template <typename T, int N>
__device__ __forceinline__ void StoreN(T* p, const float (&in)[N]) {
  if constexpr (N == 1) {
    *p = FromFloat<T>(in[0]);
  } else {
    Vec<T>::Store(p, in);
  }
}

// N elements at p: one 16-byte access where `vec` (p aligned), else one element at a time. The norms' rows are cut
// into lanes by the row length alone (kVec: a multiple of the vector width), so that a pointer's alignment (a view,
// e.g. ZeRO-3's, may have any) never changes how a row is summed, only how it is loaded.
template <typename T, int N>
__device__ __forceinline__ void LoadAt(const T* p, bool vec, float (&out)[N]) {
  if (N > 1 && vec) {
    LoadN<T>(p, out);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = ToFloat(p[j]);
  }
}
template <typename T, int N>
__device__ __forceinline__ void StoreAt(T* p, bool vec, const float (&in)[N]) {
  if (N > 1 && vec) {
    StoreN<T>(p, in);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = FromFloat<T>(in[j]);
  }
}

// RmsNormKernel's row held in registers (16-byte aligned rows of at most kNormCache vectors per lane): every load
// (x, the residual and the weight) is issued before any of their values is used, so a row costs one memory round trip
// instead of one per vector (the loop below cannot move a load above a store that may alias it). The lanes take the
// elements, and sum their squares, in WarpRow's order: the results are the loop's bit for bit.
template <typename T>
__device__ __forceinline__ void RmsNormRowInRegisters(const RmsNormArgs& a, int64_t row, int lane) {
  constexpr int kN = Vec<T>::kN;
  const T* x = static_cast<const T*>(a.x) + row * a.hidden;
  const T* res = a.residual != nullptr ? static_cast<const T*>(a.residual) + row * a.hidden : nullptr;
  T* sum = a.residual != nullptr ? static_cast<T*>(a.sum_out) + row * a.hidden : nullptr;
  const T* w = static_cast<const T*>(a.weight);
  T* y = static_cast<T*>(a.y) + row * a.hidden;
  uint4 xr[kNormCache], rr[kNormCache], wr[kNormCache];
#pragma unroll
  for (int k = 0; k < kNormCache; ++k) {
    const int i = (lane + 32 * k) * kN;
    if (i < a.hidden) {
      wr[k] = *reinterpret_cast<const uint4*>(w + i);
      xr[k] = *reinterpret_cast<const uint4*>(x + i);
      if (res != nullptr) rr[k] = *reinterpret_cast<const uint4*>(res + i);
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kNormCache; ++k) {
    const int i = (lane + 32 * k) * kN;
    if (i < a.hidden) {
      float xv[kN];
      Vec<T>::Load(reinterpret_cast<const T*>(&xr[k]), xv);
      if (res != nullptr) {
        float rv[kN];
        Vec<T>::Load(reinterpret_cast<const T*>(&rr[k]), rv);
#pragma unroll
        for (int j = 0; j < kN; ++j) xv[j] = Round<T>(__fadd_rn(xv[j], rv[j]));
        Vec<T>::Store(reinterpret_cast<T*>(&xr[k]), xv);  // exact: the sum is rounded to T
        *reinterpret_cast<uint4*>(sum + i) = xr[k];
      }
#pragma unroll
      for (int j = 0; j < kN; ++j) ss = fmaf(xv[j], xv[j], ss);
    }
  }
  ss = WarpSum(ss);
  const float r = rsqrtf(ss / static_cast<float>(a.hidden) + a.eps);
  if (a.rstd != nullptr && lane == 0) a.rstd[row] = r;
#pragma unroll
  for (int k = 0; k < kNormCache; ++k) {
    const int i = (lane + 32 * k) * kN;
    if (i < a.hidden) {
      float xv[kN], wv[kN];
      Vec<T>::Load(reinterpret_cast<const T*>(&xr[k]), xv);
      Vec<T>::Load(reinterpret_cast<const T*>(&wr[k]), wv);
#pragma unroll
      for (int j = 0; j < kN; ++j) xv[j] = __fmul_rn(wv[j], Round<T>(__fmul_rn(xv[j], r)));
      Vec<T>::Store(y + i, xv);
    }
  }
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kNormThreads) RmsNormKernel(const RmsNormArgs a) {
  WaitForPriorGrid();
  AllowDependentGrid();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kNormThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= a.rows) return;
  if constexpr (kVec) {
    // Rows of a multiple of the vector width start aligned where the tensors do.
    const bool aligned = Aligned16(a.x) && Aligned16(a.weight) && Aligned16(a.y) &&
                         (a.residual == nullptr || (Aligned16(a.residual) && Aligned16(a.sum_out)));
    if (aligned && a.hidden <= 32 * kNormCache * Vec<T>::kN) {
      RmsNormRowInRegisters<T>(a, row, lane);
      return;
    }
  }
  const T* x = static_cast<const T*>(a.x) + row * a.hidden;
  const T* w = static_cast<const T*>(a.weight);
  T* y = static_cast<T*>(a.y) + row * a.hidden;
  const bool w_vec = Aligned16(w), y_vec = Aligned16(y);
  bool x_vec = Aligned16(x);
  float ss = 0.f;
  if (a.residual != nullptr) {
    // sum = to_dtype(x + residual), as ATen's add stores it; the second pass reads the sum back (this lane's own
    // stores: the same elements in both passes).
    const T* res = static_cast<const T*>(a.residual) + row * a.hidden;
    T* sum = static_cast<T*>(a.sum_out) + row * a.hidden;
    const bool res_vec = Aligned16(res), sum_vec = Aligned16(sum);
    WarpRow<T, kVec>(a.hidden, lane, [&](int i, auto n) {
      float xv[n.value], rv[n.value];
      LoadAt<T>(x + i, x_vec, xv);
      LoadAt<T>(res + i, res_vec, rv);
#pragma unroll
      for (int j = 0; j < n.value; ++j) {
        xv[j] = Round<T>(__fadd_rn(xv[j], rv[j]));
        ss = fmaf(xv[j], xv[j], ss);
      }
      StoreAt<T>(sum + i, sum_vec, xv);
    });
    x = sum;
    x_vec = sum_vec;
  } else {
    WarpRow<T, kVec>(a.hidden, lane, [&](int i, auto n) {
      float xv[n.value];
      LoadAt<T>(x + i, x_vec, xv);
#pragma unroll
      for (int j = 0; j < n.value; ++j) ss = fmaf(xv[j], xv[j], ss);
    });
  }
  ss = WarpSum(ss);
  const float r = rsqrtf(ss / static_cast<float>(a.hidden) + a.eps);
  if (a.rstd != nullptr && lane == 0) a.rstd[row] = r;
  WarpRow<T, kVec>(a.hidden, lane, [&](int i, auto n) {
    float xv[n.value], wv[n.value];
    LoadAt<T>(x + i, x_vec, xv);
    LoadAt<T>(w + i, w_vec, wv);
#pragma unroll
    for (int j = 0; j < n.value; ++j) {
      // to_dtype(x * r), then weight * that rounded again: the two roundings of the ATen composition.
      xv[j] = __fmul_rn(wv[j], Round<T>(__fmul_rn(xv[j], r)));
    }
    StoreAt<T>(y + i, y_vec, xv);
  });
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kNormThreads) RmsNormInputGradKernel(const RmsNormBackwardArgs a) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kNormThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= a.rows) return;
  const T* x = static_cast<const T*>(a.x) + row * a.hidden;
  const T* w = static_cast<const T*>(a.weight);
  const T* dy = static_cast<const T*>(a.dy) + row * a.hidden;
  T* dx = static_cast<T*>(a.dx) + row * a.hidden;
  const T* add = a.dx_add != nullptr ? static_cast<const T*>(a.dx_add) + row * a.hidden : nullptr;
  const float r = a.rstd[row];
  const bool x_vec = Aligned16(x), w_vec = Aligned16(w), dy_vec = Aligned16(dy), dx_vec = Aligned16(dx),
             add_vec = add != nullptr && Aligned16(add);
  float dot = 0.f;  // sum(g * x), g = dy * weight
  WarpRow<T, kVec>(a.hidden, lane, [&](int i, auto n) {
    float xv[n.value], wv[n.value], gv[n.value];
    LoadAt<T>(x + i, x_vec, xv);
    LoadAt<T>(w + i, w_vec, wv);
    LoadAt<T>(dy + i, dy_vec, gv);
#pragma unroll
    for (int j = 0; j < n.value; ++j) dot = fmaf(gv[j] * wv[j], xv[j], dot);
  });
  dot = WarpSum(dot);
  // dx = r * g - x * r^3 * sum(g * x) / hidden
  const float c = dot * r * r * r / static_cast<float>(a.hidden);
  WarpRow<T, kVec>(a.hidden, lane, [&](int i, auto n) {
    float xv[n.value], wv[n.value], gv[n.value];
    LoadAt<T>(x + i, x_vec, xv);
    LoadAt<T>(w + i, w_vec, wv);
    LoadAt<T>(dy + i, dy_vec, gv);
#pragma unroll
    for (int j = 0; j < n.value; ++j) xv[j] = r * gv[j] * wv[j] - xv[j] * c;
    if (add != nullptr) {
      LoadAt<T>(add + i, add_vec, gv);
#pragma unroll
      for (int j = 0; j < n.value; ++j) xv[j] = __fadd_rn(Round<T>(xv[j]), gv[j]);
    }
    StoreAt<T>(dx + i, dx_vec, xv);
  });
}

// Block (column tile, row chunk): each thread sums dy * to_dtype(x * r) over its column's rows of the chunk.
template <typename T>
__global__ void RmsNormWeightGradKernel(const RmsNormBackwardArgs a, int64_t rows_per_chunk) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= a.hidden) return;
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end = min(a.rows, begin + rows_per_chunk);
  float acc = 0.f;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t at = row * a.hidden + col;
    acc = fmaf(ToFloat(dy[at]), Round<T>(__fmul_rn(ToFloat(x[at]), a.rstd[row])), acc);
  }
  a.dweight_partial[static_cast<int64_t>(blockIdx.y) * a.hidden + col] = acc;
}

// kN rotated pairs: the loaded halves (x1 at offset d, x2 at d + half) rotated by the position's cos and sin (-sin
// where negate_sin, the backward), y1 = x1 c1 - x2 s1 and y2 = x2 c2 + x1 s2 (rotate_half(x) = cat(-x2, x1)), stored
// at y + d and y + d + half. Each product and the sum rounded to T as the ATen ops store them (_rn intrinsics: never
// contracted into an FMA, which would round once). RotateStoreValues: the same with the cos and sin values (ca at d,
// cb at d + half, likewise sa, sb) already loaded.
template <typename T, int kN>
__device__ __forceinline__ void RotateStoreValues(const float (&x1)[kN], const float (&x2)[kN], const float (&ca)[kN],
                                                  const float (&cb)[kN], const float (&sa)[kN], const float (&sb)[kN],
                                                  int d, int half, T* y) {
  float o1[kN], o2[kN];
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    o1[i] = __fadd_rn(Round<T>(__fmul_rn(x1[i], ca[i])), Round<T>(__fmul_rn(-x2[i], sa[i])));
    o2[i] = __fadd_rn(Round<T>(__fmul_rn(x2[i], cb[i])), Round<T>(__fmul_rn(x1[i], sb[i])));
  }
  StoreN<T>(y + d, o1);
  StoreN<T>(y + d + half, o2);
}

template <typename T, int kN>
__device__ __forceinline__ void RotateStore(const float (&x1)[kN], const float (&x2)[kN], const T* c, const T* s, int d,
                                            int half, bool negate_sin, T* y) {
  float ca[kN], cb[kN], sa[kN], sb[kN];
  LoadN<T>(c + d, ca);
  LoadN<T>(c + d + half, cb);
  LoadN<T>(s + d, sa);
  LoadN<T>(s + d + half, sb);
  if (negate_sin) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      sa[i] = -sa[i];
      sb[i] = -sb[i];
    }
  }
  RotateStoreValues<T, kN>(x1, x2, ca, cb, sa, sb, d, half, y);
}

// kN consecutive pairs (d, d + D/2) per item (16-byte loads and stores where kN > 1; RotateStore), items
// in the order (piece, head, token, row): a head's pieces are adjacent threads, and a token's heads share its cos and
// sin. 32-bit indices (RopeSupported: numel <= INT_MAX).
template <typename T, int kN>
__global__ void RopeKernel(const RopeArgs a) {
  const int half = a.head_dim / 2;
  const int pieces = half / kN;
  const int total = a.batch * a.heads * a.tokens * pieces;
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
    const int d = (idx % pieces) * kN;
    int rest = idx / pieces;
    const int h = rest % a.heads;
    rest /= a.heads;
    const int t = rest % a.tokens;
    const int b = rest / a.tokens;
    const int64_t at = b * a.stride_b + h * a.stride_h + t * a.stride_t;
    const int64_t yt = b * a.y_stride_b + h * a.y_stride_h + t * a.y_stride_t;
    const int64_t ct = (static_cast<int64_t>(b) * a.tokens + t) * a.head_dim;
    const T* x = static_cast<const T*>(a.x) + at;
    const T* c = static_cast<const T*>(a.cos) + ct;
    const T* s = static_cast<const T*>(a.sin) + ct;
    float x1[kN], x2[kN];
    LoadN<T>(x + d, x1);
    LoadN<T>(x + d + half, x2);
    RotateStore<T, kN>(x1, x2, c, s, d, half, a.negate_sin, static_cast<T*>(a.y) + yt);
  }
}

// RopeRowsArgs: kN consecutive pairs (d, d + D/2) of one head of one output row per item, items in the order (piece,
// head, row), so a row's pieces are adjacent threads (RopeKernel's order). The sums are rounded to T before they are
// rotated, so a rotated sum has the bits of SumRows followed by LaunchRope.
template <typename T, int kN>
__global__ void RopeRowsKernel(const RopeRowsArgs a) {
  const int half = a.head_dim / 2;
  const int pieces = half / kN;
  const int64_t per_row = static_cast<int64_t>(a.heads) * pieces;
  const int64_t total = a.rows * per_row;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / per_row;
    const int rest = static_cast<int>(idx - r * per_row);
    const int h = rest / pieces, d = (rest % pieces) * kN;
    T* y = static_cast<T*>(a.y) + r * a.y_stride + static_cast<int64_t>(h) * a.head_dim;
    const T* x = static_cast<const T*>(a.x) + static_cast<int64_t>(h) * a.head_dim;
    float x1[kN], x2[kN];
    int64_t cos_row = r;
    if (a.index != nullptr) {
      const int64_t from = a.index[r];
      if (from < 0) {
#pragma unroll
        for (int i = 0; i < kN; ++i) x1[i] = 0.f;
        StoreN<T>(y + d, x1);
        StoreN<T>(y + d + half, x1);
        continue;
      }
      LoadN<T>(x + from * a.x_stride + d, x1);
      LoadN<T>(x + from * a.x_stride + d + half, x2);
      if (a.cos_of_input) cos_row = from;
    } else {
#pragma unroll
      for (int i = 0; i < kN; ++i) x1[i] = x2[i] = 0.f;
      for (int64_t j = a.offsets[r]; j < a.offsets[r + 1]; ++j) {
        const T* row = x + a.positions[j] * a.x_stride;
        float v1[kN], v2[kN];
        LoadN<T>(row + d, v1);
        LoadN<T>(row + d + half, v2);
#pragma unroll
        for (int i = 0; i < kN; ++i) {
          x1[i] += v1[i];
          x2[i] += v2[i];
        }
      }
      if (a.cos != nullptr) {
#pragma unroll
        for (int i = 0; i < kN; ++i) {
          x1[i] = Round<T>(x1[i]);
          x2[i] = Round<T>(x2[i]);
        }
      }
    }
    if (a.cos == nullptr) {
      StoreN<T>(y + d, x1);
      StoreN<T>(y + d + half, x2);
    } else {
      const int64_t ct = cos_row * a.head_dim;
      RotateStore<T, kN>(x1, x2, static_cast<const T*>(a.cos) + ct, static_cast<const T*>(a.sin) + ct, d, half,
                         a.negate_sin, y);
    }
  }
}

// Where item (b, j) of a decoding step's RoPE and cache append reads (x: head j of the step's q, k or v) and writes
// (y: q_out's head, or the cache's row).
template <typename T>
__device__ __forceinline__ void RopeAppendEnds(const RopeAppendArgs& a, int b, int j, const T** x, T** y) {
  if (j < a.q_heads) {
    *x = static_cast<const T*>(a.q) + b * a.q_stride_b + static_cast<int64_t>(j) * a.head_dim;
    *y = static_cast<T*>(a.q_out) + (static_cast<int64_t>(b) * a.q_heads + j) * a.head_dim;
  } else {
    const int h = (j - a.q_heads) % a.kv_heads;
    const int64_t row = a.rows[static_cast<int64_t>(b) * a.kv_heads + h] * a.head_dim;
    const bool is_k = j < a.q_heads + a.kv_heads;
    *x = static_cast<const T*>(is_k ? a.k : a.v) + b * (is_k ? a.k_stride_b : a.v_stride_b) +
         static_cast<int64_t>(h) * a.head_dim;
    *y = static_cast<T*>(is_k ? a.k_cache : a.v_cache) + row;
  }
}

// One (row b, head j, piece d) item of a decoding step's RoPE and cache append: kN consecutive pairs (d, d + D/2) of
// head j of q (j < Hq: rotated into q_out), of k (the next Hkv heads: rotated into the k cache's row) or of v (copied
// into the v cache's row), with 16-byte loads and stores where kN > 1 (RotateStore).
template <typename T, int kN>
__device__ __forceinline__ void RopeAppendItem(const RopeAppendArgs& a, int b, int j, int d) {
  const int half = a.head_dim / 2;
  const T* x;
  T* y;
  RopeAppendEnds<T>(a, b, j, &x, &y);
  float x1[kN], x2[kN];
  LoadN<T>(x + d, x1);
  LoadN<T>(x + d + half, x2);
  if (j >= a.q_heads + a.kv_heads) {  // v: the copy
    StoreN<T>(y + d, x1);
    StoreN<T>(y + d + half, x2);
    return;
  }
  const T* c = static_cast<const T*>(a.cos) + static_cast<int64_t>(b) * a.head_dim;
  const T* s = static_cast<const T*>(a.sin) + static_cast<int64_t>(b) * a.head_dim;
  RotateStore<T, kN>(x1, x2, c, s, d, half, /*negate_sin=*/false, y);
}

// The RoPE kernel's outputs, the caches' rows and the v copies of one decoding step: thread (b, j, piece) takes one
// RopeAppendItem; kN = 16 bytes of T where every row is 16-byte aligned and D/2 a multiple of it (LaunchRopeAppend),
// else 1. The same values either way.
template <typename T, int kN>
__global__ void RopeAppendKernel(const RopeAppendArgs a) {
  WaitForPriorGrid();
  AllowDependentGrid();
  const int pieces = a.head_dim / 2 / kN;
  const int slots = a.q_heads + 2 * a.kv_heads;
  const int64_t total = static_cast<int64_t>(a.batch) * slots * pieces;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(idx % pieces) * kN;
    const int j = static_cast<int>((idx / pieces) % slots);
    const int b = static_cast<int>(idx / pieces / slots);
    RopeAppendItem<T, kN>(a, b, j, d);
  }
}

// The layer's input RMSNorm folded into the q/k/v projection (RopeAppendArgs::norm_x): one block per row b, each
// thread taking items of the row as RopeAppendItem does, each value first to_dtype(r_b * x + bias). A thread issues
// its first item's loads, then the block sums the squares of norm_x's row (RowNormScale), then the item is finished
// (RopeNormItem): the loads no longer wait for the sum (B1's RoPE + append 53 -> 44 ms). Where kN > 1 norm_x's rows
// are read in 16-byte vectors too (LaunchRopeAppend).
constexpr int kRopeNormThreads = 128;

// rsqrt(mean(x^2) + eps) of the row x[0, hidden) in float32, for every thread of a block of kThreads. The row is cut
// into lanes of Vec<T>::kN elements by its length alone: thread t sums lanes t, t + kThreads, ... by fused
// multiply-adds in element order, then the warps' sums are added in order. kVecLoads: each lane read as one 16-byte
// vector (hidden a multiple of the lane, x 16-byte aligned), else element by element; the two give the same r bit
// for bit, so a row's scale does not depend on where its tensors lie in memory. `warp_ss`: shared memory for
// kThreads / 32 floats. The folded norms' row scale (RopeAppendNormKernel, SwiGluNormKernel): one formula; the order
// of the sum follows kThreads, so the two kernels (128 and 256 threads) may differ in r's last bit. No row is scaled
// by both kernels (the two norms read different residuals).
template <typename T, int kThreads, bool kVecLoads>
__device__ __forceinline__ float RowNormScale(const T* x, int hidden, float eps, float* warp_ss) {
  constexpr int kLane = Vec<T>::kN;
  float ss = 0.f;
  for (int i = threadIdx.x * kLane; i < hidden; i += kThreads * kLane) {
    float v[kLane];
    if constexpr (kVecLoads) {
      Vec<T>::Load(x + i, v);
    } else {
#pragma unroll
      for (int j = 0; j < kLane; ++j) v[j] = i + j < hidden ? ToFloat(x[i + j]) : 0.f;  // 0 adds nothing: ss + 0 = ss
    }
#pragma unroll
    for (int j = 0; j < kLane; ++j) ss = fmaf(v[j], v[j], ss);
  }
  ss = WarpSum(ss);
  if (threadIdx.x % 32 == 0) warp_ss[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += warp_ss[w];
  return rsqrtf(total / static_cast<float>(hidden) + eps);
}

// One item of RopeAppendNormKernel with its loads (x's pair halves, the bias's, cos and sin) issued before the row's
// scale is known, kept as loaded (16 bytes each where kN > 1), and finished once it is: each value first
// to_dtype(r * x + bias), then what RopeAppendItem does with it, bit for bit (the kernel's form before 02a2876).
template <typename T, int kN>
struct RopeNormItem {
  using Raw = std::conditional_t<(kN > 1), uint4, T>;
  Raw x1, x2, b1, b2, c1, c2, s1, s2;

  __device__ __forceinline__ static void Unpack(const Raw& raw, float (&out)[kN]) {
    if constexpr (kN > 1) {
      Vec<T>::Unpack(raw, out);
    } else {
      out[0] = ToFloat(raw);
    }
  }
  __device__ __forceinline__ static Raw At(const T* p) { return *reinterpret_cast<const Raw*>(p); }

  __device__ __forceinline__ void Load(const RopeAppendArgs& a, int b, int j, int d) {
    const int half = a.head_dim / 2;
    const T* x;
    T* y;
    RopeAppendEnds<T>(a, b, j, &x, &y);
    x1 = At(x + d);
    x2 = At(x + d + half);
    if (a.bias != nullptr) {
      const T* bias = static_cast<const T*>(a.bias) + static_cast<int64_t>(j) * a.head_dim;
      b1 = At(bias + d);
      b2 = At(bias + d + half);
    }
    if (j < a.q_heads + a.kv_heads) {  // q and k rotate
      const T* c = static_cast<const T*>(a.cos) + static_cast<int64_t>(b) * a.head_dim;
      const T* s = static_cast<const T*>(a.sin) + static_cast<int64_t>(b) * a.head_dim;
      c1 = At(c + d);
      c2 = At(c + d + half);
      s1 = At(s + d);
      s2 = At(s + d + half);
    }
  }

  __device__ __forceinline__ void Finish(const RopeAppendArgs& a, int b, int j, int d, float r) const {
    const int half = a.head_dim / 2;
    const T* x;
    T* y;
    RopeAppendEnds<T>(a, b, j, &x, &y);
    float v1[kN], v2[kN], bv1[kN], bv2[kN];
    Unpack(x1, v1);
    Unpack(x2, v2);
    if (a.bias != nullptr) {
      Unpack(b1, bv1);
      Unpack(b2, bv2);
    } else {
#pragma unroll
      for (int i = 0; i < kN; ++i) bv1[i] = bv2[i] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      v1[i] = Round<T>(__fadd_rn(__fmul_rn(r, v1[i]), bv1[i]));
      v2[i] = Round<T>(__fadd_rn(__fmul_rn(r, v2[i]), bv2[i]));
    }
    if (j >= a.q_heads + a.kv_heads) {  // v: the copy
      StoreN<T>(y + d, v1);
      StoreN<T>(y + d + half, v2);
      return;
    }
    float ca[kN], cb[kN], sa[kN], sb[kN];
    Unpack(c1, ca);
    Unpack(c2, cb);
    Unpack(s1, sa);
    Unpack(s2, sb);
    RotateStoreValues<T, kN>(v1, v2, ca, cb, sa, sb, d, half, y);
  }
};

template <typename T, int kN>
__global__ void RopeAppendNormKernel(const RopeAppendArgs a) {
  WaitForPriorGrid();
  AllowDependentGrid();
  __shared__ float warp_ss[kRopeNormThreads / 32];
  const int b = blockIdx.x;
  const int pieces = a.head_dim / 2 / kN;
  const int items = (a.q_heads + 2 * a.kv_heads) * pieces;
  // The thread's first item's loads in flight while the row's scale is summed.
  RopeNormItem<T, kN> item;
  int idx = threadIdx.x;
  if (idx < items) item.Load(a, b, idx / pieces, (idx % pieces) * kN);
  const float r = RowNormScale<T, kRopeNormThreads, (kN > 1)>(static_cast<const T*>(a.norm_x) + b * a.norm_stride_b,
                                                              a.norm_hidden, a.eps, warp_ss);
  for (; idx < items; idx += kRopeNormThreads) {
    if (idx != static_cast<int>(threadIdx.x)) item.Load(a, b, idx / pieces, (idx % pieces) * kN);
    item.Finish(a, b, idx / pieces, (idx % pieces) * kN, r);
  }
}

// As ATen's CUDA silu and silu_backward compute in float32.
__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }
__device__ __forceinline__ float SiluGrad(float dy, float g) {
  const float sg = 1.0f / (1.0f + expf(-g));
  return dy * sg * (1.0f + g * (1.0f - sg));
}

// f(i, width) over n elements, 16-byte vectors where kVec.
template <typename T, bool kVec, typename F>
__device__ __forceinline__ void GridElements(int64_t n, F&& f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVec) {
    constexpr int kN = Vec<T>::kN;
    for (int64_t v = first; v < n / kN; v += stride) f(v * kN, std::integral_constant<int, kN>());
  } else {
    for (int64_t i = first; i < n; i += stride) f(i, std::integral_constant<int, 1>());
  }
}

template <typename T, bool kVec>
__global__ void SwiGluKernel(const SwiGluArgs a) {
  WaitForPriorGrid();
  AllowDependentGrid();
  const T* g = static_cast<const T*>(a.gate);
  const T* u = static_cast<const T*>(a.up);
  T* y = static_cast<T*>(a.y);
  // 32-bit division where the indices fit (a 64-bit one costs several times the instructions).
  const bool narrow = a.n <= INT32_MAX;
  // One vector per thread and iteration: four, loaded before use, took B1's SwiGLU from 7.0 to 12.2 us per call.
  GridElements<T, kVec>(a.n, [&](int64_t i, auto n) {
    int64_t at = i;  // a vector stays within its row
    if (a.cols > 0) {
      if (narrow) {
        const int i32 = static_cast<int>(i), cols = static_cast<int>(a.cols);
        at = static_cast<int64_t>(i32 / cols) * 2 * cols + i32 % cols;
      } else {
        at = i / a.cols * 2 * a.cols + i % a.cols;
      }
    }
    float gv[n.value], uv[n.value];
    LoadN<T>(g + at, gv);
    LoadN<T>(u + at, uv);
#pragma unroll
    for (int j = 0; j < n.value; ++j) gv[j] = __fmul_rn(Round<T>(Silu(gv[j])), uv[j]);
    StoreN<T>(y + i, gv);
  });
}

// SwiGLU with the norm before the MLP folded into the stacked gate/up projection (SwiGluArgs::norm_x): one block per
// row b, each thread taking every kSwiGluNormThreads-th vector of the row's outputs. A thread issues the loads of its
// first kAhead gate and up vectors (16 bytes each, kept unconverted), then the block sums the squares of norm_x's row
// (RowNormScale, as RopeAppendNormKernel), then per element to_dtype(to_dtype(silu(g)) * u) of g = to_dtype(r_b *
// gate), u = to_dtype(r_b * up), silu on the special-function unit (SiluFast: the exact form took 7.6 against 6.5 us a
// call in B1, whose SwiGLU is bound by its instructions). kN-element vectors where kN > 1 (LaunchSwiGlu), else single
// elements, one at a time.
constexpr int kSwiGluNormThreads = 256;

// silu(g) with the special-function unit's exp2 and reciprocal (MUFU), each within 2 ulp: about a quarter of expf's
// and IEEE division's instructions. Decoding's SwiGluNormKernel only (the trainer's kernels round as ATen).
__device__ __forceinline__ float SiluFast(float g) { return __fdividef(g, 1.0f + exp2f(-g * kLog2e)); }

// SwiGluNormKernel's arithmetic for 16 bytes of bf16 in pairs: each rounding to bf16 of two values is one conversion
// (cvt.rn.bf16x2.f32) and the last product one bf16x2 multiply (the product of two bf16 values is exact in float32,
// so rounding it once is __fmul_rn then Round): the values of the per-element form bit for bit, in about a quarter
// fewer instructions, which is what bounds this kernel (B1: 59.8 against 78.5 ms).
__device__ __forceinline__ uint4 SwiGluNormedPairs(const uint4& graw, const uint4& uraw, float r) {
  const uint32_t gw[4] = {graw.x, graw.y, graw.z, graw.w};
  const uint32_t uw[4] = {uraw.x, uraw.y, uraw.z, uraw.w};
  uint32_t out[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    using W = Word<__nv_bfloat16>;
    const __nv_bfloat162 g = __floats2bfloat162_rn(__fmul_rn(r, W::Get(gw[q], 0)), __fmul_rn(r, W::Get(gw[q], 1)));
    const __nv_bfloat162 u = __floats2bfloat162_rn(__fmul_rn(r, W::Get(uw[q], 0)), __fmul_rn(r, W::Get(uw[q], 1)));
    const float2 gf = __bfloat1622float2(g);
    const __nv_bfloat162 sg = __floats2bfloat162_rn(SiluFast(gf.x), SiluFast(gf.y));
    const __nv_bfloat162 y = __hmul2(sg, u);
    out[q] = *reinterpret_cast<const uint32_t*>(&y);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// kPairs (bf16 with 16-byte vectors): the arithmetic by SwiGluNormedPairs.
template <typename T, int kN, bool kPairs = false>
__global__ void __launch_bounds__(kSwiGluNormThreads) SwiGluNormKernel(const SwiGluArgs a) {
  WaitForPriorGrid();
  AllowDependentGrid();
  __shared__ float warp_ss[kSwiGluNormThreads / 32];
  // Three 16-byte vectors per thread cover Qwen2.5-0.5B's 4864 outputs a row in one round of loads.
  constexpr int kAhead = kN > 1 ? 3 : 1;
  constexpr int kStep = kSwiGluNormThreads * kN;
  using Raw = std::conditional_t<(kN > 1), uint4, T>;
  const int b = blockIdx.x;
  const int cols = static_cast<int>(a.cols);
  const int64_t in_row = static_cast<int64_t>(b) * 2 * cols;
  const T* g = static_cast<const T*>(a.gate) + in_row;
  const T* u = static_cast<const T*>(a.up) + in_row;
  T* y = static_cast<T*>(a.y) + static_cast<int64_t>(b) * cols;
  Raw graw[kAhead], uraw[kAhead];
  auto load = [&](int base) {
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      const int i = base + k * kStep;
      if (i < cols) {
        graw[k] = *reinterpret_cast<const Raw*>(g + i);
        uraw[k] = *reinterpret_cast<const Raw*>(u + i);
      }
    }
  };
  int base = threadIdx.x * kN;
  load(base);  // in flight while the row's scale is summed
  const float r = RowNormScale<T, kSwiGluNormThreads, (kN > 1)>(static_cast<const T*>(a.norm_x) + b * a.norm_stride_b,
                                                                a.norm_hidden, a.eps, warp_ss);
  while (base < cols) {
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      const int i = base + k * kStep;
      if (i >= cols) break;
      if constexpr (kPairs) {
        *reinterpret_cast<uint4*>(y + i) = SwiGluNormedPairs(graw[k], uraw[k], r);
        continue;
      }
      float gv[kN], uv[kN];
      if constexpr (kN > 1) {
        Vec<T>::Unpack(graw[k], gv);
        Vec<T>::Unpack(uraw[k], uv);
      } else {
        gv[0] = ToFloat(graw[k]);
        uv[0] = ToFloat(uraw[k]);
      }
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float gate = Round<T>(__fmul_rn(r, gv[j]));
        gv[j] = __fmul_rn(Round<T>(SiluFast(gate)), Round<T>(__fmul_rn(r, uv[j])));
      }
      StoreN<T>(y + i, gv);
    }
    base += kAhead * kStep;
    load(base);
  }
}

template <typename T, bool kVec>
__global__ void SwiGluBackwardKernel(const SwiGluBackwardArgs a) {
  const T* g = static_cast<const T*>(a.gate);
  const T* u = static_cast<const T*>(a.up);
  const T* dy = static_cast<const T*>(a.dy);
  T* dg = static_cast<T*>(a.dgate);
  T* du = static_cast<T*>(a.dup);
  T* y = static_cast<T*>(a.y);
  const bool narrow = a.n <= INT32_MAX;
  GridElements<T, kVec>(a.n, [&](int64_t i, auto n) {
    int64_t at = i;  // a vector stays within its row (as SwiGluKernel)
    if (a.cols > 0) {
      if (narrow) {
        const int i32 = static_cast<int>(i), cols = static_cast<int>(a.cols);
        at = static_cast<int64_t>(i32 / cols) * 2 * cols + i32 % cols;
      } else {
        at = i / a.cols * 2 * a.cols + i % a.cols;
      }
    }
    float gv[n.value], uv[n.value], dv[n.value];
    LoadN<T>(g + at, gv);
    LoadN<T>(u + at, uv);
    LoadN<T>(dy + i, dv);
    float yv[n.value];
#pragma unroll
    for (int j = 0; j < n.value; ++j) {
      // Autograd of to_dtype(silu(gate)) * up: dup = dy * s and ds = dy * up, each stored in T; then silu_backward.
      // y: SwiGluKernel's value, s * up.
      const float s = Round<T>(Silu(gv[j]));
      const float ds = Round<T>(__fmul_rn(dv[j], uv[j]));
      yv[j] = __fmul_rn(s, uv[j]);
      uv[j] = __fmul_rn(dv[j], s);
      gv[j] = SiluGrad(ds, gv[j]);
    }
    StoreN<T>(du + at, uv);
    StoreN<T>(dg + at, gv);
    if (y != nullptr) StoreN<T>(y + i, yv);
  });
}

// launch(TypeTag<T>, std::bool_constant<kVec>) for the dtype's T: kVec where `aligned` and `n` is a multiple of T's
// vector width.
template <typename F>
cudaError_t DispatchVec(KernelDtype dtype, int64_t n, bool aligned, F&& launch) {
  WithElementType(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    if (aligned && n % Vec<T>::kN == 0) {
      launch(t, std::true_type{});
    } else {
      launch(t, std::false_type{});
    }
  });
  return cudaGetLastError();
}

bool AllAligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if (!Aligned16(p)) return false;
  }
  return true;
}

// Whether each stride (in elements of `elem_bytes`) steps by whole 16-byte units, so that rows starting from an
// aligned pointer stay aligned.
bool StridesAligned(int64_t elem_bytes, std::initializer_list<int64_t> strides) {
  for (int64_t stride : strides) {
    if ((stride * elem_bytes) % 16 != 0) return false;
  }
  return true;
}

unsigned NormBlocks(int64_t rows) {
  const int per_block = kNormThreads / 32;
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}

// Grid-stride element-wise kernels: enough blocks of 256 threads to fill a large GPU (16 per SM of an H100/H200),
// fewer for small tensors.
unsigned ElementBlocks(int64_t work) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((work + 255) / 256, 132LL * 16)));
}

}  // namespace

cudaError_t LaunchRmsNorm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  // The row length alone picks the layout (not the pointers' alignment: see LoadAt).
  return DispatchVec(a.dtype, a.hidden, true, [&](auto t, auto vec) {
    LaunchDependent(RmsNormKernel<typename decltype(t)::type, vec>, NormBlocks(a.rows), kNormThreads, stream, a);
  });
}

int RmsNormBackwardChunks(int64_t rows) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, kNormChunks)));
}

cudaError_t LaunchRmsNormBackward(const RmsNormBackwardArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  if (a.rstd == nullptr) return cudaErrorInvalidValue;
  if (a.dx != nullptr) {
    const cudaError_t e = DispatchVec(a.dtype, a.hidden, true, [&](auto t, auto vec) {
      RmsNormInputGradKernel<typename decltype(t)::type, vec><<<NormBlocks(a.rows), kNormThreads, 0, stream>>>(a);
    });
    if (e != cudaSuccess) return e;
  }
  if (a.dweight_partial != nullptr) {
    const int chunks = RmsNormBackwardChunks(a.rows);
    const int64_t per_chunk = (a.rows + chunks - 1) / chunks;
    const dim3 grid(static_cast<unsigned>((a.hidden + 255) / 256), static_cast<unsigned>(chunks));
    WithElementType(a.dtype, [&](auto t) {
      RmsNormWeightGradKernel<typename decltype(t)::type><<<grid, 256, 0, stream>>>(a, per_chunk);
    });
  }
  return cudaGetLastError();
}

cudaError_t LaunchRopeRows(const RopeRowsArgs& a, cudaStream_t stream) {
  if (a.head_dim % 2 != 0 || a.rows < 0 || a.heads < 0 || (a.index == nullptr) == (a.offsets == nullptr) ||
      (a.offsets != nullptr && a.positions == nullptr) || (a.cos == nullptr) != (a.sin == nullptr) ||
      (a.cos_of_input && a.index == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const int64_t pairs = a.rows * a.heads * (a.head_dim / 2);
  if (pairs == 0) return cudaSuccess;
  if (a.x == nullptr || a.y == nullptr) return cudaErrorInvalidValue;
  const int threads = 256;
  constexpr int64_t kMaxBlocks = 65535LL * 8;
  WithElementType(a.dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    constexpr int kN = Vec<T>::kN;
    // 16-byte pieces where every head's row of x and y and every token's cos and sin start 16-byte aligned.
    const bool vec = (a.head_dim / 2) % kN == 0 && AllAligned({a.x, a.y}) &&
                     (a.cos == nullptr || AllAligned({a.cos, a.sin})) &&
                     StridesAligned(sizeof(T), {a.x_stride, a.y_stride, a.head_dim});
    const int64_t items = vec ? pairs / kN : pairs;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((items + threads - 1) / threads, kMaxBlocks));
    if (vec) {
      RopeRowsKernel<T, kN><<<blocks, threads, 0, stream>>>(a);
    } else {
      RopeRowsKernel<T, 1><<<blocks, threads, 0, stream>>>(a);
    }
  });
  return cudaGetLastError();
}

cudaError_t LaunchRope(const RopeArgs& a, cudaStream_t stream) {
  if (a.head_dim % 2 != 0) return cudaErrorInvalidValue;
  const int64_t pairs = static_cast<int64_t>(a.batch) * a.heads * a.tokens * (a.head_dim / 2);
  if (pairs == 0) return cudaSuccess;
  const int threads = 256;
  constexpr int64_t kMaxBlocks = 65535LL * 8;
  // The kernel's indices are 32-bit, one grid stride past the last item included.
  if (pairs > INT32_MAX - kMaxBlocks * threads) return cudaErrorInvalidValue;
  WithElementType(a.dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    constexpr int kN = Vec<T>::kN;
    // 16-byte pieces where every head's row of x and y and every token's cos and sin start 16-byte aligned.
    const bool vec = (a.head_dim / 2) % kN == 0 && AllAligned({a.x, a.y, a.cos, a.sin}) &&
                     StridesAligned(sizeof(T), {a.stride_b, a.stride_h, a.stride_t, a.y_stride_b, a.y_stride_h,
                                                a.y_stride_t});
    const int64_t items = vec ? pairs / kN : pairs;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((items + threads - 1) / threads, kMaxBlocks));
    if (vec) {
      RopeKernel<T, kN><<<blocks, threads, 0, stream>>>(a);
    } else {
      RopeKernel<T, 1><<<blocks, threads, 0, stream>>>(a);
    }
  });
  return cudaGetLastError();
}

cudaError_t LaunchRopeAppend(const RopeAppendArgs& a, cudaStream_t stream) {
  if (a.head_dim % 2 != 0 || a.rows == nullptr) return cudaErrorInvalidValue;
  const int64_t pairs = static_cast<int64_t>(a.batch) * (a.q_heads + 2 * a.kv_heads) * (a.head_dim / 2);
  if (pairs == 0) return cudaSuccess;
  const int threads = 256;
  WithElementType(a.dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    constexpr int kN = Vec<T>::kN;
    // 16-byte pieces where each row of q, k, v, the caches and cos/sin starts 16-byte aligned (the strides keep it).
    const bool vec = (a.head_dim / 2) % kN == 0 &&
                     AllAligned({a.q, a.k, a.v, a.cos, a.sin, a.q_out, a.k_cache, a.v_cache}) &&
                     StridesAligned(sizeof(T), {a.q_stride_b, a.k_stride_b, a.v_stride_b});
    if (a.norm_x != nullptr) {
      const bool norm_vec = vec && a.norm_hidden % kN == 0 && Aligned16(a.norm_x) &&
                            StridesAligned(sizeof(T), {a.norm_stride_b}) && (a.bias == nullptr || Aligned16(a.bias));
      if (norm_vec) {
        LaunchDependent(RopeAppendNormKernel<T, kN>, static_cast<unsigned>(a.batch), kRopeNormThreads, stream, a);
      } else {
        LaunchDependent(RopeAppendNormKernel<T, 1>, static_cast<unsigned>(a.batch), kRopeNormThreads, stream, a);
      }
      return;
    }
    const int64_t work = vec ? pairs / kN : pairs;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((work + threads - 1) / threads, 65535LL * 8));
    if (vec) {
      LaunchDependent(RopeAppendKernel<T, kN>, blocks, threads, stream, a);
    } else {
      LaunchDependent(RopeAppendKernel<T, 1>, blocks, threads, stream, a);
    }
  });
  return cudaGetLastError();
}

cudaError_t LaunchSwiGlu(const SwiGluArgs& a, cudaStream_t stream) {
  if (a.n == 0) return cudaSuccess;
  if (a.norm_x != nullptr) {
    if (a.cols <= 0 || a.n % a.cols != 0 || a.cols > INT32_MAX / 2 || a.norm_hidden <= 0 ||
        a.n / a.cols > INT32_MAX) {
      return cudaErrorInvalidValue;
    }
    const unsigned rows = static_cast<unsigned>(a.n / a.cols);
    WithElementType(a.dtype, [&](auto t) {
      using T = typename decltype(t)::type;
      constexpr int kN = Vec<T>::kN;
      const bool vec = a.cols % kN == 0 && a.norm_hidden % kN == 0 && AllAligned({a.gate, a.up, a.y, a.norm_x}) &&
                       StridesAligned(sizeof(T), {a.norm_stride_b});
      if (vec) {
        // bf16 in pairs (SwiGluNormedPairs): 59.8 against 78.5 ms over B1 for the same values.
        LaunchDependent(SwiGluNormKernel<T, kN, std::is_same_v<T, __nv_bfloat16>>, rows, kSwiGluNormThreads, stream,
                        a);
      } else {
        LaunchDependent(SwiGluNormKernel<T, 1>, rows, kSwiGluNormThreads, stream, a);
      }
    });
    return cudaGetLastError();
  }
  // Rows of `cols` elements take vectors only where cols is a multiple of the vector width (checked with n below).
  const bool rows_vec = a.cols == 0 || a.cols % 8 == 0;
  return DispatchVec(a.dtype, a.n, rows_vec && AllAligned({a.gate, a.up, a.y}), [&](auto t, auto vec) {
    using T = typename decltype(t)::type;
    LaunchDependent(SwiGluKernel<T, vec>, ElementBlocks(vec ? a.n / Vec<T>::kN : a.n), 256, stream, a);
  });
}

cudaError_t LaunchSwiGluBackward(const SwiGluBackwardArgs& a, cudaStream_t stream) {
  if (a.n == 0) return cudaSuccess;
  if (a.dgate == nullptr || a.dup == nullptr || a.cols < 0 || (a.cols > 0 && a.n % a.cols != 0)) {
    return cudaErrorInvalidValue;
  }
  const bool rows_vec = a.cols == 0 || a.cols % 8 == 0;  // as LaunchSwiGlu
  const bool aligned = rows_vec && AllAligned({a.gate, a.up, a.dy, a.dgate, a.dup, a.y});
  return DispatchVec(a.dtype, a.n, aligned, [&](auto t, auto vec) {
    using T = typename decltype(t)::type;
    SwiGluBackwardKernel<T, vec><<<ElementBlocks(vec ? a.n / Vec<T>::kN : a.n), 256, 0, stream>>>(a);
  });
}

}  // namespace verl::kernels

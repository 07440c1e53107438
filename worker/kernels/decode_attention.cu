// The GQA flash-decoding kernel (decode_attention_kernel.h).
//
// Block (b, g, s) reduces the positions of range s of slot b against the G query heads that share KV head g, kChunk
// positions at a time: each thread scores one position against the G queries (16-byte loads of the key row), one
// warp per head updates that head's running max and sum (base-2 exponentials: the queries are pre-scaled by
// log2(e)) and stores the weights position-major, then each warp accumulates the value rows of every kWarps-th
// position with the lanes spanning the head dimension (coalesced rows; the loads of kVBatch rows issued together, the
// weights of a row read as two float4). The warps' partial outputs are summed through shared memory at the end. With one range
// the block writes the normalised output; with more it writes (unnormalised output, max, sum) per range and
// MergeSplitsKernel combines them.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "worker/kernels/dtype.cuh"
#include "worker/kernels/decode_attention_kernel.h"

namespace verl::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = kThreads;  // positions scored at once, one per thread
constexpr int kMaxGroup = 8;      // query heads per KV head
constexpr float kLog2e = 1.4426950408889634f;

// 16 bytes at p (16-byte aligned) as floats.
template <typename T>
__device__ __forceinline__ void Load16(const T* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < static_cast<int>(16 / sizeof(T)); ++i) out[i] = ToFloat(e[i]);
}

__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// N consecutive elements at p (aligned to their size) in one load where that is 4, 8 or 16 bytes.
template <typename T, int N>
__device__ __forceinline__ void LoadSmall(const T* p, float (&out)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes == 4 || kBytes == 8 || kBytes == 16) {
    using Word = std::conditional_t<kBytes == 4, uint32_t, std::conditional_t<kBytes == 8, uint2, uint4>>;
    const Word raw = *reinterpret_cast<const Word*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = ToFloat(e[j]);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = ToFloat(p[j]);
  }
}

// Positions per range: the capacity cut into `splits` ranges, rounded up to whole chunks.
__host__ __device__ inline int RangeLength(int capacity, int splits) {
  return ((capacity + splits - 1) / splits + kChunk - 1) / kChunk * kChunk;
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) DecodeAttentionKernel(const DecodeAttentionArgs a) {
  constexpr int kVec = D / 32;                            // output dims per lane
  // Value rows whose loads a warp issues before using the first: one row at a time exposed the memory latency per row
  // (B1's shapes on the H200, tools/bench/decode_attention_bench: 8 rows took D = 64 from 105 to 77 us per launch;
  // 16 rows were slower there, faster for D = 128).
  constexpr int kVBatch = D == 64 ? 8 : 16;
  constexpr int kPer16 = static_cast<int>(16 / sizeof(T));  // elements per 16-byte load
  const int b = blockIdx.x;
  const int kvh = blockIdx.y;
  const int split = blockIdx.z;
  const int G = a.q_heads / a.kv_heads;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  __shared__ __align__(16) float qs[kMaxGroup][D];
  __shared__ float p[kMaxGroup][kChunk];              // scores, head-major (the softmax's warp per head reads a row)
  __shared__ __align__(16) float pt[kChunk][kMaxGroup];  // weights, position-major (two float4 per value row)
  __shared__ float m_s[kMaxGroup];
  __shared__ float l_s[kMaxGroup];
  __shared__ float alpha_s[kMaxGroup];
  __shared__ float red[kWarps][kMaxGroup][D];

  const int len = min(a.lengths[b], a.capacity);
  const int begin = split * RangeLength(a.capacity, a.splits);
  const int end = min(len, begin + RangeLength(a.capacity, a.splits));

  const T* q = static_cast<const T*>(a.q) + (static_cast<int64_t>(b) * a.q_heads + kvh * G) * D;
  const float qscale = a.scale * kLog2e;
  for (int i = tid; i < G * D; i += kThreads) qs[i / D][i % D] = ToFloat(q[i]) * qscale;
  if (tid < kMaxGroup) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
    alpha_s[tid] = 1.f;
  }
  const int64_t kv_offset = static_cast<int64_t>(b) * a.kv_stride_b + static_cast<int64_t>(kvh) * a.kv_stride_h;
  const T* kbase = static_cast<const T*>(a.k) + kv_offset;
  const T* vbase = static_cast<const T*>(a.v) + kv_offset;
  float acc[kMaxGroup][kVec];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[g][j] = 0.f;
  }
  __syncthreads();

  for (int c0 = begin; c0 < end; c0 += kChunk) {
    const int n = min(kChunk, end - c0);
    // 1. Scores of position c0 + tid (base 2).
    if (tid < n) {
      const T* krow = kbase + static_cast<int64_t>(c0 + tid) * D;
      float s[kMaxGroup];
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) s[g] = 0.f;
#pragma unroll
      for (int d0 = 0; d0 < D; d0 += kPer16) {
        float kv[kPer16];
        Load16(krow + d0, kv);
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g < G) {
#pragma unroll
            for (int i = 0; i < kPer16; ++i) s[g] = fmaf(qs[g][d0 + i], kv[i], s[g]);
          }
        }
      }
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g < G) p[g][tid] = s[g];
      }
    }
    __syncthreads();
    // 2. Online softmax, one warp per head: p becomes the weights under the new running max.
    for (int g = warp; g < G; g += kWarps) {
      const float m_old = m_s[g];
      float mx = -INFINITY;
      for (int i = lane; i < n; i += 32) mx = fmaxf(mx, p[g][i]);
      const float m_new = fmaxf(m_old, WarpMax(mx));
      float sum = 0.f;
      for (int i = lane; i < n; i += 32) {
        const float e = exp2f(p[g][i] - m_new);
        pt[i][g] = e;
        sum += e;
      }
      sum = WarpSum(sum);
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_new);  // 0 on the first chunk (m_old = -inf)
        alpha_s[g] = alpha;
        l_s[g] = l_s[g] * alpha + sum;
        m_s[g] = m_new;
      }
    }
    __syncthreads();
    // 3. Weighted value rows: warp w takes positions w, w + kWarps, ...; lane takes dims [lane * kVec, + kVec).
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g < G) {
        const float alpha = alpha_s[g];
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[g][j] *= alpha;
      }
    }
    // Warp w takes positions w, w + kWarps, ...; lane takes dims [lane * kVec, + kVec).
    for (int i0 = warp; i0 < n; i0 += kWarps * kVBatch) {
      float vv[kVBatch][kVec];
#pragma unroll
      for (int r = 0; r < kVBatch; ++r) {
        const int i = i0 + r * kWarps;
        if (i < n) {
          LoadSmall<T, kVec>(vbase + static_cast<int64_t>(c0 + i) * D + lane * kVec, vv[r]);
        } else {
#pragma unroll
          for (int j = 0; j < kVec; ++j) vv[r][j] = 0.f;
        }
      }
#pragma unroll
      for (int r = 0; r < kVBatch; ++r) {
        const int i = i0 + r * kWarps;
        if (i < n) {  // rows past n may hold anything (NaN): skipped, not weighted by 0
          const float4* w4 = reinterpret_cast<const float4*>(&pt[i][0]);
          const float4 lo = w4[0], hi = w4[1];
          const float w[kMaxGroup] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
          for (int g = 0; g < kMaxGroup; ++g) {
            if (g < G) {
#pragma unroll
              for (int j = 0; j < kVec; ++j) acc[g][j] = fmaf(w[g], vv[r][j], acc[g][j]);
            }
          }
        }
      }
    }
    __syncthreads();  // p and alpha_s are rewritten by the next chunk
  }

  // 4. Sum the warps' partial outputs.
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g < G) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) red[warp][g][lane * kVec + j] = acc[g][j];
    }
  }
  __syncthreads();
  for (int i = tid; i < G * D; i += kThreads) {
    const int g = i / D;
    const int d = i % D;
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += red[w][g][d];
    const int64_t bh = static_cast<int64_t>(b) * a.q_heads + kvh * G + g;
    if (a.splits == 1) {
      const float l = l_s[g];
      static_cast<T*>(a.out)[bh * D + d] = FromFloat<T>(l > 0.f ? o / l : 0.f);
    } else {
      float* part = a.partial + (bh * a.splits + split) * (D + 2);
      part[d] = o;
      if (d == 0) {
        part[D] = m_s[g];
        part[D + 1] = l_s[g];
      }
    }
  }
}

// One block of D threads per (slot, query head): the ranges' outputs weighted by exp2(max - overall max).
template <typename T, int D>
__global__ void MergeSplitsKernel(const DecodeAttentionArgs a) {
  const int64_t bh = blockIdx.x;
  const float* part = a.partial + bh * a.splits * (D + 2);
  float m_all = -INFINITY;
  for (int s = 0; s < a.splits; ++s) {
    if (part[s * (D + 2) + D + 1] > 0.f) m_all = fmaxf(m_all, part[s * (D + 2) + D]);
  }
  const int d = threadIdx.x;
  float num = 0.f;
  float den = 0.f;
  for (int s = 0; s < a.splits; ++s) {
    const float* r = part + s * (D + 2);
    const float l = r[D + 1];
    if (l > 0.f) {
      const float w = exp2f(r[D] - m_all);
      num = fmaf(w, r[d], num);
      den = fmaf(w, l, den);
    }
  }
  static_cast<T*>(a.out)[bh * D + d] = FromFloat<T>(den > 0.f ? num / den : 0.f);
}

template <typename T, int D>
cudaError_t Launch(const DecodeAttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(a.batch, a.kv_heads, a.splits);
  DecodeAttentionKernel<T, D><<<grid, kThreads, 0, stream>>>(a);
  if (a.splits > 1) MergeSplitsKernel<T, D><<<a.batch * a.q_heads, D, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

bool DecodeAttentionShapeSupported(int q_heads, int kv_heads, int head_dim) {
  return (head_dim == 64 || head_dim == 128) && kv_heads > 0 && q_heads % kv_heads == 0 &&
         q_heads / kv_heads <= kMaxGroup;
}

int DecodeAttentionSplits(int batch, int kv_heads, int capacity, int num_sms) {
  const int blocks = std::max(1, batch * kv_heads);
  const int want = (2 * num_sms + blocks - 1) / blocks;
  const int most = std::max(1, (capacity + kChunk - 1) / kChunk);
  return std::max(1, std::min({want, most, 64}));
}

cudaError_t LaunchDecodeAttention(const DecodeAttentionArgs& a, cudaStream_t stream) {
  if (!DecodeAttentionShapeSupported(a.q_heads, a.kv_heads, a.head_dim) || a.splits < 1 ||
      (a.splits > 1 && a.partial == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (a.batch == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  WithElementType(a.dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    err = a.head_dim == 64 ? Launch<T, 64>(a, stream) : Launch<T, 128>(a, stream);
  });
  return err;
}

}  // namespace verl::kernels

// The GQA flash-decoding kernel (decode_attention_kernel.h).
//
// Block (b, g, s) reduces the positions of range s of slot b against the G query heads that share KV head g, kChunk
// positions at a time. Rows are read in 16-byte pieces, D * sizeof(T) / 16 lanes per row (8 for bf16 and D = 64), so
// a warp reads several whole rows per load and keeps up to 8 loads in flight per lane. Each lane scores its piece of a
// key row against the same piece of the G (pre-scaled, base-2) queries in shared memory, and the row's lanes sum their
// pieces with shuffles; one warp per head updates that head's running max and sum; then each lane
// accumulates its piece of the value rows of the same positions, weighted per head. At the end the rows' lanes and
// the warps' partial outputs are summed (shuffles, shared memory). With one range
// the block writes the normalised output; with more it writes (unnormalised output, max, sum) per range and
// MergeSplitsKernel combines them.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "worker/kernels/dtype.cuh"
#include "worker/kernels/decode_attention_kernel.h"

namespace verl::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = kThreads;  // positions scored at once, one per thread
constexpr int kMaxGroup = 8;      // query heads per KV head
constexpr float kLog2e = 1.4426950408889634f;

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

// Positions per range: the capacity cut into `splits` ranges, rounded up to whole chunks.
__host__ __device__ inline int RangeLength(int capacity, int splits) {
  return ((capacity + splits - 1) / splits + kChunk - 1) / kChunk * kChunk;
}

// The 16-byte pieces of rows: kLanesPerRow lanes span one K or V row, so a warp covers kRowsPerStep rows per step.
template <typename T, int D>
struct RowPieces {
  static constexpr int kPer16 = static_cast<int>(16 / sizeof(T));  // elements per 16-byte load
  static constexpr int kLanesPerRow = D / kPer16;
  static constexpr int kRowsPerStep = 32 / kLanesPerRow;
  static constexpr int kSteps = kChunk / kWarps / kRowsPerStep;  // steps for a warp's share of a chunk
  static constexpr int kBatch = kSteps < 8 ? kSteps : 8;         // loads issued before their first use
  static_assert(kLanesPerRow <= 32 && 32 % kLanesPerRow == 0 && kSteps % kBatch == 0, "row layout");
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) DecodeAttentionKernel(const DecodeAttentionArgs a) {
  using R = RowPieces<T, D>;
  constexpr int kPer16 = R::kPer16;
  constexpr int kPerWarp = kChunk / kWarps;  // positions of a chunk each warp scores and accumulates
  const int b = blockIdx.x;
  const int kvh = blockIdx.y;
  const int split = blockIdx.z;
  const int G = a.q_heads / a.kv_heads;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int piece = lane % R::kLanesPerRow;  // this lane's 16 bytes of a row: dims [piece * kPer16, + kPer16)
  const int row_in_step = lane / R::kLanesPerRow;

  __shared__ float p[kMaxGroup][kChunk];
  __shared__ float m_s[kMaxGroup];
  __shared__ float l_s[kMaxGroup];
  __shared__ float alpha_s[kMaxGroup];
  __shared__ float red[kWarps][kMaxGroup][D];

  const int len = min(a.lengths[b], a.capacity);
  const int begin = split * RangeLength(a.capacity, a.splits);
  const int end = min(len, begin + RangeLength(a.capacity, a.splits));

  // The G queries of the group, pre-scaled (base-2 exponentials); each lane reads its piece as float4s.
  __shared__ __align__(16) float qs[kMaxGroup][D];
  const T* q = static_cast<const T*>(a.q) + (static_cast<int64_t>(b) * a.q_heads + kvh * G) * D;
  const float qscale = a.scale * kLog2e;
  for (int i = tid; i < G * D; i += kThreads) qs[i / D][i % D] = ToFloat(q[i]) * qscale;
  if (tid < kMaxGroup) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
    alpha_s[tid] = 1.f;
  }
  const int64_t kv_offset = static_cast<int64_t>(b) * a.kv_stride_b + static_cast<int64_t>(kvh) * a.kv_stride_h;
  const T* kbase = static_cast<const T*>(a.k) + kv_offset + piece * kPer16;
  const T* vbase = static_cast<const T*>(a.v) + kv_offset + piece * kPer16;
  float acc[kMaxGroup][kPer16];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
#pragma unroll
    for (int j = 0; j < kPer16; ++j) acc[g][j] = 0.f;
  }
  __syncthreads();

  for (int c0 = begin; c0 < end; c0 += kChunk) {
    const int n = min(kChunk, end - c0);
    // 1. Scores (base 2) of the warp's positions: each row's lanes take a piece of the dot products, then sum them.
    for (int s0 = 0; s0 < R::kSteps; s0 += R::kBatch) {
      uint4 raw[R::kBatch];
#pragma unroll
      for (int j = 0; j < R::kBatch; ++j) {
        const int i = warp * kPerWarp + (s0 + j) * R::kRowsPerStep + row_in_step;
        raw[j] = i < n ? *reinterpret_cast<const uint4*>(kbase + static_cast<int64_t>(c0 + i) * D)
                       : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int j = 0; j < R::kBatch; ++j) {
        const int i = warp * kPerWarp + (s0 + j) * R::kRowsPerStep + row_in_step;
        const T* e = reinterpret_cast<const T*>(&raw[j]);
        float kf[kPer16];
#pragma unroll
        for (int k = 0; k < kPer16; ++k) kf[k] = ToFloat(e[k]);
        float sc[kMaxGroup];
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          sc[g] = 0.f;
          if (g < G) {
            const float4* qv = reinterpret_cast<const float4*>(&qs[g][piece * kPer16]);
#pragma unroll
            for (int k4 = 0; k4 < kPer16 / 4; ++k4) {
              const float4 qq = qv[k4];
              sc[g] = fmaf(qq.x, kf[4 * k4], sc[g]);
              sc[g] = fmaf(qq.y, kf[4 * k4 + 1], sc[g]);
              sc[g] = fmaf(qq.z, kf[4 * k4 + 2], sc[g]);
              sc[g] = fmaf(qq.w, kf[4 * k4 + 3], sc[g]);
            }
          }
        }
#pragma unroll
        for (int o = R::kLanesPerRow / 2; o > 0; o >>= 1) {
#pragma unroll
          for (int g = 0; g < kMaxGroup; ++g) {
            if (g < G) sc[g] += __shfl_xor_sync(0xffffffffu, sc[g], o);
          }
        }
        // Lane `piece` of the row stores head `piece` (kLanesPerRow >= 8 >= G).
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g < G && g == piece && i < n) p[g][i] = sc[g];
        }
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
        p[g][i] = e;
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
    // 3. Weighted value rows over the same positions: each lane accumulates its piece of the head dimension.
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g < G) {
        const float alpha = alpha_s[g];
#pragma unroll
        for (int j = 0; j < kPer16; ++j) acc[g][j] *= alpha;
      }
    }
    for (int s0 = 0; s0 < R::kSteps; s0 += R::kBatch) {
      uint4 raw[R::kBatch];
#pragma unroll
      for (int j = 0; j < R::kBatch; ++j) {
        const int i = warp * kPerWarp + (s0 + j) * R::kRowsPerStep + row_in_step;
        raw[j] = i < n ? *reinterpret_cast<const uint4*>(vbase + static_cast<int64_t>(c0 + i) * D)
                       : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int j = 0; j < R::kBatch; ++j) {
        const int i = warp * kPerWarp + (s0 + j) * R::kRowsPerStep + row_in_step;
        if (i < n) {  // rows past n may hold anything (NaN): skipped, not weighted by 0
          const T* e = reinterpret_cast<const T*>(&raw[j]);
#pragma unroll
          for (int g = 0; g < kMaxGroup; ++g) {
            if (g < G) {
              const float w = p[g][i];
#pragma unroll
              for (int k = 0; k < kPer16; ++k) acc[g][k] = fmaf(w, ToFloat(e[k]), acc[g][k]);
            }
          }
        }
      }
    }
    __syncthreads();  // p and alpha_s are rewritten by the next chunk
  }

  // 4. Sum the rows of each step within the warp (lanes with the same piece), then the warps' partial outputs.
#pragma unroll
  for (int o = R::kLanesPerRow; o < 32; o <<= 1) {
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
#pragma unroll
      for (int j = 0; j < kPer16; ++j) acc[g][j] += __shfl_xor_sync(0xffffffffu, acc[g][j], o);
    }
  }
  if (row_in_step == 0) {
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g < G) {
#pragma unroll
        for (int j = 0; j < kPer16; ++j) red[warp][g][piece * kPer16 + j] = acc[g][j];
      }
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

template <typename T>
cudaError_t LaunchDim(const DecodeAttentionArgs& a, cudaStream_t stream) {
  return a.head_dim == 64 ? Launch<T, 64>(a, stream) : Launch<T, 128>(a, stream);
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
  switch (a.dtype) {
    case KernelDtype::kFloat32:
      return LaunchDim<float>(a, stream);
    case KernelDtype::kBFloat16:
      return LaunchDim<__nv_bfloat16>(a, stream);
    case KernelDtype::kFloat16:
      return LaunchDim<__half>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace verl::kernels

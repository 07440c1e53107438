// The GQA flash-decoding kernels (decode_attention_kernel.h): a tensor-core kernel for bfloat16 and float16 (below
// the SIMT one) and the SIMT kernel, which also takes float32.
//
// SIMT: block (b, g, s) reduces the positions of range s of slot b against the G query heads that share KV head g,
// kChunk positions at a time: each thread scores one position against the G queries (16-byte loads of the key row), one
// warp per head updates that head's running max and sum (base-2 exponentials: the queries are pre-scaled by log2(e))
// and stores the weights position-major, then each warp accumulates the value rows of every kWarps-th position with the
// lanes spanning the head dimension (coalesced rows; the loads of kVBatch rows issued together, the weights of a row
// read as two float4). The warps' partial outputs are summed through shared memory at the end. With one range the block
// writes the normalised output; with more it writes (unnormalised output, max, sum) per range and MergeSplitsKernel
// combines them.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "worker/kernels/decode_attention_kernel.h"
#include "worker/kernels/dtype.cuh"
#include "worker/kernels/launch.cuh"

namespace verl::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = kThreads;  // positions scored at once, one per thread
constexpr int kMaxGroup = 8;      // query heads per KV head

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

// The base of slot b's keys (or values) of KV head kvh: `base` advanced to the slot and head.
template <typename T>
__device__ __forceinline__ const T* SlotRows(const void* base, const DecodeAttentionArgs& a, int b, int kvh) {
  return static_cast<const T*>(base) + static_cast<int64_t>(b) * a.kv_stride_b + static_cast<int64_t>(kvh) * a.kv_stride_h;
}

// kPrefix: positions [0, prefix_lengths[b]) read from slot prefix_slots[b] (DecodeAttentionArgs).
template <typename T, int D, bool kPrefix>
__global__ void __launch_bounds__(kThreads) DecodeAttentionKernel(const DecodeAttentionArgs a) {
  WaitForPriorGrid();
  AllowDependentGrid();
  constexpr int kVec = D / 32;  // output dims per lane
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
  __shared__ float p[kMaxGroup][kChunk];                 // scores, head-major (the softmax's warp per head reads a row)
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
  const T* kbase = SlotRows<T>(a.k, a, b, kvh);
  const T* vbase = SlotRows<T>(a.v, a, b, kvh);
  // Row i's keys at krows(i) * D (values likewise): the shared prompt's slot below prefix_len.
  [[maybe_unused]] int prefix_len = 0;
  [[maybe_unused]] const T* kpre = kbase;
  [[maybe_unused]] const T* vpre = vbase;
  if constexpr (kPrefix) {
    prefix_len = a.prefix_lengths[b];
    kpre = SlotRows<T>(a.k, a, a.prefix_slots[b], kvh);
    vpre = SlotRows<T>(a.v, a, a.prefix_slots[b], kvh);
  }
  auto krows = [&](int i) { return kPrefix && i < prefix_len ? kpre : kbase; };
  auto vrows = [&](int i) { return kPrefix && i < prefix_len ? vpre : vbase; };
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
      const T* krow = krows(c0 + tid) + static_cast<int64_t>(c0 + tid) * D;
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
          LoadSmall<T, kVec>(vrows(c0 + i) + static_cast<int64_t>(c0 + i) * D + lane * kVec, vv[r]);
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
      static_cast<T*>(a.out)[bh * D + d] = FromFloat<T>(l == 0.f ? 0.f : o / l);  // NaN (a NaN key or query) stays
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

// ---- The tensor-core kernel (bfloat16 / float16) ----------------------------------------------------------------
//
// Each warp of block (b, g, s) reduces its own tiles of 16 positions with mma.sync m16n8k16 (float32 accumulators)
// and keeps its own running max and sum per query head; the warps' results are merged at the end. The G <= 8 query
// heads are the mma's n = 8 columns, so no product is padding but the heads past G:
//   scores^T [16 positions x 8 heads] = K [16 x D] . Q^T [D x 8]
//   out^T    [D x 8 heads]            = V^T [D x 16] . P^T [16 x 8]
// A dot product does not depend on the order of its terms, so the dimensions are taken in the order in which a lane's
// 16-byte loads bring them: lane (g, t) (g = lane / 4, t = lane % 4) loads, of one key or value row, the pieces
// [32c + 8t, 32c + 8t + 8) for c < D / 32 - whole rows per 4 lanes, coalesced - and the Q fragments are loaded in the
// same order. The K fragments are then the loaded words as they are; the P and V fragments are the transposes of the
// accumulator-layout tiles the lanes hold, which movmatrix forms in registers (no shared memory in the loop).

// Two floats as one word of T (the first in the low half, the element order of an mma fragment).
template <typename T>
__device__ __forceinline__ uint32_t Pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// The transpose of the 8 x 8 tile of 16-bit elements whose row lane / 4, columns 2 (lane % 4) and + 1 this lane holds.
__device__ __forceinline__ uint32_t Transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// d += a . b for one m16n8k16 tile, T inputs, float32 accumulators.
template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Warps per block and tiles of 16 positions a warp loads at once, chosen by sweeps on the H200 (docs/bench): 1-8
// tiles on 2-8 warps, then 1-8 tiles under several minimum-blocks-per-SM launch bounds: 2 tiles on 4 warps with
// `__launch_bounds__(128, 1)` was the fastest at every shape tried (B1's uniform and spread lengths, head dim 128,
// few slots with split ranges): told that one block per SM suffices, ptxas keeps more of the tile's loads in flight
// (106 registers at head dim 64) than with no minimum (66), and that beats the lost occupancy. Then, pipelined (the
// next tiles loaded during the current tiles' math): 1 tile per warp was faster at head dim 64 (116 registers, the
// same occupancy), 2 tiles slower (180 registers) and at head dim 128 spilled; see Launch.
constexpr int kMmaWarps = 4;

// The dimension that column `col` of value word `w`'s 8 x 8 tile stands for: lane (col / 2, .)'s word w holds the
// elements 2 (w % 4) and + 1 of its piece w / 4, i.e. dimensions 32 (w / 4) + 8 (col / 2) + 2 (w % 4) + {0, 1}.
__device__ __forceinline__ int WordDim(int w, int col) {
  return 32 * (w >> 2) + 8 * (col >> 1) + 2 * (w & 3) + (col & 1);
}

// kPipelined: the loads of a warp's next tiles are issued before the current tiles' math (registers double-buffered),
// so a warp keeps its memory requests in flight while it computes.
template <typename T, int D, int kMmaTiles, bool kPipelined, bool kPrefix>
__global__ void __launch_bounds__(kMmaWarps * 32, 1) DecodeAttentionMmaKernel(const DecodeAttentionArgs a) {
  WaitForPriorGrid();
  AllowDependentGrid();
  constexpr int kPieces = D / 32;      // 16-byte pieces a lane loads of a row
  constexpr int kWords = 4 * kPieces;  // their 32-bit words (two elements each); QK^T k-steps and PV m-tiles: kWords/2
  constexpr int kStride = kMmaWarps * kMmaTiles * 16;  // positions the block's warps cover per iteration
  const int b = blockIdx.x;
  const int kvh = blockIdx.y;
  const int split = blockIdx.z;
  const int G = a.q_heads / a.kv_heads;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;

  const int len = min(a.lengths[b], a.capacity);
  const int begin = split * RangeLength(a.capacity, a.splits);
  const int end = min(len, begin + RangeLength(a.capacity, a.splits));

  // Q^T as the B operand: query head g's pieces in the lane's order (zeros for the heads past G).
  uint32_t qf[kWords];
  {
    const T* q = static_cast<const T*>(a.q) + (static_cast<int64_t>(b) * a.q_heads + kvh * G + g) * D;
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      const int d = 32 * (w >> 2) + 8 * t + 2 * (w & 3);
      qf[w] = g < G ? Pack2<T>(ToFloat(q[d]), ToFloat(q[d + 1])) : 0u;
    }
  }
  const T* kbase = SlotRows<T>(a.k, a, b, kvh);
  const T* vbase = SlotRows<T>(a.v, a, b, kvh);
  // The shared prompt's slot below prefix_len (kPrefix).
  [[maybe_unused]] int prefix_len = 0;
  [[maybe_unused]] const T* kpre = kbase;
  [[maybe_unused]] const T* vpre = vbase;
  if constexpr (kPrefix) {
    prefix_len = a.prefix_lengths[b];
    kpre = SlotRows<T>(a.k, a, a.prefix_slots[b], kvh);
    vpre = SlotRows<T>(a.v, a, a.prefix_slots[b], kvh);
  }
  const float qscale = a.scale * kLog2e;

  // This lane's running max and (partial) sum for heads 2t and 2t + 1, and its accumulator fragments of out^T: m-tile
  // i holds (dimension WordDim(2i, g), heads 2t, 2t + 1) and (dimension WordDim(2i + 1, g), the same heads).
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
  float o[kWords / 2][4];
#pragma unroll
  for (int i = 0; i < kWords / 2; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) o[i][r] = 0.f;
  }

  // Rows p0 + 16 tile + 8 h + g of the warp's tiles; rows past the end are zeros (the cache may hold anything there,
  // NaN included).
  auto load = [&](int p0, uint32_t (&kf)[kMmaTiles][2][kWords], uint32_t (&vf)[kMmaTiles][2][kWords]) {
#pragma unroll
    for (int tile = 0; tile < kMmaTiles; ++tile) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = p0 + 16 * tile + 8 * h + g;
        const int64_t off = static_cast<int64_t>(row) * D + 8 * t;
#pragma unroll
        for (int c = 0; c < kPieces; ++c) {
          uint4 kr = make_uint4(0u, 0u, 0u, 0u);
          uint4 vr = make_uint4(0u, 0u, 0u, 0u);
          if (row < end) {
            const bool shared = kPrefix && row < prefix_len;
            kr = *reinterpret_cast<const uint4*>((shared ? kpre : kbase) + off + 32 * c);
            vr = *reinterpret_cast<const uint4*>((shared ? vpre : vbase) + off + 32 * c);
          }
          kf[tile][h][4 * c] = kr.x, kf[tile][h][4 * c + 1] = kr.y, kf[tile][h][4 * c + 2] = kr.z,
                          kf[tile][h][4 * c + 3] = kr.w;
          vf[tile][h][4 * c] = vr.x, vf[tile][h][4 * c + 1] = vr.y, vf[tile][h][4 * c + 2] = vr.z,
                          vf[tile][h][4 * c + 3] = vr.w;
        }
      }
    }
  };
  uint32_t kf[kMmaTiles][2][kWords];
  uint32_t vf[kMmaTiles][2][kWords];
  const int first = begin + warp * kMmaTiles * 16;
  if (kPipelined && first < end) load(first, kf, vf);
  for (int p0 = first; p0 < end; p0 += kStride) {
    uint32_t kn[kMmaTiles][2][kWords];  // kPipelined: the next tiles, loaded while these are computed
    uint32_t vn[kMmaTiles][2][kWords];
    if constexpr (kPipelined) {
      if (p0 + kStride < end) load(p0 + kStride, kn, vn);
    } else {
      load(p0, kf, vf);
    }
    // Scores (base 2): s[tile] holds (position p0 + 16 tile + g, heads 2t, 2t + 1) and (position + 8, same heads).
    float s[kMmaTiles][4];
#pragma unroll
    for (int tile = 0; tile < kMmaTiles; ++tile) {
#pragma unroll
      for (int r = 0; r < 4; ++r) s[tile][r] = 0.f;
#pragma unroll
      for (int k = 0; k < kWords / 2; ++k) {
        Mma<T>(s[tile], kf[tile][0][2 * k], kf[tile][1][2 * k], kf[tile][0][2 * k + 1], kf[tile][1][2 * k + 1],
               qf[2 * k], qf[2 * k + 1]);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = p0 + 16 * tile + g + (r >= 2 ? 8 : 0);
        s[tile][r] = row < end ? s[tile][r] * qscale : -INFINITY;
      }
    }
    // Online softmax per head over the warp's positions (the lanes of one t hold one head pair).
    float alpha[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float mx = -INFINITY;
#pragma unroll
      for (int tile = 0; tile < kMmaTiles; ++tile) mx = fmaxf(mx, fmaxf(s[tile][j], s[tile][2 + j]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m[j], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no position yet: keep every weight 0, not NaN
      alpha[j] = exp2f(m[j] - m_use);
      float sum = 0.f;
#pragma unroll
      for (int tile = 0; tile < kMmaTiles; ++tile) {
        s[tile][j] = exp2f(s[tile][j] - m_use);
        s[tile][2 + j] = exp2f(s[tile][2 + j] - m_use);
        sum += s[tile][j] + s[tile][2 + j];
      }
      l[j] = l[j] * alpha[j] + sum;
      m[j] = m_new;
    }
#pragma unroll
    for (int i = 0; i < kWords / 2; ++i) {
      o[i][0] *= alpha[0];
      o[i][1] *= alpha[1];
      o[i][2] *= alpha[0];
      o[i][3] *= alpha[1];
    }
    // out^T += V^T . P^T, one k-step per tile.
#pragma unroll
    for (int tile = 0; tile < kMmaTiles; ++tile) {
      const uint32_t p_lo = Transpose8x8(Pack2<T>(s[tile][0], s[tile][1]));  // P^T rows p0 + 16 tile + [0, 8)
      const uint32_t p_hi = Transpose8x8(Pack2<T>(s[tile][2], s[tile][3]));  // and [8, 16)
#pragma unroll
      for (int i = 0; i < kWords / 2; ++i) {
        Mma<T>(o[i], Transpose8x8(vf[tile][0][2 * i]), Transpose8x8(vf[tile][0][2 * i + 1]),
               Transpose8x8(vf[tile][1][2 * i]), Transpose8x8(vf[tile][1][2 * i + 1]), p_lo, p_hi);
      }
    }
    if constexpr (kPipelined) {
#pragma unroll
      for (int tile = 0; tile < kMmaTiles; ++tile) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int w = 0; w < kWords; ++w) {
            kf[tile][h][w] = kn[tile][h][w];
            vf[tile][h][w] = vn[tile][h][w];
          }
        }
      }
    }
  }

  // The lanes' partial sums of a head; then the warps' results merged through shared memory.
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    l[j] += __shfl_xor_sync(0xffffffffu, l[j], 4);
    l[j] += __shfl_xor_sync(0xffffffffu, l[j], 8);
    l[j] += __shfl_xor_sync(0xffffffffu, l[j], 16);
  }
  __shared__ float o_s[kMmaWarps][kMaxGroup][D];
  __shared__ float m_s[kMmaWarps][kMaxGroup];
  __shared__ float l_s[kMmaWarps][kMaxGroup];
#pragma unroll
  for (int i = 0; i < kWords / 2; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) o_s[warp][2 * t + (r & 1)][WordDim(2 * i + (r >> 1), g)] = o[i][r];
  }
  if (g == 0) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      m_s[warp][2 * t + j] = m[j];
      l_s[warp][2 * t + j] = l[j];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += kMmaWarps * 32) {
    const int head = i / D;
    const int d = i % D;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) m_all = fmaxf(m_all, m_s[w][head]);
    const float m_use = m_all == -INFINITY ? 0.f : m_all;
    float num = 0.f;
    float den = 0.f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) {
      const float f = exp2f(m_s[w][head] - m_use);
      num = fmaf(f, o_s[w][head][d], num);
      den = fmaf(f, l_s[w][head], den);
    }
    const int64_t bh = static_cast<int64_t>(b) * a.q_heads + kvh * G + head;
    if (a.splits == 1) {
      static_cast<T*>(a.out)[bh * D + d] = FromFloat<T>(den == 0.f ? 0.f : num / den);
    } else {
      float* part = a.partial + (bh * a.splits + split) * (D + 2);
      part[d] = num;
      if (d == 0) {
        part[D] = m_all;
        part[D + 1] = den;
      }
    }
  }
}

// One block of D threads per (slot, query head): the ranges' outputs weighted by exp2(max - overall max).
template <typename T, int D>
__global__ void MergeSplitsKernel(const DecodeAttentionArgs a) {
  WaitForPriorGrid();
  AllowDependentGrid();
  const int64_t bh = blockIdx.x;
  const float* part = a.partial + bh * a.splits * (D + 2);
  float m_all = -INFINITY;
  for (int s = 0; s < a.splits; ++s) {
    if (part[s * (D + 2) + D + 1] != 0.f) m_all = fmaxf(m_all, part[s * (D + 2) + D]);
  }
  const int d = threadIdx.x;
  float num = 0.f;
  float den = 0.f;
  for (int s = 0; s < a.splits; ++s) {
    const float* r = part + s * (D + 2);
    const float l = r[D + 1];
    if (l != 0.f) {  // a range without positions adds nothing; one with a NaN sum makes the output NaN
      const float w = exp2f(r[D] - m_all);
      num = fmaf(w, r[d], num);
      den = fmaf(w, l, den);
    }
  }
  static_cast<T*>(a.out)[bh * D + d] = FromFloat<T>(den == 0.f ? 0.f : num / den);
}

template <typename T, int D>
cudaError_t Launch(const DecodeAttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(a.batch, a.kv_heads, a.splits);
  bool mma = a.impl != DecodeAttentionImpl::kSimt;
  if constexpr (std::is_same_v<T, float>) {
    if (a.impl == DecodeAttentionImpl::kTensorCore) return cudaErrorInvalidValue;
    mma = false;
  }
  const bool prefix = a.prefix_slots != nullptr;
  if (!mma) {
    LaunchDependent(prefix ? DecodeAttentionKernel<T, D, true> : DecodeAttentionKernel<T, D, false>, grid, kThreads,
                    stream, a);
  } else if constexpr (!std::is_same_v<T, float>) {
    // Head dim 64: one tile per warp, the next one's loads in flight during its math (37.9 against 39.3 us at B1's mean
    // shape); 128: two tiles, not pipelined (the pipelined forms were no faster or spilled).
    if constexpr (D == 64) {
      LaunchDependent(prefix ? DecodeAttentionMmaKernel<T, D, 1, true, true> : DecodeAttentionMmaKernel<T, D, 1, true, false>,
                      grid, kMmaWarps * 32, stream, a);
    } else {
      LaunchDependent(prefix ? DecodeAttentionMmaKernel<T, D, 2, false, true>
                             : DecodeAttentionMmaKernel<T, D, 2, false, false>,
                      grid, kMmaWarps * 32, stream, a);
    }
  }
  if (a.splits > 1) LaunchDependent(MergeSplitsKernel<T, D>, a.batch * a.q_heads, D, stream, a);
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
      (a.splits > 1 && a.partial == nullptr) || ((a.prefix_slots == nullptr) != (a.prefix_lengths == nullptr))) {
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

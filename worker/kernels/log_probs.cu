// Token log-probs and entropy from the LM head's logits, forward and backward (log_probs_kernel.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "worker/kernels/dtype.cuh"
#include "worker/kernels/log_probs_kernel.h"
#include "worker/kernels/vec_load.cuh"

namespace verl::kernels {
namespace {

constexpr int kThreads = 256;

// Running softmax statistics of a set of z: max m, s = sum exp(z - m), t = sum exp(z - m) * (z - m). A NaN z makes s
// NaN (and so the row's lse, log-probs and entropy, as ATen's log_softmax gives), whatever m is: an empty set is m =
// -inf with s = 0, and the merges keep a NaN s even where m = -inf.
struct Stats {
  float m = -INFINITY;
  float s = 0.f;
  float t = 0.f;
};

__device__ __forceinline__ Stats Merge(const Stats& a, const Stats& b) {
  if (a.m == -INFINITY && a.s == 0.f) return b;
  if (b.m == -INFINITY && b.s == 0.f) return a;
  // Moving a set's statistics to the new maximum: s' = s * e, t' = e * (t + (m_old - m) * s), e = exp(m_old - m).
  const float m = fmaxf(a.m, b.m);
  const float ea = expf(a.m - m);
  const float eb = expf(b.m - m);
  return {m, a.s * ea + b.s * eb, ea * fmaf(a.m - m, a.s, a.t) + eb * fmaf(b.m - m, b.s, b.t)};
}

// Adds n values (already scaled) to st, rescaling once for the group's maximum.
template <int N>
__device__ __forceinline__ void Accumulate(Stats& st, const float (&z)[N]) {
  float lm = z[0];
#pragma unroll
  for (int j = 1; j < N; ++j) lm = fmaxf(lm, z[j]);
  if (lm == -INFINITY) {  // nothing of positive mass, unless the max skipped a NaN
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (z[j] != z[j]) st.s = NAN;
    }
    return;
  }
  if (lm > st.m) {
    if (st.m != -INFINITY) {  // at m = -inf, s is 0 (or NaN, kept) and t is 0
      const float r = expf(st.m - lm);
      st.t = r * fmaf(st.m - lm, st.s, st.t);
      st.s *= r;
    }
    st.m = lm;
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float d = z[j] - st.m;
    const float e = Exp(d);
    st.s += e;
    if (e > 0.f) st.t = fmaf(e, d, st.t);  // e = 0 for z = -inf: no 0 * inf
  }
}

// The block's merged statistics, in every thread.
__device__ Stats BlockMerge(Stats st) {
  __shared__ Stats warp_stats[kThreads / 32];
  __shared__ Stats total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Stats other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o),
                __shfl_xor_sync(0xffffffffu, st.t, o)};
    st = Merge(st, other);
  }
  if (threadIdx.x % 32 == 0) warp_stats[threadIdx.x / 32] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    Stats all = warp_stats[0];
    for (int w = 1; w < kThreads / 32; ++w) all = Merge(all, warp_stats[w]);
    total = all;
  }
  __syncthreads();
  return total;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) TokenLogProbsKernel(const TokenLogProbsArgs a) {
  constexpr int kN = Vec<T>::kN;
  const int r = blockIdx.x;
  const int V = a.vocab;
  const T* row = static_cast<const T*>(a.logits) + static_cast<int64_t>(r) * V;
  const float inv_t = 1.0f / a.temperature;
  Stats st;
  int tail = 0;
  if (reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    // Two 16-byte loads in flight per thread, their elements accumulated as one group (one rescale check).
    const uint4* vecs_in = reinterpret_cast<const uint4*>(row);
    const int vecs = V / kN;
    int v = threadIdx.x;
    for (; v + kThreads < vecs; v += 2 * kThreads) {
      const uint4 ra = vecs_in[v];
      const uint4 rb = vecs_in[v + kThreads];
      float za[kN], zb[kN], z[2 * kN];
      Vec<T>::Unpack(ra, za);
      Vec<T>::Unpack(rb, zb);
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        z[j] = za[j] * inv_t;
        z[kN + j] = zb[j] * inv_t;
      }
      Accumulate(st, z);
    }
    if (v < vecs) {
      float z[kN];
      Vec<T>::Load(row + v * kN, z);
#pragma unroll
      for (int j = 0; j < kN; ++j) z[j] *= inv_t;
      Accumulate(st, z);
    }
    tail = vecs * kN;
  }
  for (int i = tail + threadIdx.x; i < V; i += kThreads) {
    const float z[1] = {ToFloat(row[i]) * inv_t};
    Accumulate(st, z);
  }
  const Stats all = BlockMerge(st);
  if (threadIdx.x == 0) {
    const float log_s = logf(all.s);
    const float lse = all.m + log_s;
    const int64_t tgt = a.targets[r];
    a.log_probs[r] = (tgt >= 0 && tgt < V) ? ToFloat(row[tgt]) * inv_t - lse : NAN;
    a.entropy[r] = log_s - all.t / all.s;  // lse - sum(p * z) = log s - sum(p * (z - m))
    a.lse[r] = lse;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) TokenLogProbsBackwardKernel(const TokenLogProbsBackwardArgs a) {
  constexpr int kN = Vec<T>::kN;
  const int r = blockIdx.x;
  const int V = a.vocab;
  const int64_t offset = static_cast<int64_t>(r) * V;
  const T* row = static_cast<const T*>(a.logits) + offset;
  T* out = static_cast<T*>(a.grad_logits) + offset;
  const float inv_t = 1.0f / a.temperature;
  const float lse = a.lse[r];
  const float entropy = a.entropy[r];
  const float g_lp = a.grad_log_probs != nullptr ? a.grad_log_probs[r] : 0.f;
  const float g_ent = a.grad_entropy != nullptr ? a.grad_entropy[r] : 0.f;
  const int64_t tgt = a.targets[r];
  // d log_prob / dz = onehot(target) - p;  d entropy / dz = -p * (z - sum(p * z)) = -p * (log p + entropy);
  // dz / dlogits = 1 / temperature.
  auto grad = [&](int i, float v) {
    const float log_p = v * inv_t - lse;
    const float p = Exp(log_p);
    float g = -g_lp * p;
    if (p > 0.f) g -= g_ent * p * (log_p + entropy);  // a -inf logit: p = 0 and no 0 * inf
    if (i == tgt) g += g_lp;
    return g * inv_t;
  };
  int tail = 0;
  if (reinterpret_cast<uintptr_t>(row) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    // Two 16-byte loads in flight per thread before either's gradients are stored (`out` may be `row`: each thread
    // writes only the vectors it has read).
    const uint4* vecs_in = reinterpret_cast<const uint4*>(row);
    const int vecs = V / kN;
    int v = threadIdx.x;
    for (; v + kThreads < vecs; v += 2 * kThreads) {
      const uint4 ra = vecs_in[v];
      const uint4 rb = vecs_in[v + kThreads];
      float x[kN], y[kN];
      Vec<T>::Unpack(ra, x);
      Vec<T>::Unpack(rb, y);
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        x[j] = grad(v * kN + j, x[j]);
        y[j] = grad((v + kThreads) * kN + j, y[j]);
      }
      Vec<T>::Store(out + v * kN, x);
      Vec<T>::Store(out + (v + kThreads) * kN, y);
    }
    if (v < vecs) {
      float x[kN];
      Vec<T>::Load(row + v * kN, x);
#pragma unroll
      for (int j = 0; j < kN; ++j) x[j] = grad(v * kN + j, x[j]);
      Vec<T>::Store(out + v * kN, x);
    }
    tail = vecs * kN;
  }
  for (int i = tail + threadIdx.x; i < V; i += kThreads) out[i] = FromFloat<T>(grad(i, ToFloat(row[i])));
}

// Checks what both launches need, then launches kernel(T) for the dtype.
template <typename Args, typename F>
cudaError_t Dispatch(const Args& a, F&& launch) {
  if (a.rows == 0) return cudaSuccess;
  if (a.vocab <= 0 || !(a.temperature > 0.f)) return cudaErrorInvalidValue;
  WithElementType(a.dtype, launch);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchTokenLogProbs(const TokenLogProbsArgs& a, cudaStream_t stream) {
  if (a.targets == nullptr || a.log_probs == nullptr || a.entropy == nullptr || a.lse == nullptr) {
    return cudaErrorInvalidValue;
  }
  return Dispatch(a, [&](auto t) {
    TokenLogProbsKernel<typename decltype(t)::type><<<a.rows, kThreads, 0, stream>>>(a);
  });
}

cudaError_t LaunchTokenLogProbsBackward(const TokenLogProbsBackwardArgs& a, cudaStream_t stream) {
  if (a.targets == nullptr || a.lse == nullptr || a.entropy == nullptr || a.grad_logits == nullptr) {
    return cudaErrorInvalidValue;
  }
  return Dispatch(a, [&](auto t) {
    TokenLogProbsBackwardKernel<typename decltype(t)::type><<<a.rows, kThreads, 0, stream>>>(a);
  });
}

}  // namespace verl::kernels

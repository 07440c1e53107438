// The fused sampling kernel (sampling_kernel.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "worker/kernels/dtype.cuh"
#include "worker/kernels/sampling_kernel.h"
#include "worker/kernels/vec_load.cuh"

namespace verl::kernels {
namespace {

constexpr int kThreads = 512;

struct MaxAt {
  float value;
  int index;
};

struct FirstMax {
  __device__ __forceinline__ MaxAt operator()(const MaxAt& a, const MaxAt& b) const {
    if (a.value > b.value) return a;
    if (b.value > a.value) return b;
    return a.index <= b.index ? a : b;
  }
};

struct IntMax {
  __device__ __forceinline__ int operator()(int a, int b) const { return a > b ? a : b; }
};

template <typename T>
__global__ void __launch_bounds__(kThreads) SampleKernel(const SampleArgs a) {
  using ReduceMax = cub::BlockReduce<MaxAt, kThreads>;
  using Scan = cub::BlockScan<double, kThreads>;
  using ReduceInt = cub::BlockReduce<int, kThreads>;
  __shared__ union {
    typename ReduceMax::TempStorage max;
    typename Scan::TempStorage scan;
    typename ReduceInt::TempStorage last;
  } temp;
  __shared__ float s_max;
  __shared__ int s_arg;
  __shared__ double s_total;
  __shared__ int s_token;
  __shared__ int s_last_thread;

  constexpr int kPer = static_cast<int>(16 / sizeof(T));
  const int r = blockIdx.x;
  const T* row = static_cast<const T*>(a.logits) + static_cast<int64_t>(r) * a.row_stride;
  const int V = a.vocab;
  const int seg = ((V + kThreads - 1) / kThreads + kPer - 1) / kPer * kPer;
  const int begin = min(V, static_cast<int>(threadIdx.x) * seg);
  const int end = min(V, begin + seg);
  const bool vec = reinterpret_cast<uintptr_t>(row) % 16 == 0;
  // ATen's CUDA division by a scalar multiplies by its float reciprocal: so do we, so that these log-probs equal the
  // trainer's logits / temperature on the GPU.
  const bool scale = a.temperature > 0.f;
  const float inv_temperature = scale ? 1.0f / a.temperature : 1.0f;
  auto scaled = [&](float v) { return scale ? v * inv_temperature : v; };

  // 1. One read of the row: each thread's segment max (its first index) and the segment's sum of exp(x - that max),
  //    rescaled whenever the max grows; then the row's max and first index holding it.
  float seg_max = -INFINITY;
  int seg_arg = INT_MAX;
  float seg_sum = 0.f;
  ForEach(row, begin, end, vec, [&](int i, float v) {
    const float x = scaled(v);
    if (x > seg_max) {
      seg_sum = seg_sum * expf(seg_max - x) + 1.f;  // exp(-inf) = 0 for the first finite value
      seg_max = x;
      seg_arg = i;
    } else if (seg_max > -INFINITY) {
      seg_sum += expf(x - seg_max);
    }
  });
  const MaxAt best = ReduceMax(temp.max).Reduce(MaxAt{seg_max, seg_arg}, FirstMax());
  if (threadIdx.x == 0) {
    s_max = best.value;
    s_arg = best.index;
    s_token = -1;
  }
  __syncthreads();
  const float m = s_max;

  // 2. Segment sums of exp(x - max), scanned across the block in float64.
  const float s = seg_max > -INFINITY ? seg_sum * expf(seg_max - m) : 0.f;
  double prefix = 0.0;
  double total = 0.0;
  Scan(temp.scan).ExclusiveSum(static_cast<double>(s), prefix, total);
  if (threadIdx.x == 0) s_total = total;
  __syncthreads();
  total = s_total;

  // 3. The token: the max's index (greedy), or where the cumulative mass passes u * total: the thread whose segment
  //    holds that point sums its terms again one by one (if that sum, rounded differently from the rescaled one,
  //    stops short of the point, the segment's last token of positive mass).
  if (a.greedy) {
    if (threadIdx.x == 0) s_token = s_arg;
  } else {
    const double target = a.uniforms[r] * total;
    if (s > 0.f && prefix <= target && target < prefix + static_cast<double>(s)) {
      float c = 0.f;
      int found = -1;
      int last_positive = -1;
      ForEach(row, begin, end, vec, [&](int i, float v) {
        const float e = expf(scaled(v) - m);
        c += e;
        if (e > 0.f) last_positive = i;
        if (found < 0 && prefix + static_cast<double>(c) > target) found = i;
      });
      s_token = found >= 0 ? found : last_positive;  // one thread's segment holds the target
    }
    __syncthreads();
    if (s_token < 0) {
      // u * total rounded up to the total: the last token of positive mass.
      const int last = ReduceInt(temp.last).Reduce(s > 0.f ? static_cast<int>(threadIdx.x) : -1, IntMax());
      if (threadIdx.x == 0) s_last_thread = last;
      __syncthreads();
      if (static_cast<int>(threadIdx.x) == s_last_thread) {
        int found = -1;
        ForEach(row, begin, end, vec, [&](int i, float v) {
          if (expf(scaled(v) - m) > 0.f) found = i;
        });
        s_token = found;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // A row without a finite maximum (all NaN or -inf) has no valid draw: fall back to the argmax, or token 0, so
    // that the caller never embeds an id outside the vocabulary.
    int tok = s_token;
    if (tok < 0 || tok >= V) tok = (s_arg >= 0 && s_arg < V) ? s_arg : 0;
    a.tokens[r] = tok;
    a.log_probs[r] = scaled(ToFloat(row[tok])) - m - static_cast<float>(log(total));
  }
}

}  // namespace

cudaError_t LaunchSample(const SampleArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  if (a.vocab <= 0 || a.tokens == nullptr || a.log_probs == nullptr || (!a.greedy && a.uniforms == nullptr)) {
    return cudaErrorInvalidValue;
  }
  WithElementType(a.dtype, [&](auto t) {
    SampleKernel<typename decltype(t)::type><<<a.rows, kThreads, 0, stream>>>(a);
  });
  return cudaGetLastError();
}

}  // namespace verl::kernels

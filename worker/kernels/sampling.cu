// The fused sampling kernel (sampling_kernel.h).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <type_traits>

#include "worker/kernels/dtype.cuh"
#include "worker/kernels/launch.cuh"
#include "worker/kernels/sampling_kernel.h"

namespace verl::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

// Every weight is dtype.cuh's Exp (exp2 of d log2(e); expf's range reduction took twice the instructions per element
// of the rest of the row's read), in every pass, so that the segments' masses and the rescans agree.

// A running (max, first index of it, sum of exp(x - max)) over some elements; AddGroup takes a few more, Merge
// another state (of elements that all come after this one's, so that ties keep the first index). A NaN element makes
// the sum NaN (the max skips it), even before any finite one (max -inf): the row's log-probs come out NaN, as ATen's
// log_softmax gives, and the draw falls back to a token of positive mass or the argmax.
struct Running {
  float max = -INFINITY;
  int arg = INT_MAX;
  float sum = 0.f;
  // Takes N consecutive elements from index `first` (-inf past the row's end): one rescale for the group's max, a
  // compare and a (rarely divergent) branch per group rather than per element.
  template <int N>
  __device__ __forceinline__ void AddGroup(int first, const float (&x)[N]) {
    float lm = x[0];
#pragma unroll
    for (int j = 1; j < N; ++j) lm = fmaxf(lm, x[j]);  // skips NaN
    if (lm > max) {
      int j0 = N - 1;
#pragma unroll
      for (int j = N - 1; j >= 0; --j) {
        if (x[j] == lm) j0 = j;  // the group's first index of its max
      }
      sum *= Exp(max - lm);  // 0 (or NaN, kept) at max -inf
      max = lm;
      arg = first + j0;
    }
    if (max > -INFINITY) {
#pragma unroll
      for (int j = 0; j < N; ++j) sum += Exp(x[j] - max);  // exactly 1 for the max itself, 0 for -inf
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        if (x[j] != x[j]) sum = NAN;
      }
    }
  }
  __device__ __forceinline__ void Merge(const Running& o) {
    if (o.max > max) {
      sum = (max > -INFINITY ? sum * Exp(max - o.max) : sum) + o.sum;  // sum is 0 or NaN at max -inf
      max = o.max;
      arg = o.arg;
    } else if (o.max > -INFINITY) {
      sum += o.sum * Exp(o.max - max);
      if (o.max == max) arg = min(arg, o.arg);
    } else {
      sum += o.sum;  // 0, or NaN
    }
  }
};

// The order-preserving integer key of a value read as T (and converted to float exactly): a larger value has a larger
// key, equal values the same one (but -0 and +0, adjacent keys). bf16 and fp16 values have 16-bit keys (their bits
// with the sign flipped, the rest too when negative), float32 values 32-bit ones. ValueOf is the inverse over the keys
// of -inf to +inf: the filters' searches run over keys and compare values, x >= ValueOf(key), so that -0 and +0 count
// as the equal values they are. (NaN keys fall outside; rows with a NaN are not filtered.)
__device__ __forceinline__ uint32_t Key16(uint32_t bits) {
  return (bits & 0x8000u) ? (~bits & 0xFFFFu) : (bits | 0x8000u);
}
__device__ __forceinline__ uint32_t Bits16(uint32_t key) { return (key & 0x8000u) ? (key & 0x7FFFu) : (~key & 0xFFFFu); }
template <typename T>
struct OrderKey;
template <>
struct OrderKey<float> {
  __device__ static uint32_t Of(float v) {
    const uint32_t b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  }
  __device__ static float ValueOf(uint32_t k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k); }
};
template <>
struct OrderKey<__nv_bfloat16> {
  __device__ static uint32_t Of(float v) { return Key16(__float_as_uint(v) >> 16); }  // the bf16's own bits
  __device__ static float ValueOf(uint32_t k) { return __uint_as_float(Bits16(k) << 16); }
};
template <>
struct OrderKey<__half> {
  __device__ static uint32_t Of(float v) { return Key16(__half_as_ushort(__float2half_rn(v))); }  // exact
  __device__ static float ValueOf(uint32_t k) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(Bits16(k))));
  }
};

// Candidate keys a pass of the filters' search tries at once (the search keeps one of kCandidates + 1 intervals).
constexpr int kCandidates = 4;

// f(first, x) for the vectors of [begin, end) that lane `lane` of the warp owning that range takes: in each stride of
// 32 vectors (32 * kPer elements, counted from begin), the lane's own vector of kPer elements from index `first` =
// base + lane * kPer, as floats, -inf past `end`; in increasing first. 16-byte loads where `vec` (the row 16-byte
// aligned; begin is a multiple of the stride), 4 in flight.
template <typename T, typename F>
__device__ __forceinline__ void LaneVectors(const T* row, int begin, int end, int lane, bool vec, F&& f) {
  constexpr int kPer = static_cast<int>(16 / sizeof(T));
  constexpr int kStride = 32 * kPer;
  constexpr int kBatch = 4;
  int base = begin;
  if (vec) {
    for (; base + kBatch * kStride <= end; base += kBatch * kStride) {
      uint4 raw[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) raw[b] = *reinterpret_cast<const uint4*>(row + base + b * kStride + lane * kPer);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const T* e = reinterpret_cast<const T*>(&raw[b]);
        float x[kPer];
#pragma unroll
        for (int j = 0; j < kPer; ++j) x[j] = ToFloat(e[j]);
        f(base + b * kStride + lane * kPer, x);
      }
    }
  }
  for (; base < end; base += kStride) {
    const int first = base + lane * kPer;
    float x[kPer];
    if (vec && first + kPer <= end) {
      const uint4 raw = *reinterpret_cast<const uint4*>(row + first);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kPer; ++j) x[j] = ToFloat(e[j]);
    } else {
#pragma unroll
      for (int j = 0; j < kPer; ++j) x[j] = first + j < end ? ToFloat(row[first + j]) : -INFINITY;
    }
    f(first, x);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) SampleKernel(const SampleArgs a) {
  constexpr int kPer = static_cast<int>(16 / sizeof(T));
  constexpr int kStride = 32 * kPer;
  __shared__ Running s_warp[kWarps];
  __shared__ float s_max;
  __shared__ int s_arg;
  __shared__ double s_total;
  __shared__ int s_warp_hit;  // the warp whose segment holds the draw
  __shared__ double s_prefix;  // the mass before that segment
  __shared__ int s_token;
  __shared__ float s_piece_mass[kWarps];  // step 3: each warp's piece of the hit segment
  __shared__ int s_piece_last[kWarps];
  __shared__ int s_piece_hit;
  __shared__ double s_piece_prefix;
  __shared__ double s_seg_mass[kWarps];  // each warp segment's mass (of the kept tokens when filtering)
  __shared__ double s_draw_total;        // the mass the draw runs over
  __shared__ bool s_filter;
  __shared__ int s_part_count[kWarps][kCandidates];  // the filters' search: each warp's count and mass at or above
  __shared__ float s_part_mass[kWarps][kCandidates];  // each candidate key, then the row's
  __shared__ int s_count[kCandidates];
  __shared__ float s_mass[kCandidates];

  WaitForPriorGrid();
  AllowDependentGrid();
  const int r = blockIdx.x;
  const T* row = static_cast<const T*>(a.logits) + static_cast<int64_t>(r) * a.row_stride;
  const int V = a.vocab;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // Warp w owns the contiguous segment [w * seg, (w + 1) * seg) (the CDF runs over the warps' segments in order); its
  // lanes read it coalesced, 32 consecutive vectors at a time.
  const int seg = ((V + kWarps - 1) / kWarps + kStride - 1) / kStride * kStride;
  const int begin = min(V, warp * seg);
  const int end = min(V, begin + seg);
  const bool vec = reinterpret_cast<uintptr_t>(row) % 16 == 0;
  // ATen's CUDA division by a scalar multiplies by its float reciprocal: so do we, so that these log-probs equal the
  // trainer's logits / temperature on the GPU.
  const bool scale = a.temperature > 0.f;
  const float inv_temperature = scale ? 1.0f / a.temperature : 1.0f;
  auto scaled = [&](float v) { return scale ? v * inv_temperature : v; };

  // 1. One read of the row: each lane's running max / first index / sum, merged across the warp and then the block.
  Running mine;
  LaneVectors(row, begin, end, lane, vec, [&](int first, float (&x)[kPer]) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) x[j] = scaled(x[j]);
    mine.AddGroup(first, x);
  });
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    Running other;
    other.max = __shfl_xor_sync(0xffffffffu, mine.max, o);
    other.arg = __shfl_xor_sync(0xffffffffu, mine.arg, o);
    other.sum = __shfl_xor_sync(0xffffffffu, mine.sum, o);
    mine.Merge(other);  // max and sum do not depend on the order; ties keep the smaller index
  }
  if (lane == 0) s_warp[warp] = mine;
  __syncthreads();

  // 2. Thread 0: the row's max and its first index, each warp segment's mass relative to that max, and their total in
  //    float64 (2b redoes the segments' masses over the kept tokens when filtering; 2c finds the draw's segment).
  if (threadIdx.x == 0) {
    float m = -INFINITY;
    int arg = INT_MAX;
    for (int w = 0; w < kWarps; ++w) {
      if (s_warp[w].max > m || (s_warp[w].max == m && s_warp[w].arg < arg)) {
        m = s_warp[w].max;
        arg = s_warp[w].arg;
      }
    }
    double mass[kWarps];
    double total = 0.0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      mass[w] = s_warp[w].max > -INFINITY ? static_cast<double>(s_warp[w].sum * Exp(s_warp[w].max - m)) : 0.0;
      total += mass[w];
      if (s_warp[w].max == -INFINITY) total += s_warp[w].sum;  // 0, or NaN: a NaN logit makes the log-probs NaN
    }
    s_max = m;
    s_arg = arg;
    s_total = total;
    s_draw_total = total;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s_seg_mass[w] = mass[w];
    s_token = -1;
    s_warp_hit = -1;
    // A row whose mass is NaN is drawn unfiltered (sampling_kernel.h).
    s_filter = !a.greedy && (a.top_p < 1.f || (a.top_k > 0 && a.top_k < V)) && total == total && arg < V;
  }
  __syncthreads();
  const float m = s_max;
  const double total = s_total;
  const bool filter = s_filter;

  // 2b. The filters: the smallest key kept (floor_key, whose value is floor_value), by searches over the keys; then
  //     each warp segment's mass of the kept tokens. (All threads run the searches alike, from the shared sums.)
  uint32_t floor_key = 0;
  float floor_value = -INFINITY;  // the kept tokens' values are at least this
  if (filter) {
    // The counts (top-k) or the masses (top-p; the tag's value) of the row's tokens whose value is at least that of
    // each key t[0..kCandidates), summed in a fixed order (each lane's elements in order, the warp's lanes by one
    // shuffle tree, the warps in order): the same every time, and never more for a larger key.
    auto sums_at = [&](const uint32_t (&t)[kCandidates], auto mass_tag) {
      constexpr bool kMass = decltype(mass_tag)::value;
      float tv[kCandidates];  // the candidates' values
      int count[kCandidates];
      float mass[kCandidates];
#pragma unroll
      for (int j = 0; j < kCandidates; ++j) tv[j] = OrderKey<T>::ValueOf(t[j]), count[j] = 0, mass[j] = 0.f;
      LaneVectors(row, begin, end, lane, vec, [&](int first, float (&x)[kPer]) {
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          if (first + i >= end) continue;
          if constexpr (kMass) {
            const float e = Exp(scaled(x[i]) - m);
#pragma unroll
            for (int j = 0; j < kCandidates; ++j) mass[j] += x[i] >= tv[j] ? e : 0.f;
          } else {
#pragma unroll
            for (int j = 0; j < kCandidates; ++j) count[j] += x[i] >= tv[j] ? 1 : 0;
          }
        }
      });
#pragma unroll
      for (int j = 0; j < kCandidates; ++j) {
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          count[j] += __shfl_xor_sync(0xffffffffu, count[j], o);
          mass[j] += __shfl_xor_sync(0xffffffffu, mass[j], o);
        }
        if (lane == 0) {
          s_part_count[warp][j] = count[j];
          s_part_mass[warp][j] = mass[j];
        }
      }
      __syncthreads();
      if (threadIdx.x < kCandidates) {
        int c = 0;
        float e = 0.f;
        for (int w = 0; w < kWarps; ++w) {
          c += s_part_count[w][threadIdx.x];
          e += s_part_mass[w][threadIdx.x];
        }
        s_count[threadIdx.x] = c;
        s_mass[threadIdx.x] = e;
      }
      __syncthreads();
    };
    // Candidate j of a pass over the keys [lo, hi): lo + (hi - lo) (j + 1) / (kCandidates + 1), so the largest is above
    // lo once hi - lo >= 2 and every pass narrows the interval.
    auto candidates = [](uint64_t lo, uint64_t hi, uint32_t (&t)[kCandidates]) {
#pragma unroll
      for (int j = 0; j < kCandidates; ++j) t[j] = static_cast<uint32_t>(lo + (hi - lo) * (j + 1) / (kCandidates + 1));
    };
    const uint64_t key_end = uint64_t{OrderKey<T>::Of(ToFloat(row[s_arg]))} + 1;  // above every key of the row
    floor_key = OrderKey<T>::Of(-INFINITY);  // every token's (no NaN here)
    if (a.top_k > 0 && a.top_k < V) {
      // The k-th largest value's key: the largest key with at least k tokens at or above it.
      uint64_t lo = floor_key, hi = key_end;  // count(>= lo) >= k > count(>= hi)
      while (hi - lo > 1) {
        uint32_t t[kCandidates];
        candidates(lo, hi, t);
        sums_at(t, std::false_type{});
#pragma unroll
        for (int j = 0; j < kCandidates; ++j) {
          if (s_count[j] >= a.top_k) {
            lo = t[j] > lo ? t[j] : lo;
          } else {
            hi = t[j] < hi ? t[j] : hi;
          }
        }
        __syncthreads();  // every thread has read the sums before the next pass writes them
      }
      floor_key = static_cast<uint32_t>(lo);
    }
    if (a.top_p < 1.f) {
      // Among the kept tokens, a token stays when the mass of those strictly above its value is at most P = top_p of
      // theirs: the keys at or above s0 - 1, s0 being the smallest key whose mass at or above is at most P. The first
      // pass also gives the kept mass (at floor_key) and so P.
      uint64_t lo = floor_key, hi = key_end;  // mass(>= lo) > P >= mass(>= hi) = 0
      // A first guess at a lower bound: a token L below the max (scaled) with L = ln(V / (1 - top_p)) + 1 is dropped,
      // as all the tokens at or below it hold less than V e^-L < (1 - top_p) of the mass (the max alone holds 1). So
      // the first pass tries that key beside the kept mass's, and the interval narrows to the values that matter; the
      // pass's sums decide, so a guess off by rounding only costs passes.
      const float L = logf(static_cast<float>(V) / (1.f - a.top_p)) + 1.f;
      const float guess = scale ? (m - L) * a.temperature : m - L;  // a raw value
      const uint64_t guess_key = OrderKey<T>::Of(guess);
      float P = 0.f;
      for (bool first = true; first || hi - lo > 1; first = false) {
        uint32_t t[kCandidates];
        if (first) {
          // t[0]: the kept mass (for P); t[1]: the guess; t[2], t[3]: a third and two thirds of the way from it to hi.
          const uint64_t from = guess_key > lo && guess_key < hi ? guess_key : lo;
          t[0] = static_cast<uint32_t>(lo);
          t[1] = static_cast<uint32_t>(from);
          t[2] = static_cast<uint32_t>(from + (hi - from) / 3);
          t[3] = static_cast<uint32_t>(from + (hi - from) * 2 / 3);
        } else {
          candidates(lo, hi, t);
        }
        sums_at(t, std::true_type{});
        if (first) P = a.top_p * s_mass[0];
#pragma unroll
        for (int j = first ? 1 : 0; j < kCandidates; ++j) {
          if (s_mass[j] > P) {
            lo = t[j] > lo ? t[j] : lo;
          } else {
            hi = t[j] < hi ? t[j] : hi;
          }
        }
        __syncthreads();
      }
      floor_key = static_cast<uint32_t>(hi - 1);
    }
    floor_value = OrderKey<T>::ValueOf(floor_key);
    float kept = 0.f;
    LaneVectors(row, begin, end, lane, vec, [&](int first, float (&x)[kPer]) {
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        if (first + i < end && x[i] >= floor_value) kept += Exp(scaled(x[i]) - m);
      }
    });
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) kept += __shfl_xor_sync(0xffffffffu, kept, o);
    if (lane == 0) s_seg_mass[warp] = static_cast<double>(kept);
    __syncthreads();
    if (threadIdx.x == 0) {
      double kept_total = 0.0;
      for (int w = 0; w < kWarps; ++w) kept_total += s_seg_mass[w];
      s_draw_total = kept_total;
    }
  }
  // A token's mass in the draw: 0 when a filter drops it.
  auto draw_mass = [&](float x) {
    const float e = Exp(scaled(x) - m);
    return filter && !(x >= floor_value) ? 0.f : e;
  };

  // 2c. Thread 0: the segment where the cumulative mass passes u * the draw's total.
  if (!a.greedy && threadIdx.x == 0) {
    const double target = a.uniforms[r] * s_draw_total;
    double prefix = 0.0;
    int last = -1;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const double mw = s_seg_mass[w];
      if (mw > 0.0) {
        last = w;
        if (s_warp_hit < 0 && target < prefix + mw) {
          s_warp_hit = w;
          s_prefix = prefix;
        }
        prefix += mw;
      }
    }
    if (s_warp_hit < 0 && last >= 0) {  // u * total rounded up to the total: the last segment of positive mass
      s_warp_hit = last;
      s_prefix = -INFINITY;  // its last token of positive mass
    }
  }
  __syncthreads();
  const double draw_total = s_draw_total;

  // 3. Sampling, in two levels. Every warp sums exp(x - max) over its piece of that segment (whole strides of it),
  //    thread 0 finds the piece where the cumulative mass passes u * total, and that piece's warp reads it again, 32
  //    vectors at a time in order, for the first token whose cumulative mass passes it. Where the sums, rounded
  //    otherwise than the level above, stop short: the last token of positive mass of that piece (of the segment if
  //    no piece reaches it). (One warp scanning the whole segment was half the kernel's time at B1's shape: up to 38
  //    dependent rounds of loads.)
  if (!a.greedy && s_warp_hit >= 0) {
    const int hit_begin = min(V, s_warp_hit * seg);
    const int hit_end = min(V, hit_begin + seg);
    const int piece = (seg / kStride + kWarps - 1) / kWarps * kStride;
    const int pb = min(hit_end, hit_begin + warp * piece);
    const int pe = min(hit_end, pb + piece);
    float piece_mass = 0.f;
    int piece_last = -1;  // its last token of positive mass
    LaneVectors(row, pb, pe, lane, vec, [&](int first, float (&x)[kPer]) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        if (first + j >= pe) break;
        const float e = draw_mass(x[j]);
        piece_mass += e;
        if (e > 0.f) piece_last = first + j;
      }
    });
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      piece_mass += __shfl_xor_sync(0xffffffffu, piece_mass, o);
      piece_last = max(piece_last, __shfl_xor_sync(0xffffffffu, piece_last, o));
    }
    if (lane == 0) {
      s_piece_mass[warp] = piece_mass;
      s_piece_last[warp] = piece_last;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const double target = a.uniforms[r] * draw_total;
      double prefix = s_prefix;
      int hit = -1;
      int last = -1;
      for (int w = 0; w < kWarps; ++w) {
        if (s_piece_mass[w] > 0.f) {
          last = w;
          if (hit < 0 && prefix + static_cast<double>(s_piece_mass[w]) > target) {
            hit = w;
            s_piece_prefix = prefix;
          }
          prefix += static_cast<double>(s_piece_mass[w]);
        }
      }
      s_piece_hit = hit;
      if (hit < 0 && last >= 0) s_token = s_piece_last[last];
    }
    __syncthreads();
    if (warp == s_piece_hit) {
      const double target = a.uniforms[r] * draw_total;
      double prefix = s_piece_prefix;
      int found = -1;
      int last_positive = -1;
      for (int base = pb; base < pe && found < 0; base += kStride) {
        // This lane's vector: exp(x - max) of its elements, 0 past the end.
        const int first = base + lane * kPer;
        float e[kPer];
        if (vec && first + kPer <= pe) {
          const uint4 raw = *reinterpret_cast<const uint4*>(row + first);
          const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int j = 0; j < kPer; ++j) e[j] = draw_mass(ToFloat(v[j]));
        } else {
#pragma unroll
          for (int j = 0; j < kPer; ++j) e[j] = first + j < pe ? draw_mass(ToFloat(row[first + j])) : 0.f;
        }
        float c = 0.f;
        int lp = -1;  // this vector's last token of positive mass
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          c += e[j];
          if (e[j] > 0.f) lp = first + j;
        }
        // Inclusive scan of the lanes' sums: the mass up to the end of each lane's vector.
        float inclusive = c;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const float up = __shfl_up_sync(0xffffffffu, inclusive, o);
          if (lane >= o) inclusive += up;
        }
        const float chunk = __shfl_sync(0xffffffffu, inclusive, 31);
        const unsigned hit = __ballot_sync(0xffffffffu, prefix + static_cast<double>(inclusive) > target);
        const unsigned positive = __ballot_sync(0xffffffffu, lp >= 0);
        if (hit) {
          const int lane_hit = __ffs(hit) - 1;
          int pick = -1;
          if (lane == lane_hit) {
            // The first element of positive mass past the target; the vector's last of positive mass if this lane's
            // element-by-element sum, rounded otherwise than the scan, stops short.
            double run = prefix + static_cast<double>(inclusive - c);
#pragma unroll
            for (int j = 0; j < kPer; ++j) {
              run += static_cast<double>(e[j]);
              if (pick < 0 && e[j] > 0.f && run > target) pick = first + j;
            }
            if (pick < 0) pick = lp;
          }
          found = __shfl_sync(0xffffffffu, pick, lane_hit);
          if (found < 0) {
            // The scan crossed the target at a lane without mass (its lanes' sums rounded in another order than the
            // lanes before it: with u within float rounding of 1, a lane past the row's end): the last token of
            // positive mass before that lane, in this vector row or an earlier one. Taking the lane's first element
            // drew a token of zero mass, or one past the vocabulary (then the argmax) - 4 % of rows at u = 1 - 2^-53.
            const unsigned before = positive & ((1u << lane_hit) - 1u);
            found = before ? __shfl_sync(0xffffffffu, lp, 31 - __clz(before)) : last_positive;
          }
        }
        if (positive) last_positive = __shfl_sync(0xffffffffu, lp, 31 - __clz(positive));
        prefix += static_cast<double>(chunk);
      }
      if (lane == 0) s_token = found >= 0 ? found : last_positive;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // Greedy: the first index of the max. A row without a finite maximum (all NaN or -inf) has no valid draw: fall
    // back to the argmax, or token 0, so that the caller never embeds an id outside the vocabulary.
    int tok = a.greedy ? s_arg : s_token;
    if (tok < 0 || tok >= V) tok = (s_arg >= 0 && s_arg < V) ? s_arg : 0;
    a.tokens[r] = tok;
    a.log_probs[r] = scaled(ToFloat(row[tok])) - m - static_cast<float>(log(total));
  }
}

}  // namespace

cudaError_t LaunchSample(const SampleArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  // The segment arithmetic is 32-bit: vocabularies up to 2^30 (Qwen2's is 151936).
  if (a.vocab <= 0 || a.vocab > (1 << 30) || a.tokens == nullptr || a.log_probs == nullptr ||
      (!a.greedy && a.uniforms == nullptr)) {
    return cudaErrorInvalidValue;
  }
  WithElementType(a.dtype, [&](auto t) {
    LaunchDependent(SampleKernel<typename decltype(t)::type>, a.rows, kThreads, stream, a);
  });
  return cudaGetLastError();
}

}  // namespace verl::kernels

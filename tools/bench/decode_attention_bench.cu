// The CUDA decode attention kernel alone on B1's decode shapes (BENCHMARKS.md): microseconds per launch and the
// bytes of keys and values it reads per second (against the H200's ~4.8 TB/s). Torch-free (CUDA runtime only); for
// comparing kernel changes quickly (a build of this target alone takes seconds). Prints one JSON object.
//
//   verl-bench-decode-attention [--batch 512] [--q-heads 14] [--kv-heads 2] [--head-dim 64] [--capacity 768]
//                               [--min-len 512] [--max-len 512] [--iters 50] [--splits 0 (the kernel's choice)]
//                               [--impl auto|simt|mma|read|read-persist] [--blocks-per-sm 8]
//                               [--share 0] [--prefix-len 256]
// --share N (N >= 1): shared prompts (DecodeAttentionArgs::prefix_slots) in groups of N consecutive slots, each slot's
// positions [0, prefix-len) read from its group's first slot (N = 1: every slot its own, the shared form's overhead
// alone); the first slot's positions are copied into the others, so the reference reads the same values.
// Also checks the output against a plain float32 computation from the same bf16 inputs (`max_abs_err`, and
// `max_abs_ref` for scale).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tools/bench/cuda_bench_util.cuh"
#include "worker/kernels/decode_attention_kernel.h"

namespace {

using verl::bench::FillUniform;

// Plain softmax(q k^T * scale) v in float32, one block per (slot, query head); zeros for an empty slot.
__global__ void Reference(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                          const int32_t* lengths, int Hq, int Hkv, int D, int C, float scale, float* out) {
  extern __shared__ float p[];  // [C] weights, then [blockDim.x] for reductions
  float* red = p + C;
  const int b = blockIdx.x / Hq;
  const int h = blockIdx.x % Hq;
  const int kvh = h / (Hq / Hkv);
  const int len = lengths[b];
  const __nv_bfloat16* qr = q + (static_cast<int64_t>(b) * Hq + h) * D;
  const __nv_bfloat16* kb = k + (static_cast<int64_t>(b) * Hkv + kvh) * C * D;
  const __nv_bfloat16* vb = v + (static_cast<int64_t>(b) * Hkv + kvh) * C * D;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    float s = 0.f;
    for (int d = 0; d < D; ++d) s += __bfloat162float(qr[d]) * __bfloat162float(kb[static_cast<int64_t>(i) * D + d]);
    p[i] = s * scale;
    mx = fmaxf(mx, p[i]);
  }
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o /= 2) {
    if (threadIdx.x < o) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + o]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    p[i] = expf(p[i] - mx);
    sum += p[i];
  }
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o /= 2) {
    if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  sum = red[0];
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int i = 0; i < len; ++i) acc += p[i] * __bfloat162float(vb[static_cast<int64_t>(i) * D + d]);
    out[(static_cast<int64_t>(b) * Hq + h) * D + d] = len > 0 ? acc / sum : 0.f;
  }
}

// Keys and values [0, lengths[b]) of slot b's head h in 16-byte loads, 8 in flight per thread of the block; returns a
// value the caller stores conditionally, so that the loads are kept.
__device__ __forceinline__ uint32_t ReadItem(const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* lengths,
                                             int b, int h, int Hkv, int D, int C) {
  const int64_t base = (static_cast<int64_t>(b) * Hkv + h) * C * D;
  const int64_t n = static_cast<int64_t>(lengths[b]) * D / 8;  // 16-byte vectors of each of K and V
  const uint4* k4 = reinterpret_cast<const uint4*>(k + base);
  const uint4* v4 = reinterpret_cast<const uint4*>(v + base);
  uint32_t acc = 0;
  for (int64_t i0 = threadIdx.x; i0 < n; i0 += 4 * blockDim.x) {
    uint4 r[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = i0 + j * blockDim.x;
      r[2 * j] = i < n ? k4[i] : make_uint4(0, 0, 0, 0);
      r[2 * j + 1] = i < n ? v4[i] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) acc ^= r[j].x ^ r[j].y ^ r[j].z ^ r[j].w;
  }
  return acc;
}

// --impl read: what a plain read of the same bytes in the attention's grid takes (its memory floor on this machine):
// block (b, h) of a (B, Hkv) grid reads its item.
__global__ void ReadOnly(const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* lengths, int Hkv, int D, int C,
                         float* sink) {
  const uint32_t acc = ReadItem(k, v, lengths, blockIdx.x, blockIdx.y, Hkv, D, C);
  if (acc == 0x12345678u) sink[blockIdx.x] = 1.f;  // never in practice; keeps the loads
}

// --impl read-persist: the same reads by --blocks-per-sm blocks per SM (default 8), block i taking items i,
// i + gridDim.x, ... in the (B, Hkv) grid's order (b fastest): whether a grid without waves would read faster.
__global__ void ReadPersist(const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* lengths, int B, int Hkv,
                            int D, int C, float* sink) {
  uint32_t acc = 0;
  for (int item = blockIdx.x; item < B * Hkv; item += gridDim.x) {
    acc ^= ReadItem(k, v, lengths, item % B, item / B, Hkv, D, C);
  }
  if (acc == 0x12345678u) sink[blockIdx.x % B] = 1.f;
}

int Flag(int argc, char** argv, const std::string& name, int def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (name == argv[i]) return std::atoi(argv[i + 1]);
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  using verl::kernels::DecodeAttentionArgs;
  const int B = Flag(argc, argv, "--batch", 512);
  const int Hq = Flag(argc, argv, "--q-heads", 14);
  const int Hkv = Flag(argc, argv, "--kv-heads", 2);
  const int D = Flag(argc, argv, "--head-dim", 64);
  const int C = Flag(argc, argv, "--capacity", 768);
  const int min_len = Flag(argc, argv, "--min-len", 512);
  const int max_len = std::max(min_len, Flag(argc, argv, "--max-len", 512));
  const int iters = std::max(1, Flag(argc, argv, "--iters", 50));
  int splits = Flag(argc, argv, "--splits", 0);
  const int blocks_per_sm = std::max(1, Flag(argc, argv, "--blocks-per-sm", 8));
  const int share = std::max(0, Flag(argc, argv, "--share", 0));
  const int prefix_len = std::min(min_len, std::max(0, Flag(argc, argv, "--prefix-len", 256)));
  std::string impl = "auto";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--impl") impl = argv[i + 1];
  }
  if (!verl::kernels::DecodeAttentionShapeSupported(Hq, Hkv, D) || max_len > C) {
    std::fprintf(stderr, "unsupported shape\n");
    return 2;
  }
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (splits <= 0) splits = verl::kernels::DecodeAttentionSplits(B, Hkv, C, sms);

  const int64_t kv_elems = static_cast<int64_t>(B) * Hkv * C * D;
  const int64_t q_elems = static_cast<int64_t>(B) * Hq * D;
  __nv_bfloat16 *q, *k, *v, *out;
  float* partial = nullptr;
  int32_t* lengths;
  CUDA_OK(cudaMalloc(&q, q_elems * 2));
  CUDA_OK(cudaMalloc(&k, kv_elems * 2));
  CUDA_OK(cudaMalloc(&v, kv_elems * 2));
  CUDA_OK(cudaMalloc(&out, q_elems * 2));
  CUDA_OK(cudaMalloc(&lengths, B * sizeof(int32_t)));
  if (splits > 1) CUDA_OK(cudaMalloc(&partial, static_cast<int64_t>(B) * Hq * splits * (D + 2) * sizeof(float)));
  FillUniform<<<1024, 256>>>(q, q_elems, 1, -2.0f, 2.0f);
  FillUniform<<<1024, 256>>>(k, kv_elems, 2, -2.0f, 2.0f);
  FillUniform<<<1024, 256>>>(v, kv_elems, 3, -2.0f, 2.0f);
  std::mt19937 rng(5);
  std::vector<int32_t> len(B);
  int64_t positions = 0;
  for (int b = 0; b < B; ++b) {
    len[b] = min_len + static_cast<int>(rng() % static_cast<unsigned>(max_len - min_len + 1));
    positions += len[b];
  }
  CUDA_OK(cudaMemcpy(lengths, len.data(), B * sizeof(int32_t), cudaMemcpyHostToDevice));
  int32_t *prefix_slots = nullptr, *prefix_lengths = nullptr;
  if (share > 0) {
    std::vector<int32_t> from(B), plen(B, prefix_len);
    for (int b = 0; b < B; ++b) {
      from[b] = b - b % share;
      for (int h = 0; h < Hkv && from[b] != b; ++h) {
        const int64_t dst = (static_cast<int64_t>(b) * Hkv + h) * C * D;
        const int64_t src = (static_cast<int64_t>(from[b]) * Hkv + h) * C * D;
        CUDA_OK(cudaMemcpy(k + dst, k + src, static_cast<int64_t>(prefix_len) * D * 2, cudaMemcpyDeviceToDevice));
        CUDA_OK(cudaMemcpy(v + dst, v + src, static_cast<int64_t>(prefix_len) * D * 2, cudaMemcpyDeviceToDevice));
      }
    }
    CUDA_OK(cudaMalloc(&prefix_slots, B * sizeof(int32_t)));
    CUDA_OK(cudaMalloc(&prefix_lengths, B * sizeof(int32_t)));
    CUDA_OK(cudaMemcpy(prefix_slots, from.data(), B * sizeof(int32_t), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(prefix_lengths, plen.data(), B * sizeof(int32_t), cudaMemcpyHostToDevice));
  }

  DecodeAttentionArgs a;
  a.dtype = verl::kernels::KernelDtype::kBFloat16;
  a.q = q;
  a.k = k;
  a.v = v;
  a.kv_stride_b = static_cast<int64_t>(Hkv) * C * D;
  a.kv_stride_h = static_cast<int64_t>(C) * D;
  a.lengths = lengths;
  a.prefix_slots = prefix_slots;
  a.prefix_lengths = prefix_lengths;
  a.out = out;
  a.partial = partial;
  a.batch = B;
  a.q_heads = Hq;
  a.kv_heads = Hkv;
  a.head_dim = D;
  a.capacity = C;
  a.splits = splits;
  a.scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.impl = impl == "simt"  ? verl::kernels::DecodeAttentionImpl::kSimt
           : impl == "mma" ? verl::kernels::DecodeAttentionImpl::kTensorCore
                           : verl::kernels::DecodeAttentionImpl::kAuto;
  const double bytes = static_cast<double>(positions) * Hkv * D * 2 /*K, V*/ * 2 /*bf16*/ + 2.0 * q_elems * 2;

  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  float* sink;
  CUDA_OK(cudaMalloc(&sink, B * sizeof(float)));
  auto launch = [&]() {
    if (impl == "read") {
      ReadOnly<<<dim3(B, Hkv), 128>>>(k, v, lengths, Hkv, D, C, sink);
    } else if (impl == "read-persist") {
      ReadPersist<<<std::min(B * Hkv, sms * blocks_per_sm), 128>>>(k, v, lengths, B, Hkv, D, C, sink);
    } else {
      return verl::kernels::LaunchDecodeAttention(a, nullptr);
    }
    return cudaGetLastError();
  };
  for (int w = 0; w < 3; ++w) CUDA_OK(launch());
  CUDA_OK(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) CUDA_OK(launch());
  CUDA_OK(cudaEventRecord(stop));
  CUDA_OK(cudaEventSynchronize(stop));
  float ms = 0.f;
  CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
  const double us = 1000.0 * ms / iters;

  float* ref;
  CUDA_OK(cudaMalloc(&ref, q_elems * sizeof(float)));
  Reference<<<B * Hq, 256, (C + 256) * sizeof(float)>>>(q, k, v, lengths, Hq, Hkv, D, C, a.scale, ref);
  CUDA_OK(cudaGetLastError());
  std::vector<__nv_bfloat16> got(q_elems);
  std::vector<float> want(q_elems);
  CUDA_OK(cudaMemcpy(got.data(), out, q_elems * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(want.data(), ref, q_elems * sizeof(float), cudaMemcpyDeviceToHost));
  double max_err = 0.0, max_ref = 0.0;
  for (int64_t i = 0; i < q_elems; ++i) {
    const double e = std::fabs(static_cast<double>(__bfloat162float(got[i])) - want[i]);
    max_err = std::isnan(e) ? INFINITY : std::max(max_err, e);
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
  }
  std::printf(
      "{\"benchmark\": \"decode_attention\", \"batch\": %d, \"q_heads\": %d, \"kv_heads\": %d, "
      "\"head_dim\": %d, \"capacity\": %d, \"min_len\": %d, \"max_len\": %d, \"splits\": %d, "
      "\"impl\": \"%s\", \"share\": %d, \"prefix_len\": %d, \"iters\": %d, \"kv_bytes_per_launch\": %.0f, "
      "\"us_per_launch\": %.2f, \"gb_per_s\": %.1f, \"max_abs_err\": %.3g, \"max_abs_ref\": %.3g}\n",
      B, Hq, Hkv, D, C, min_len, max_len, splits, impl.c_str(), share, share > 0 ? prefix_len : 0, iters, bytes, us,
      bytes / (us * 1e-6) / 1e9, max_err, max_ref);
  return 0;
}

// Probe main: times each CUTLASS form at several row counts, per projection shape, and checks it against cuBLASLt
// (+ the SwiGLU kernel for gate/up) on copy 0 of the weights; prints JSON. See run.sh.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "probe.cuh"

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e = (x);                                                                     \
    if (e != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)
#define CB(x)                                                                 \
  do {                                                                        \
    cublasStatus_t e = (x);                                                   \
    if (e != CUBLAS_STATUS_SUCCESS) {                                         \
      std::fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)e); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

// A device copy of host values.
void* Upload(const std::vector<__nv_bfloat16>& host) {
  void* dev = nullptr;
  CK(cudaMalloc(&dev, host.size() * 2));
  CK(cudaMemcpy(dev, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  return dev;
}

// The stacked gate/up weight w [2c, k] (gate rows, then up rows) interleaved for the SwiGLU epilogues: row 16 b + r is
// gate row 8 b + r (r < 8) or up row 8 b + r - 8.
std::vector<__nv_bfloat16> InterleaveGateUp(const std::vector<__nv_bfloat16>& w, int c, int k) {
  std::vector<__nv_bfloat16> out(w.size());
  for (int row = 0; row < 2 * c; ++row) {
    const int b = row / 16, r = row % 16;
    const int src = r < 8 ? 8 * b + r : c + 8 * b + (r - 8);
    std::copy(w.begin() + static_cast<size_t>(src) * k, w.begin() + static_cast<size_t>(src + 1) * k,
              out.begin() + static_cast<size_t>(row) * k);
  }
  return out;
}

// prepare(cp) for each weight copy; all the handles, or none (those made released) if one could not be prepared.
template <class Prepare, class Release>
std::vector<void*> PrepareCopies(int copies, Prepare&& prepare, Release&& release) {
  std::vector<void*> handles;
  for (int cp = 0; cp < copies; ++cp) {
    void* hd = prepare(cp);
    if (hd == nullptr) {
      for (void* made : handles) release(made);
      return {};
    }
    handles.push_back(hd);
  }
  return handles;
}

// Stacked layout: gu [m, 2c]: gate = [:, :c], up = [:, c:]. 8 outputs a thread.
__global__ void SwigluKernel(const __nv_bfloat16* gu, __nv_bfloat16* y, int64_t m, int c) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i >= m * c) return;
  const int64_t r = i / c, col = i % c;
  const uint4 gv = *reinterpret_cast<const uint4*>(gu + r * 2 * c + col);
  const uint4 uv = *reinterpret_cast<const uint4*>(gu + r * 2 * c + c + col);
  const __nv_bfloat16* g = reinterpret_cast<const __nv_bfloat16*>(&gv);
  const __nv_bfloat16* u = reinterpret_cast<const __nv_bfloat16*>(&uv);
  uint4 ov;
  __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&ov);
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] = __float2bfloat16(SwiGluExact(__bfloat162float(g[j]), __bfloat162float(u[j])));
  *reinterpret_cast<uint4*>(y + i) = ov;
}

// SwiGLU's backward after the down projection's input gradient d [m, c] (as fused_ops.cu's SwiGluBackwardKernel):
// from gate_up [m, 2c], d_gate_up [m, 2c] (gate gradients, then up gradients) and SwiGLU's value into act [m, c].
// 8 elements a thread.
__global__ void SwigluBwdKernel(const __nv_bfloat16* d, const __nv_bfloat16* gate_up, __nv_bfloat16* d_gate_up,
                                __nv_bfloat16* act, int64_t m, int c) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i >= m * c) return;
  const int64_t r = i / c, col = i % c;
  const int64_t gi = r * 2 * c + col, ui = gi + c;
  const uint4 dv = *reinterpret_cast<const uint4*>(d + i);
  const uint4 gv = *reinterpret_cast<const uint4*>(gate_up + gi);
  const uint4 uv = *reinterpret_cast<const uint4*>(gate_up + ui);
  const __nv_bfloat16* dd = reinterpret_cast<const __nv_bfloat16*>(&dv);
  const __nv_bfloat16* g = reinterpret_cast<const __nv_bfloat16*>(&gv);
  const __nv_bfloat16* u = reinterpret_cast<const __nv_bfloat16*>(&uv);
  uint4 dgo, duo, yo;
  __nv_bfloat16* dg = reinterpret_cast<__nv_bfloat16*>(&dgo);
  __nv_bfloat16* du = reinterpret_cast<__nv_bfloat16*>(&duo);
  __nv_bfloat16* y = reinterpret_cast<__nv_bfloat16*>(&yo);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const SwigluBwd v =
        SwigluBwdValues<kSiluExact>(__bfloat162float(dd[j]), __bfloat162float(g[j]), __bfloat162float(u[j]));
    dg[j] = __float2bfloat16(v.dg);
    du[j] = __float2bfloat16(v.du);
    y[j] = __float2bfloat16(v.y);
  }
  *reinterpret_cast<uint4*>(d_gate_up + gi) = dgo;
  *reinterpret_cast<uint4*>(d_gate_up + ui) = duo;
  *reinterpret_cast<uint4*>(act + i) = yo;
}

// The rollout's SwiGLU with the folded post-attention norm (fused_ops.cu's SwiGluNormKernel, in its per-element form):
// one block of 256 threads a row b: r = rsqrt(mean(h_b^2) + eps), then y = to_bf16(to_bf16(silu(g)) u) of
// g = to_bf16(r gate), u = to_bf16(r up) (the fast silu), gate_up [m, 2c] stacked.
__global__ void __launch_bounds__(256) SwigluNormKernel(const __nv_bfloat16* h, const __nv_bfloat16* gate_up,
                                                        __nv_bfloat16* y, int hidden, int c, float eps) {
  __shared__ float warp_ss[8];
  const int b = blockIdx.x;
  const __nv_bfloat16* hr = h + int64_t{b} * hidden;
  float ss = 0.f;
  for (int i = threadIdx.x * 8; i < hidden; i += 256 * 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(hr + i);
    const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&v);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss = fmaf(__bfloat162float(e[j]), __bfloat162float(e[j]), ss);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) warp_ss[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < 8; ++w) total += warp_ss[w];
  const float r = rsqrtf(total / static_cast<float>(hidden) + eps);
  const __nv_bfloat16* g = gate_up + int64_t{b} * 2 * c;
  for (int i = threadIdx.x * 8; i < c; i += 256 * 8) {
    const uint4 gv = *reinterpret_cast<const uint4*>(g + i);
    const uint4 uv = *reinterpret_cast<const uint4*>(g + c + i);
    const __nv_bfloat16* ge = reinterpret_cast<const __nv_bfloat16*>(&gv);
    const __nv_bfloat16* ue = reinterpret_cast<const __nv_bfloat16*>(&uv);
    uint4 ov;
    __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&ov);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float gg = RoundBf16(__fmul_rn(r, __bfloat162float(ge[j])));
      const float uu = RoundBf16(__fmul_rn(r, __bfloat162float(ue[j])));
      o[j] = __float2bfloat16(SwiGluFast(gg, uu));
    }
    *reinterpret_cast<uint4*>(y + int64_t{b} * c + i) = ov;
  }
}

struct Lt {
  cublasLtHandle_t h = nullptr;
  void* ws;
  size_t ws_size = 32 << 20;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
  float beta = 0.f;
  // y [m, n] = x [m, k] w [n, k]^T (+ y where residual): column-major C [n, m] = w^T(op T of [k, n]) x [k, m].
  // w_n_major: w is [k, n] row-major (the down projection's weight as the input gradient's GEMM reads it).
  void Init(int m, int n, int k, bool residual, bool w_n_major = false) {
    beta = residual ? 1.f : 0.f;
    CB(cublasLtCreate(&h));
    CK(cudaMalloc(&ws, ws_size));
    CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = w_n_major ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (w_n_major) {
      CB(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, n, k, n));
    } else {
      CB(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, n, k));
    }
    CB(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, m, k));
    CB(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, n, m, n));
    cublasLtMatmulPreference_t pref;
    CB(cublasLtMatmulPreferenceCreate(&pref));
    CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size)));
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    CB(cublasLtMatmulAlgoGetHeuristic(h, op, a, b, c, c, pref, 1, &res, &got));
    cublasLtMatmulPreferenceDestroy(pref);
    if (got < 1) std::exit(2);
    algo = res.algo;
  }
  ~Lt() {
    if (h == nullptr) return;
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(op);
    cudaFree(ws);
    cublasLtDestroy(h);
  }
  void Run(const void* x, const void* w, void* y, cudaStream_t s) {
    const float one = 1.f;
    CB(cublasLtMatmul(h, op, &one, w, a, x, b, &beta, y, c, y, c, &algo, ws, ws_size, s));
  }
};

struct ProjShape {
  const char* name;
  int n, k;
  bool residual;  // the output adds the old value (the rollout's attention output and down projections)
};
// Qwen2.5-0.5B's (bench-0.5b's) projections: hidden 896, Q/K/V 14 + 2 + 2 heads of 64, intermediate 4,864; and the
// trainer's backward through the MLP's down projection into SwiGLU (swiglu_bwd: n the intermediate size, k hidden).
constexpr ProjShape kShapes[] = {{"gate_up", 2 * 4864, 896, false},
                                 {"qkv", 1152, 896, false},
                                 {"o", 896, 896, true},
                                 {"down", 896, 4864, true},
                                 {"swiglu_bwd", 4864, 896, false}};

int main(int argc, char** argv) {
  // cutlass_probe [ITERS [M ...]]: timed calls per figure (200) and row counts (1 to 24,576). PROBE_SHAPES: a comma
  // list of the shapes to run (default all of kShapes).
  const int kCopies = 8;
  const int kIters = argc > 1 ? std::atoi(argv[1]) : 200;
  std::vector<int> ms = {1, 64, 512, 1024, 4096, 24576};
  if (argc > 2) {
    ms.clear();
    for (int i = 2; i < argc; ++i) ms.push_back(std::atoi(argv[i]));
  }
  const char* only = std::getenv("PROBE_SHAPES");
  std::vector<ProbeGemm> probes;
  RegisterA(probes);
  RegisterB(probes);
  RegisterC(probes);
  RegisterD(probes);
  RegisterE(probes);
  RegisterF(probes);
  RegisterG(probes);
  RegisterH(probes);
  RegisterI(probes);
  const int mmax = *std::max_element(ms.begin(), ms.end());
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto time = [&](auto&& fn) {
    for (int i = 0; i < 20; ++i) fn(i % kCopies);
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < kIters; ++i) fn(i % kCopies);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return 1000.0 * ms / kIters;
  };
  std::printf("{\"results\": [\n");
  bool first = true;
  for (const ProjShape& shape : kShapes) {
    if (only != nullptr &&
        ("," + std::string(only) + ",").find("," + std::string(shape.name) + ",") == std::string::npos) {
      continue;
    }
    const int K = shape.k, N = shape.n, C = N / 2;
    const bool gate_up = std::string(shape.name) == "gate_up";
    const bool bwd = std::string(shape.name) == "swiglu_bwd";
    const int out_cols = bwd ? 2 * N : N;  // d_gate_up for swiglu_bwd
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> ux(-1.f, 1.f), uw(-0.06f, 0.06f);
    std::vector<__nv_bfloat16> hx(static_cast<size_t>(mmax) * K), hw(static_cast<size_t>(N) * K),
        hr(shape.residual ? static_cast<size_t>(mmax) * N : 0);
    for (auto& v : hx) v = __float2bfloat16(ux(rng));
    for (auto& v : hr) v = __float2bfloat16(ux(rng));
    void *x, *w[kCopies], *wi[kCopies], *gu, *yref, *y, *r0, *gin = nullptr, *act = nullptr, *act_ref = nullptr;
    x = Upload(hx);
    r0 = nullptr;  // the residual the attention output and down projections add into (theirs only)
    if (shape.residual) {
      r0 = Upload(hr);
    }
    for (int cp = 0; cp < kCopies; ++cp) {
      for (auto& v : hw) v = __float2bfloat16(uw(rng));
      w[cp] = Upload(hw);
      wi[cp] = gate_up ? Upload(InterleaveGateUp(hw, C, K)) : nullptr;
    }
    CK(cudaMalloc(&gu, static_cast<size_t>(mmax) * N * 2));
    CK(cudaMalloc(&yref, static_cast<size_t>(mmax) * out_cols * 2));
    CK(cudaMalloc(&y, static_cast<size_t>(mmax) * out_cols * 2));
    if (bwd) {
      // The forward's stacked gate/up projection that SwiGLU's backward reads.
      std::vector<__nv_bfloat16> hg(static_cast<size_t>(mmax) * 2 * N);
      for (auto& v : hg) v = __float2bfloat16(2.f * ux(rng));
      gin = Upload(hg);
      CK(cudaMalloc(&act, static_cast<size_t>(mmax) * N * 2));
      CK(cudaMalloc(&act_ref, static_cast<size_t>(mmax) * N * 2));
    }
    for (int m : ms) {
      Lt lt;
      lt.Init(m, N, K, shape.residual, /*w_n_major=*/bwd);
      const double flops = 2.0 * m * N * K;
      const size_t out_bytes = static_cast<size_t>(m) * N * 2;
      auto swiglu_bwd = [&](void* d_gate_up, void* out_act) {
        const int64_t total = static_cast<int64_t>(m) * N / 8;
        SwigluBwdKernel<<<(total + 255) / 256, 256, 0, s>>>(
            static_cast<const __nv_bfloat16*>(gu), static_cast<const __nv_bfloat16*>(gin),
            static_cast<__nv_bfloat16*>(d_gate_up), static_cast<__nv_bfloat16*>(out_act), m, N);
      };
      auto swiglu = [&](void* out) {
        const int64_t total = static_cast<int64_t>(m) * C / 8;
        SwigluKernel<<<(total + 255) / 256, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(gu),
                                                         static_cast<__nv_bfloat16*>(out), m, C);
      };
      // Timed: a residual GEMM adds into its output call after call (the values stay small).
      const double us_gemm = time([&](int cp) { lt.Run(x, w[cp], gu, s); });
      std::printf("%s{\"shape\": \"%s\", \"m\": %d, \"impl\": \"cublaslt\", \"us\": %.2f, \"tflops\": %.1f}",
                  first ? "" : ",\n", shape.name, m, us_gemm, flops / us_gemm * 1e-6);
      first = false;
      if (gate_up) {
        const double us_both = time([&](int cp) {
          lt.Run(x, w[cp], gu, s);
          swiglu(yref);
        });
        std::printf(",\n{\"shape\": \"%s\", \"m\": %d, \"impl\": \"cublaslt + swiglu kernel\", \"us\": %.2f}",
                    shape.name, m, us_both);
      }
      if (bwd) {
        const double us_both = time([&](int cp) {
          lt.Run(x, w[cp], gu, s);
          swiglu_bwd(yref, act_ref);
        });
        std::printf(",\n{\"shape\": \"%s\", \"m\": %d, \"impl\": \"cublaslt + swiglu backward kernel\", \"us\": %.2f}",
                    shape.name, m, us_both);
      }
      // References for copy 0: the GEMM's [m, n] output (from the residual r0 where it adds one) stays in gu (the
      // probes write only y) and its SwiGLU in yref; both read back once.
      if (shape.residual) CK(cudaMemcpyAsync(gu, r0, out_bytes, cudaMemcpyDeviceToDevice, s));
      lt.Run(x, w[0], gu, s);
      if (gate_up) swiglu(yref);
      if (bwd) swiglu_bwd(yref, act_ref);
      CK(cudaStreamSynchronize(s));
      // swiglu_bwd's references: d_gate_up and SwiGLU's value.
      std::vector<__nv_bfloat16> ref_dgu(bwd ? static_cast<size_t>(m) * 2 * N : 0),
          ref_act(bwd ? static_cast<size_t>(m) * N : 0), got_act(ref_act.size());
      if (bwd) {
        CK(cudaMemcpy(ref_dgu.data(), yref, ref_dgu.size() * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ref_act.data(), act_ref, ref_act.size() * 2, cudaMemcpyDeviceToHost));
      }
      std::vector<__nv_bfloat16> ref_swiglu(gate_up ? static_cast<size_t>(m) * C : 0),
          ref_gemm(static_cast<size_t>(m) * N), got(static_cast<size_t>(m) * out_cols);
      if (gate_up) CK(cudaMemcpy(ref_swiglu.data(), yref, ref_swiglu.size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(ref_gemm.data(), gu, ref_gemm.size() * 2, cudaMemcpyDeviceToHost));
      for (auto& p : probes) {
        if (p.shape != shape.name) continue;
        const std::vector<void*> handles = PrepareCopies(
            kCopies,
            [&](int cp) {
              ProbeIo io;
              io.x = x;
              io.w = p.swiglu ? wi[cp] : w[cp];
              io.y = y;
              io.gate_up = gin;
              io.act = act;
              return p.prepare(io, m, N, K, s);
            },
            p.release);
        if (handles.empty()) {
          std::printf(",\n{\"shape\": \"%s\", \"m\": %d, \"impl\": \"%s\", \"error\": \"prepare\"}", shape.name, m,
                      p.name.c_str());
          continue;
        }
        const double us = time([&](int cp) { p.run(handles[cp], s); });
        CK(cudaGetLastError());
        // Check against the reference (copy 0).
        if (p.residual) {
          CK(cudaMemcpyAsync(y, r0, out_bytes, cudaMemcpyDeviceToDevice, s));
        } else {
          CK(cudaMemsetAsync(y, 0, static_cast<size_t>(m) * out_cols * 2, s));
        }
        if (act != nullptr) CK(cudaMemsetAsync(act, 0, out_bytes, s));
        p.run(handles[0], s);
        CK(cudaStreamSynchronize(s));
        const std::vector<__nv_bfloat16>& want = p.swiglu_bwd ? ref_dgu : p.swiglu ? ref_swiglu : ref_gemm;
        CK(cudaMemcpy(got.data(), y, want.size() * 2, cudaMemcpyDeviceToHost));
        if (p.swiglu_bwd) CK(cudaMemcpy(got_act.data(), act, got_act.size() * 2, cudaMemcpyDeviceToHost));
        double max_err = 0, max_ref = 0;
        int64_t bad = 0, exact = 0, total = 0;
        auto compare = [&](const std::vector<__nv_bfloat16>& have, const std::vector<__nv_bfloat16>& ref) {
          for (size_t i = 0; i < ref.size(); ++i) {
            const float a = __bfloat162float(have[i]), b = __bfloat162float(ref[i]);
            const double err = std::fabs(a - b);
            max_err = std::max(max_err, err);
            max_ref = std::max(max_ref, static_cast<double>(std::fabs(b)));
            if (!(err <= 0.02 * std::fabs(b) + 2e-3)) ++bad;
            if (a == b) ++exact;
          }
          total += static_cast<int64_t>(ref.size());
        };
        compare(got, want);
        if (p.swiglu_bwd) compare(got_act, ref_act);  // both outputs in one figure
        for (void* hd : handles) p.release(hd);
        std::printf(
            ",\n{\"shape\": \"%s\", \"m\": %d, \"impl\": \"%s\", \"us\": %.2f, \"tflops\": %.1f, \"max_err\": %.4g, "
            "\"max_ref\": %.4g, \"bad\": %lld, \"exact_frac\": %.4f}",
            shape.name, m, p.name.c_str(), us, flops / us * 1e-6, max_err, max_ref, static_cast<long long>(bad),
            static_cast<double>(exact) / total);
        std::fflush(stdout);
      }
    }
    for (void* ptr : {x, r0, gu, yref, y, gin, act, act_ref}) CK(cudaFree(ptr));
    for (int cp = 0; cp < kCopies; ++cp) {
      CK(cudaFree(w[cp]));
      if (wi[cp] != nullptr) CK(cudaFree(wi[cp]));
    }
  }
  // decode_mlp: the rollout's attention output projection with the residual add, then the folded gate/up projection
  // and SwiGLU with the norm's row scale; cuBLASLt + cuBLASLt + the SwiGLU-norm kernel against two CUTLASS GEMMs
  // whose epilogues pass the rows' sums of squares (epilogue_decode.cuh). Decoding row counts only (up to 2,048).
  if (only == nullptr || ("," + std::string(only) + ",").find(",decode_mlp,") != std::string::npos) {
    std::vector<DecodeChain> chains;
    RegisterChains(chains);
    const int H = 896, I = 4864;
    const float eps = 1e-6f;
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> ux(-1.f, 1.f), uw(-0.06f, 0.06f);
    int mcap = 0;
    for (int m : ms) mcap = std::max(mcap, std::min(m, 2048));
    std::vector<__nv_bfloat16> ha(static_cast<size_t>(mcap) * H), hh(ha.size()), hwo(static_cast<size_t>(H) * H),
        hgu(static_cast<size_t>(2) * I * H);
    for (auto& v : ha) v = __float2bfloat16(ux(rng));
    for (auto& v : hh) v = __float2bfloat16(ux(rng));
    void *attn, *h0, *h, *gu, *y, *yref, *wo[kCopies], *wgu[kCopies], *wgi[kCopies];
    float* ssq;
    attn = Upload(ha);
    h0 = Upload(hh);
    CK(cudaMalloc(&h, hh.size() * 2));
    CK(cudaMalloc(&gu, static_cast<size_t>(mcap) * 2 * I * 2));
    CK(cudaMalloc(&y, static_cast<size_t>(mcap) * I * 2));
    CK(cudaMalloc(&yref, static_cast<size_t>(mcap) * I * 2));
    CK(cudaMalloc(&ssq, static_cast<size_t>(mcap) * (H / 64) * sizeof(float)));
    for (int cp = 0; cp < kCopies; ++cp) {
      for (auto& v : hwo) v = __float2bfloat16(uw(rng));
      for (auto& v : hgu) v = __float2bfloat16(uw(rng));
      wo[cp] = Upload(hwo);
      wgu[cp] = Upload(hgu);
      wgi[cp] = Upload(InterleaveGateUp(hgu, I, H));
    }
    for (int m : ms) {
      if (m > 2048) continue;
      Lt lo, lg;
      lo.Init(m, H, H, /*residual=*/true);
      lg.Init(m, 2 * I, H, /*residual=*/false);
      const size_t h_bytes = static_cast<size_t>(m) * H * 2;
      auto baseline = [&](int cp) {
        lo.Run(attn, wo[cp], h, s);
        lg.Run(h, wgu[cp], gu, s);
        SwigluNormKernel<<<m, 256, 0, s>>>(static_cast<const __nv_bfloat16*>(h), static_cast<const __nv_bfloat16*>(gu),
                                           static_cast<__nv_bfloat16*>(yref), H, I, eps);
      };
      // Timed from the same residual; the residual grows call after call (h += ...), which changes no timing.
      CK(cudaMemcpyAsync(h, h0, h_bytes, cudaMemcpyDeviceToDevice, s));
      const double us_base = time(baseline);
      std::printf(
          "%s{\"shape\": \"decode_mlp\", \"m\": %d, \"impl\": \"cublaslt o + cublaslt gate/up + swiglu-norm "
          "kernel\", "
          "\"us\": %.2f}",
          first ? "" : ",\n", m, us_base);
      first = false;
      // Reference: one call from h0 (copy 0).
      CK(cudaMemcpyAsync(h, h0, h_bytes, cudaMemcpyDeviceToDevice, s));
      baseline(0);
      CK(cudaStreamSynchronize(s));
      std::vector<__nv_bfloat16> want_y(static_cast<size_t>(m) * I), want_h(static_cast<size_t>(m) * H),
          got_y(want_y.size()), got_h(want_h.size());
      CK(cudaMemcpy(want_y.data(), yref, want_y.size() * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(want_h.data(), h, want_h.size() * 2, cudaMemcpyDeviceToHost));
      for (const DecodeChain& c : chains) {
        const std::vector<void*> handles = PrepareCopies(
            kCopies,
            [&](int cp) {
              ChainIo io;
              io.attn = attn;
              io.wo = wo[cp];
              io.h = h;
              io.w_gate_up = wgi[cp];
              io.y = y;
              io.ssq = ssq;
              io.hidden = H;
              io.inter = I;
              io.eps = eps;
              return c.prepare(io, m, s);
            },
            c.release);
        if (handles.empty()) {
          std::printf(",\n{\"shape\": \"decode_mlp\", \"m\": %d, \"impl\": \"%s\", \"error\": \"prepare\"}", m,
                      c.name.c_str());
          continue;
        }
        CK(cudaMemcpyAsync(h, h0, h_bytes, cudaMemcpyDeviceToDevice, s));
        const double us = time([&](int cp) { c.run(handles[cp], s); });
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(h, h0, h_bytes, cudaMemcpyDeviceToDevice, s));
        CK(cudaMemsetAsync(y, 0, static_cast<size_t>(m) * I * 2, s));
        c.run(handles[0], s);
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(got_y.data(), y, got_y.size() * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(got_h.data(), h, got_h.size() * 2, cudaMemcpyDeviceToHost));
        for (void* hd : handles) c.release(hd);
        // h: the residual add as cuBLAS's (equal where both sum in the same order); y: the row scales' sums in
        // another order, so within a rounding or two.
        int64_t bad = 0, exact_y = 0, exact_h = 0;
        double max_err = 0;
        for (size_t i = 0; i < want_y.size(); ++i) {
          const float a = __bfloat162float(got_y[i]), b = __bfloat162float(want_y[i]);
          max_err = std::max(max_err, static_cast<double>(std::fabs(a - b)));
          if (!(std::fabs(a - b) <= 0.02 * std::fabs(b) + 2e-3)) ++bad;
          if (a == b) ++exact_y;
        }
        for (size_t i = 0; i < want_h.size(); ++i) {
          if (__bfloat162float(got_h[i]) == __bfloat162float(want_h[i])) ++exact_h;
        }
        std::printf(
            ",\n{\"shape\": \"decode_mlp\", \"m\": %d, \"impl\": \"%s\", \"us\": %.2f, \"max_err\": %.4g, \"bad\": "
            "%lld, "
            "\"exact_frac\": %.4f, \"h_exact_frac\": %.4f}",
            m, c.name.c_str(), us, max_err, static_cast<long long>(bad), static_cast<double>(exact_y) / want_y.size(),
            static_cast<double>(exact_h) / want_h.size());
        std::fflush(stdout);
      }
    }
    for (void* ptr : {attn, h0, h, gu, y, yref}) CK(cudaFree(ptr));
    CK(cudaFree(ssq));
    for (int cp = 0; cp < kCopies; ++cp) {
      CK(cudaFree(wo[cp]));
      CK(cudaFree(wgu[cp]));
      CK(cudaFree(wgi[cp]));
    }
  }
  std::printf("\n]}\n");
  return 0;
}

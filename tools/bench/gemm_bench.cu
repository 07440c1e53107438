// The bf16 GEMMs of a decoding step of bench-0.5b (BENCHMARKS.md) alone, through cuBLASLt: for each projection
// y = x w^T at a batch of M rows, every algorithm cuBLASLt's heuristic offers is timed, and the heuristic's first
// choice (what a plain cuBLASLt call runs) is reported against the fastest. Tells whether choosing the GEMM
// algorithm per shape is worth having in the decoder. Weights rotate over `--layers` copies so that, as in decoding,
// they come from HBM rather than L2. Torch-free; one JSON object per (M, projection) on stdout.
//
//   verl-bench-gemm [--m 512,1024] [--iters 100] [--layers 24] [--algos 32] [--only down] [--split-k 0]
// --split-k 1 also times each offered algorithm that supports it with the reduction dimension split 2..16 ways
// (split_k_best_us, split_k_algo, split_k; -1 / 0 where none ran).

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/bench/cuda_bench_util.cuh"

namespace {

using verl::bench::FillUniform;

#define LT_OK(expr)                                                                      \
  do {                                                                                   \
    const cublasStatus_t s = (expr);                                                     \
    if (s != CUBLAS_STATUS_SUCCESS) {                                                    \
      std::fprintf(stderr, "%s:%d: %s: cublas status %d\n", __FILE__, __LINE__, #expr, \
                   static_cast<int>(s));                                                 \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

struct Projection {
  const char* name;
  int64_t n, k;
  bool per_layer;  // false: one matrix (the LM head)
};

std::vector<int64_t> ParseList(const char* s) {
  std::vector<int64_t> out;
  for (const char* p = s; *p != '\0';) {
    out.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> ms = {512, 1024};
  int iters = 100;
  int layers = 24;
  int max_algos = 32;
  bool split_k = false;
  std::string only;  // one projection's name, or all
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--m") {
      ms = ParseList(argv[i + 1]);
    } else if (flag == "--iters") {
      iters = std::atoi(argv[i + 1]);
    } else if (flag == "--layers") {
      layers = std::atoi(argv[i + 1]);
    } else if (flag == "--split-k") {
      split_k = std::atoi(argv[i + 1]) != 0;
    } else if (flag == "--algos") {
      max_algos = std::atoi(argv[i + 1]);
    } else if (flag == "--only") {
      only = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  // bench-0.5b: hidden 896, 14 + 2 * 2 heads of 64 (q, k, v stacked), intermediate 4864 (gate and up stacked).
  const Projection projections[] = {{"qkv", 1152, 896, true},
                                    {"o_proj", 896, 896, true},
                                    {"gate_up", 9728, 896, true},
                                    {"down", 896, 4864, true},
                                    {"lm_head", 151936, 896, false}};
  cublasLtHandle_t lt;
  LT_OK(cublasLtCreate(&lt));
  const size_t workspace_bytes = 32u << 20;
  void* workspace = nullptr;
  CUDA_OK(cudaMalloc(&workspace, workspace_bytes));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));

  for (const int64_t m : ms) {
    for (const Projection& p : projections) {
      if (!only.empty() && only != p.name) continue;
      const int copies = p.per_layer ? layers : 1;
      std::vector<__nv_bfloat16*> w(copies);
      for (int c = 0; c < copies; ++c) {
        CUDA_OK(cudaMalloc(&w[c], p.n * p.k * sizeof(__nv_bfloat16)));
        FillUniform<<<1024, 256, 0, stream>>>(w[c], p.n * p.k, 17 + c, -0.1f, 0.1f);
      }
      __nv_bfloat16 *x, *y;
      CUDA_OK(cudaMalloc(&x, m * p.k * sizeof(__nv_bfloat16)));
      CUDA_OK(cudaMalloc(&y, m * p.n * sizeof(__nv_bfloat16)));
      FillUniform<<<1024, 256, 0, stream>>>(x, m * p.k, 3, -0.1f, 0.1f);
      CUDA_OK(cudaStreamSynchronize(stream));

      // Row-major y [m, n] = x [m, k] w [n, k]^T is, column-major, y^T [n, m] = w^T' [n, k] x^T [k, m]: A = w
      // (column-major [k, n], transposed), B = x (column-major [k, m]), as LibTorch's linear calls it.
      cublasLtMatmulDesc_t op;
      LT_OK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
      LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
      cublasLtMatrixLayout_t la, lb, lc;
      LT_OK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.k, p.n, p.k));
      LT_OK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.k, m, p.k));
      LT_OK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, p.n, m, p.n));
      cublasLtMatmulPreference_t pref;
      LT_OK(cublasLtMatmulPreferenceCreate(&pref));
      LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                 sizeof(workspace_bytes)));
      std::vector<cublasLtMatmulHeuristicResult_t> heur(max_algos);
      int found = 0;
      LT_OK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, max_algos, heur.data(), &found));
      const float alpha = 1.f, beta = 0.f;
      // Microseconds a call of `algo` takes over the rotating weights (after 5 untimed calls); -1 if it cannot run.
      auto time_us = [&](const cublasLtMatmulAlgo_t& algo) {
        auto run = [&](int layer) {
          return cublasLtMatmul(lt, op, &alpha, w[layer % copies], la, x, lb, &beta, y, lc, y, lc, &algo, workspace,
                                workspace_bytes, stream);
        };
        if (run(0) != CUBLAS_STATUS_SUCCESS) return -1.0;
        for (int i = 0; i < 5; ++i) run(i);
        CUDA_OK(cudaEventRecord(start, stream));
        for (int i = 0; i < iters; ++i) run(i);
        CUDA_OK(cudaEventRecord(stop, stream));
        CUDA_OK(cudaEventSynchronize(stop));
        float ms_total = 0.f;
        CUDA_OK(cudaEventElapsedTime(&ms_total, start, stop));
        return 1e3 * ms_total / iters;
      };
      std::vector<double> us(found, -1.0);
      for (int a = 0; a < found; ++a) {
        if (heur[a].state == CUBLAS_STATUS_SUCCESS) us[a] = time_us(heur[a].algo);
      }
      int best = -1;
      for (int a = 0; a < found; ++a) {
        if (us[a] > 0 && (best < 0 || us[a] < us[best])) best = a;
      }
      // --split-k 1: each offered algorithm that can split the reduction dimension again with 2..16 splits (the
      // partial sums reduced as cuBLASLt chooses), checked by cublasLtMatmulAlgoCheck first: whether more blocks along
      // k fill the GPU where m x n makes few tiles (the decoding step's narrow projections).
      double split_best_us = -1.0;
      int split_best_algo = -1, split_best_splits = 0;
      for (int a = 0; split_k && a < found; ++a) {
        if (heur[a].state != CUBLAS_STATUS_SUCCESS) continue;
        int32_t supported = 0;
        size_t written = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&heur[a].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &supported,
                                              sizeof(supported), &written) != CUBLAS_STATUS_SUCCESS ||
            !supported) {
          continue;
        }
        for (const int32_t splits : {2, 3, 4, 6, 8, 12, 16}) {
          cublasLtMatmulAlgo_t algo = heur[a].algo;
          if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                                   sizeof(splits)) != CUBLAS_STATUS_SUCCESS) {
            continue;
          }
          cublasLtMatmulHeuristicResult_t check;
          if (cublasLtMatmulAlgoCheck(lt, op, la, lb, lc, lc, &algo, &check) != CUBLAS_STATUS_SUCCESS ||
              check.workspaceSize > workspace_bytes) {
            continue;
          }
          const double t = time_us(algo);
          if (t > 0 && (split_best_us < 0 || t < split_best_us)) {
            split_best_us = t;
            split_best_algo = a;
            split_best_splits = splits;
          }
        }
      }
      const double flop = 2.0 * static_cast<double>(m) * p.n * p.k;
      std::printf("{\"m\": %lld, \"projection\": \"%s\", \"n\": %lld, \"k\": %lld, \"algos\": %d, "
                  "\"first_us\": %.3f, \"best_us\": %.3f, \"best_index\": %d, \"first_tflops\": %.1f, "
                  "\"best_tflops\": %.1f, \"split_k_best_us\": %.3f, \"split_k_algo\": %d, \"split_k\": %d, "
                  "\"all_us\": [",
                  static_cast<long long>(m), p.name, static_cast<long long>(p.n), static_cast<long long>(p.k), found,
                  found > 0 ? us[0] : -1.0, best >= 0 ? us[best] : -1.0, best,
                  found > 0 && us[0] > 0 ? flop / us[0] * 1e-6 : 0.0, best >= 0 ? flop / us[best] * 1e-6 : 0.0,
                  split_best_us, split_best_algo, split_best_splits);
      for (int a = 0; a < found; ++a) std::printf("%s%.2f", a ? ", " : "", us[a]);
      std::printf("]}\n");
      std::fflush(stdout);
      LT_OK(cublasLtMatmulPreferenceDestroy(pref));
      LT_OK(cublasLtMatrixLayoutDestroy(la));
      LT_OK(cublasLtMatrixLayoutDestroy(lb));
      LT_OK(cublasLtMatrixLayoutDestroy(lc));
      LT_OK(cublasLtMatmulDescDestroy(op));
      for (auto* p2 : w) CUDA_OK(cudaFree(p2));
      CUDA_OK(cudaFree(x));
      CUDA_OK(cudaFree(y));
    }
  }
  return 0;
}

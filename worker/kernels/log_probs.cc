#include "worker/kernels/log_probs.h"

#include <ATen/ops/addmm.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <limits>

#include "worker/kernels/aten_dtype.h"
#include "worker/kernels/log_probs_kernel.h"

namespace verl::kernels {
namespace {

// A [rows] float32 contiguous tensor on logits' device, or undefined.
at::Tensor RowFloats(const at::Tensor& t, const at::Tensor& logits, const char* what) {
  if (!t.defined()) return t;
  TORCH_CHECK(t.numel() == logits.size(0), "fused log-probs: ", what, " has ", t.numel(), " elements for ",
              logits.size(0), " rows");
  return t.to(logits.device(), at::kFloat).contiguous();
}

// The int64 targets on the logits' device, after checking both.
at::Tensor CheckedTargets(const at::Tensor& logits, const at::Tensor& targets) {
  TORCH_CHECK(TokenLogProbsSupported(logits), "fused log-probs: unsupported logits ", logits.sizes(), " ",
              logits.scalar_type());
  TORCH_CHECK(targets.numel() == logits.size(0), "fused log-probs: ", targets.numel(), " targets for ",
              logits.size(0), " rows");
  return targets.to(logits.device(), at::kLong).contiguous();
}

}  // namespace

bool TokenLogProbsSupported(const at::Tensor& logits) {
  KernelDtype dtype;
  return logits.is_cuda() && KernelDtypeOf(logits.scalar_type(), &dtype) && logits.dim() == 2 &&
         logits.is_contiguous() && logits.size(1) > 0 && logits.size(1) <= std::numeric_limits<int>::max() &&
         logits.size(0) <= std::numeric_limits<int>::max();
}

void TokenLogProbsInto(const at::Tensor& logits, const at::Tensor& targets, double temperature,
                       const TokenLogProbsResult& out) {
  const at::Tensor tgt = CheckedTargets(logits, targets);
  for (const at::Tensor* t : {&out.log_probs, &out.entropy, &out.lse}) {
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous() && t->numel() == logits.size(0) &&
                    t->device() == logits.device(),
                "fused log-probs: outputs must be float32 [", logits.size(0), "] contiguous on ", logits.device());
  }
  const c10::cuda::CUDAGuard guard(logits.device());
  TokenLogProbsArgs a;
  KernelDtypeOf(logits.scalar_type(), &a.dtype);
  a.logits = logits.data_ptr();
  a.targets = tgt.data_ptr<int64_t>();
  a.log_probs = out.log_probs.data_ptr<float>();
  a.entropy = out.entropy.data_ptr<float>();
  a.lse = out.lse.data_ptr<float>();
  a.rows = static_cast<int>(logits.size(0));
  a.vocab = static_cast<int>(logits.size(1));
  a.temperature = static_cast<float>(temperature);
  C10_CUDA_CHECK(LaunchTokenLogProbs(a, c10::cuda::getCurrentCUDAStream()));
}

TokenLogProbsResult TokenLogProbs(const at::Tensor& logits, const at::Tensor& targets, double temperature) {
  const auto opts = logits.options().dtype(at::kFloat);
  const int64_t rows = logits.size(0);
  TokenLogProbsResult r{at::empty({rows}, opts), at::empty({rows}, opts), at::empty({rows}, opts)};
  TokenLogProbsInto(logits, targets, temperature, r);
  return r;
}

void TokenLogProbsBackwardInPlace(at::Tensor& logits, const at::Tensor& targets, const at::Tensor& lse,
                                  const at::Tensor& entropy, const at::Tensor& grad_log_probs,
                                  const at::Tensor& grad_entropy, double temperature) {
  const at::Tensor tgt = CheckedTargets(logits, targets);
  const c10::cuda::CUDAGuard guard(logits.device());
  const at::Tensor l = RowFloats(lse, logits, "lse");
  const at::Tensor ent = RowFloats(entropy, logits, "entropy");
  const at::Tensor glp = RowFloats(grad_log_probs, logits, "grad_log_probs");
  const at::Tensor gent = RowFloats(grad_entropy, logits, "grad_entropy");
  TORCH_CHECK(l.defined() && ent.defined(), "fused log-probs: the backward needs the forward's lse and entropy");
  TokenLogProbsBackwardArgs a;
  KernelDtypeOf(logits.scalar_type(), &a.dtype);
  a.logits = logits.data_ptr();
  a.targets = tgt.data_ptr<int64_t>();
  a.lse = l.data_ptr<float>();
  a.entropy = ent.data_ptr<float>();
  a.grad_log_probs = glp.defined() ? glp.data_ptr<float>() : nullptr;
  a.grad_entropy = gent.defined() ? gent.data_ptr<float>() : nullptr;
  a.grad_logits = logits.data_ptr();
  a.rows = static_cast<int>(logits.size(0));
  a.vocab = static_cast<int>(logits.size(1));
  a.temperature = static_cast<float>(temperature);
  C10_CUDA_CHECK(LaunchTokenLogProbsBackward(a, c10::cuda::getCurrentCUDAStream()));
}

void AddTransposedMatmulFloat(at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2 && a.size(0) == b.size(0) && c.size(0) == a.size(1) &&
                  c.size(1) == b.size(1),
              "AddTransposedMatmulFloat: c ", c.sizes(), " += a ", a.sizes(), "^T b ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type() &&
                  (a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf) && c.scalar_type() == at::kFloat,
              "AddTransposedMatmulFloat: a and b both bfloat16 or float16 and c float32, got ", a.scalar_type(), ", ",
              b.scalar_type(), ", ", c.scalar_type());
  TORCH_CHECK(a.is_cuda() && b.device() == a.device() && c.device() == a.device(),
              "AddTransposedMatmulFloat: a, b and c on one CUDA device");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && c.is_contiguous(), "AddTransposedMatmulFloat: contiguous only");
  if (c.numel() == 0 || a.size(0) == 0) return;
  // ATen's addmm with out_dtype float32 over bf16/fp16 operands is cuBLAS's mixed-precision GEMM (float32 output and
  // accumulation); with self and out both c, beta 1 adds in place. (at::cuda::blas::gemm<BFloat16, float> is not
  // exported from libtorch_cuda.) The op sets its own device guard.
  at::addmm_out(c, c, a.t(), b, at::kFloat, /*beta=*/1, /*alpha=*/1);
}

}  // namespace verl::kernels

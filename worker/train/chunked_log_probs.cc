#include "worker/train/chunked_log_probs.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#ifdef VERL_WITH_CUDA
#include "worker/kernels/log_probs.h"
#endif

namespace verl {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The float32 logits of rows [begin, begin + n) of h2d, as the plain path computes them.
at::Tensor ChunkLogits(const at::Tensor& h2d, const at::Tensor& weight, int64_t begin, int64_t n, double temperature) {
  return at::linear(h2d.narrow(0, begin, n), weight).to(at::kFloat) / temperature;
}

#ifdef VERL_WITH_CUDA
// The fused log-prob kernels take the LM head's output on a GPU in float32, bfloat16 or float16.
bool FusedKernelsApply(const at::Tensor& h2d) {
  const at::ScalarType t = h2d.scalar_type();
  return h2d.is_cuda() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
}
#endif

// The CPU (ATen) path's gradient w.r.t. the float32 logits z of a chunk (already divided by the temperature), in the
// weight's dtype: d log_prob / dz = onehot(target) - p; d entropy / dz = -p * (z - sum(p * z)); then through the
// division by the temperature and the cast to float32, into linear's backward (in its dtype).
at::Tensor ChunkLogitsGrad(const at::Tensor& z, const at::Tensor& targets, const at::Tensor& g_lp,
                           const at::Tensor& g_ent, double temperature, at::ScalarType dtype) {
  const at::Tensor p = z.softmax(-1);
  at::Tensor gz = at::zeros_like(z);
  if (g_lp.defined()) {
    const at::Tensor g = g_lp.to(at::kFloat).unsqueeze(-1);
    gz.sub_(p * g).scatter_add_(-1, targets.unsqueeze(-1), g);
  }
  if (g_ent.defined()) {
    const at::Tensor g = g_ent.to(at::kFloat).unsqueeze(-1);
    gz.sub_(p * (z - (p * z).sum(-1, /*keepdim=*/true)) * g);
  }
  return (gz / temperature).to(dtype);
}

// The CPU (ATen) path's log-probs (and entropy, where `ent` is defined) of a chunk from its float32 logits z, written
// into lp and ent; returns the rows' logsumexp.
at::Tensor ChunkLogProbs(const at::Tensor& z, const at::Tensor& targets, at::Tensor lp, at::Tensor ent) {
  const at::Tensor lse = z.logsumexp(-1);
  lp.copy_(z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse);
  if (ent.defined()) ent.copy_(lse - (z.softmax(-1) * z).sum(-1));
  return lse;
}

// linear's backward for a chunk: its rows' hidden-state gradient written to gh, its weight gradient added to the
// float32 grad_w. In bf16 / fp16 on a GPU the GEMM sums into grad_w itself (beta 1, no rounding of each chunk's part);
// otherwise the product is added.
void ChunkLinearBackward(const at::Tensor& g_logits, const at::Tensor& h, const at::Tensor& weight, at::Tensor gh,
                         at::Tensor& grad_w) {
  at::mm_out(gh, g_logits, weight);
#ifdef VERL_WITH_CUDA
  if (g_logits.is_cuda() && h.scalar_type() != at::kFloat && h.is_contiguous()) {
    kernels::AddTransposedMatmulFloat(grad_w, g_logits, h);
    return;
  }
#endif
  grad_w.add_(at::mm(g_logits.t(), h).to(at::kFloat));
}

class ChunkedLogProbsFunction : public torch::autograd::Function<ChunkedLogProbsFunction> {
 public:
  // h2d [N, H], weight [V, H], targets [N] -> {log_probs [N], entropy [N] (zeros without with_entropy)}.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& h2d, const at::Tensor& weight,
                               const at::Tensor& targets, double temperature, bool with_entropy, int64_t chunk) {
    const int64_t N = h2d.size(0);
    at::Tensor log_probs = at::empty({N}, h2d.options().dtype(at::kFloat));
    at::Tensor entropy = at::zeros({N}, h2d.options().dtype(at::kFloat));
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["with_entropy"] = with_entropy;
    ctx->saved_data["chunk"] = chunk;
    if (!with_entropy) ctx->mark_non_differentiable({entropy});
#ifdef VERL_WITH_CUDA
    if (FusedKernelsApply(h2d)) {
      // The fused kernels read each chunk's logits once in their dtype (the ATen loop below makes float32 copies and
      // runs a dozen passes over them); they keep each row's logsumexp and entropy for the backward.
      // The kernels write each chunk's rows in place; the entropy goes to the output when it is one.
      const at::Tensor lse = at::empty({N}, log_probs.options());
      const at::Tensor ent = with_entropy ? entropy : at::empty({N}, log_probs.options());
      for (int64_t b = 0; b < N; b += chunk) {
        const int64_t n = std::min(chunk, N - b);
        kernels::TokenLogProbsInto(at::linear(h2d.narrow(0, b, n), weight), targets.narrow(0, b, n), temperature,
                                   {log_probs.narrow(0, b, n), ent.narrow(0, b, n), lse.narrow(0, b, n)});
      }
      ctx->save_for_backward({h2d, weight, targets, lse, ent});
      return {log_probs, entropy};
    }
#endif
    for (int64_t b = 0; b < N; b += chunk) {
      const int64_t n = std::min(chunk, N - b);
      ChunkLogProbs(ChunkLogits(h2d, weight, b, n, temperature), targets.narrow(0, b, n), log_probs.narrow(0, b, n),
                    with_entropy ? entropy.narrow(0, b, n) : at::Tensor());
    }
    ctx->save_for_backward({h2d, weight, targets});
    return {log_probs, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& h2d = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& targets = saved[2];
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const bool with_entropy = ctx->saved_data["with_entropy"].toBool();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const at::Tensor& g_lp = grads[0];
    const at::Tensor g_ent = with_entropy ? grads[1] : at::Tensor();
    const int64_t N = h2d.size(0);
#ifdef VERL_WITH_CUDA
    if (saved.size() == 5) {  // the fused forward's lse and entropy
      const at::Tensor& lse = saved[3];
      const at::Tensor& ent = saved[4];
      at::Tensor grad_h = at::empty_like(h2d, at::MemoryFormat::Contiguous);
      at::Tensor grad_w = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
      for (int64_t b = 0; b < N; b += chunk) {
        const int64_t n = std::min(chunk, N - b);
        const at::Tensor h = h2d.narrow(0, b, n);
        at::Tensor logits = at::linear(h, weight);
        kernels::TokenLogProbsBackwardInPlace(logits, targets.narrow(0, b, n), lse.narrow(0, b, n),
                                              ent.narrow(0, b, n), g_lp.defined() ? g_lp.narrow(0, b, n) : g_lp,
                                              g_ent.defined() ? g_ent.narrow(0, b, n) : g_ent, temperature);
        ChunkLinearBackward(logits, h, weight, grad_h.narrow(0, b, n), grad_w);
      }
      return {grad_h, grad_w.to(weight.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
#endif
    at::Tensor grad_h = at::zeros_like(h2d);
    at::Tensor grad_w = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));  // summed over chunks
    for (int64_t b = 0; b < N; b += chunk) {
      const int64_t n = std::min(chunk, N - b);
      const at::Tensor z = ChunkLogits(h2d, weight, b, n, temperature);
      const at::Tensor g_logits =
          ChunkLogitsGrad(z, targets.narrow(0, b, n), g_lp.defined() ? g_lp.narrow(0, b, n) : g_lp,
                          g_ent.defined() ? g_ent.narrow(0, b, n) : g_ent, temperature, weight.scalar_type());
      ChunkLinearBackward(g_logits, h2d.narrow(0, b, n), weight, grad_h.narrow(0, b, n), grad_w);
    }
    return {grad_h, grad_w.to(weight.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// ChunkedLogProbsWithGrad's autograd node: the forward runs the chunks and keeps the gradients, the backward hands
// them on (scaled by the anchor's upstream gradient).
class ChunkedLossGradFunction : public torch::autograd::Function<ChunkedLossGradFunction> {
 public:
  // h2d [N, H], weight [V, H], targets [N] -> {log_probs [N], entropy [N], anchor []}.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& h2d, const at::Tensor& weight,
                               const at::Tensor& targets, double temperature, int64_t chunk,
                               const TokenLossGrad* token_grad) {
    const int64_t N = h2d.size(0);
    at::Tensor log_probs = at::empty({N}, h2d.options().dtype(at::kFloat));
    at::Tensor entropy = at::empty({N}, h2d.options().dtype(at::kFloat));
    at::Tensor grad_h = at::empty_like(h2d, at::MemoryFormat::Contiguous);
    at::Tensor grad_w = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    for (int64_t b = 0; b < N; b += chunk) {
      const int64_t n = std::min(chunk, N - b);
      const at::Tensor h = h2d.narrow(0, b, n);
      const at::Tensor t = targets.narrow(0, b, n);
      at::Tensor lp = log_probs.narrow(0, b, n);
      at::Tensor ent = entropy.narrow(0, b, n);
      at::Tensor gh = grad_h.narrow(0, b, n);
#ifdef VERL_WITH_CUDA
      if (FusedKernelsApply(h2d)) {
        // One GEMM for the logits, the fused kernels' forward and (once the token gradients are known) backward over
        // them in place, and the two GEMMs of linear's backward: ChunkedLogProbs' backward without its recompute.
        at::Tensor logits = at::linear(h, weight);
        const at::Tensor lse = at::empty({n}, lp.options());
        kernels::TokenLogProbsInto(logits, t, temperature, {lp, ent, lse});
        const auto [g_lp, g_ent] = (*token_grad)(b, lp, ent);
        kernels::TokenLogProbsBackwardInPlace(logits, t, lse, ent, g_lp, g_ent, temperature);
        ChunkLinearBackward(logits, h, weight, gh, grad_w);
        continue;
      }
#endif
      const at::Tensor z = ChunkLogits(h2d, weight, b, n, temperature);
      ChunkLogProbs(z, t, lp, ent);
      const auto [g_lp, g_ent] = (*token_grad)(b, lp, ent);
      ChunkLinearBackward(ChunkLogitsGrad(z, t, g_lp, g_ent, temperature, weight.scalar_type()), h, weight, gh, grad_w);
    }
    ctx->mark_non_differentiable({log_probs, entropy});
    ctx->saved_data["grad_h"] = grad_h;
    ctx->saved_data["grad_w"] = grad_w;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return {log_probs, entropy, at::zeros({}, h2d.options().dtype(at::kFloat))};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // Taken out of the node, whose saved_data lives as long as the anchor does (past this backward): the float32
    // weight gradient is freed once converted.
    at::Tensor grad_h = ctx->saved_data["grad_h"].toTensor();
    at::Tensor grad_w = ctx->saved_data["grad_w"].toTensor();
    const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    ctx->saved_data.clear();             // the only references now: grad_h scaled in place
    const at::Tensor& scale = grads[2];  // the anchor's upstream gradient (1 for anchor.backward())
    // The float32 weight gradient is scaled and rounded to the weight's dtype by one kernel (the product is rounded
    // to float32 first, as an in-place multiply and a conversion after it would round it); in place for a float32
    // weight.
    at::Tensor grad_w_out = weight_dtype == grad_w.scalar_type()
                                ? grad_w
                                : at::empty(grad_w.sizes(), grad_w.options().dtype(weight_dtype));
    at::mul_out(grad_w_out, grad_w, scale);
    return {grad_h.mul_(scale.to(grad_h.scalar_type())),
            grad_w_out,
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// Tokens per chunk: `chunk_tokens`, or 1 GiB of logits as the pass holds them: the weight's dtype for the fused
// kernels (2^29 bf16 logits: 3,533 tokens of Qwen2.5's vocabulary), float32 on the ATen path (2^28). Against 2^28 bf16
// logits, a B3 mini-batch's update on an H200 took 2.45-2.47 s instead of 2.50-2.51 s (fewer weight-gradient GEMMs
// accumulating into the float32 gradient) for 65 MB more at its peak; 2^30 gained 0.6 % more for 1 GB more.
int64_t DefaultChunkTokens(int64_t chunk_tokens, const at::Tensor& h2d, const at::Tensor& weight) {
  if (chunk_tokens > 0) return chunk_tokens;
  int64_t bytes = 4;  // the ATen path's float32 logits
#ifdef VERL_WITH_CUDA
  if (FusedKernelsApply(h2d)) bytes = static_cast<int64_t>(weight.element_size());
#else
  (void)h2d;
#endif
  return std::max<int64_t>(1, (int64_t{1} << 30) / bytes / weight.size(0));
}

}  // namespace

ChunkedLossGradResult ChunkedLogProbsWithGrad(const at::Tensor& hidden, const at::Tensor& weight,
                                              const at::Tensor& targets, double temperature,
                                              const TokenLossGrad& token_grad, int64_t chunk_tokens) {
  const int64_t H = hidden.size(-1);
  const at::Tensor h2d = hidden.reshape({-1, H});
  const at::Tensor t1d = targets.reshape({-1}).to(at::kLong);
  const int64_t chunk = DefaultChunkTokens(chunk_tokens, h2d, weight);
  variable_list out = ChunkedLossGradFunction::apply(h2d, weight, t1d, temperature, chunk, &token_grad);
  return {out[0].view(targets.sizes()), out[1].view(targets.sizes()), out[2]};
}

ChunkedLogProbsResult ChunkedLogProbs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                      double temperature, bool with_entropy, int64_t chunk_tokens) {
  const int64_t H = hidden.size(-1);
  const at::Tensor h2d = hidden.reshape({-1, H});
  const at::Tensor t1d = targets.reshape({-1}).to(at::kLong);
  const int64_t chunk = DefaultChunkTokens(chunk_tokens, h2d, weight);
  variable_list out = ChunkedLogProbsFunction::apply(h2d, weight, t1d, temperature, with_entropy, chunk);
  ChunkedLogProbsResult r;
  r.log_probs = out[0].view(targets.sizes());
  if (with_entropy) r.entropy = out[1].view(targets.sizes());
  return r;
}

}  // namespace verl

// ChunkedLogProbs against the plain path (full logits, log_softmax, gather, EntropyFromLogits, autograd): the same
// values and the same gradients of the hidden states and the LM head, for chunks that do and do not divide the tokens.

#include "worker/train/chunked_log_probs.h"

#include <ATen/core/grad_mode.h>

#include "tests/worker/torch_catch.h"
#include "worker/train/core_algos.h"

namespace verl {
namespace {

struct Outputs {
  at::Tensor log_probs, entropy, grad_hidden, grad_weight;
};

// Runs `fn` on fresh leaves copied from hidden and weight, backpropagates g_lp . log_probs + g_ent . entropy.
template <typename Fn>
Outputs Run(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& g_lp, const at::Tensor& g_ent,
            Fn fn) {
  at::Tensor h = hidden.clone().requires_grad_(true);
  at::Tensor w = weight.clone().requires_grad_(true);
  auto [lp, ent] = fn(h, w);
  at::Tensor loss = (lp.to(at::kDouble) * g_lp).sum();
  if (g_ent.defined()) loss = loss + (ent.to(at::kDouble) * g_ent).sum();
  loss.backward();
  return {lp.detach(), ent.defined() ? ent.detach() : at::Tensor(), h.grad(), w.grad()};
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

TEST_CASE("ChunkedLogProbs equals the full-logits path, values and gradients", "[worker][train]") {
  at::manual_seed(7);
  const int64_t B = 3, R = 5, H = 16, V = 37;
  const at::Tensor hidden = at::randn({B, R, H});
  const at::Tensor weight = at::randn({V, H}) * 0.3;
  const at::Tensor targets = at::randint(0, V, {B, R}, at::kLong);
  const at::Tensor g_lp = at::randn({B, R}, at::kDouble);
  const at::Tensor g_ent = at::randn({B, R}, at::kDouble);
  const double temperature = 0.7;
  auto plain = [&](const at::Tensor& h, const at::Tensor& w) {
    at::Tensor logits = at::linear(h, w).to(at::kFloat) / temperature;
    at::Tensor lp = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
    return std::make_pair(lp, EntropyFromLogits(logits));
  };
  const Outputs want = Run(hidden, weight, g_lp, g_ent, plain);
  for (int64_t chunk : {1, 4, 15, 100}) {
    INFO("chunk " << chunk);
    const Outputs got = Run(hidden, weight, g_lp, g_ent, [&](const at::Tensor& h, const at::Tensor& w) {
      ChunkedLogProbsResult r = ChunkedLogProbs(h, w, targets, temperature, /*with_entropy=*/true, chunk);
      return std::make_pair(r.log_probs, r.entropy);
    });
    REQUIRE(got.log_probs.sizes() == at::IntArrayRef({B, R}));
    CHECK(MaxDiff(got.log_probs, want.log_probs) < 1e-5);
    CHECK(MaxDiff(got.entropy, want.entropy) < 1e-5);
    CHECK(MaxDiff(got.grad_hidden, want.grad_hidden) < 1e-4);
    CHECK(MaxDiff(got.grad_weight, want.grad_weight) < 1e-4);
  }
  SECTION("log-probs only") {
    const Outputs lp_only = Run(hidden, weight, g_lp, at::Tensor(), plain);
    const Outputs got = Run(hidden, weight, g_lp, at::Tensor(), [&](const at::Tensor& h, const at::Tensor& w) {
      ChunkedLogProbsResult r = ChunkedLogProbs(h, w, targets, temperature, /*with_entropy=*/false, 4);
      CHECK_FALSE(r.entropy.defined());
      return std::make_pair(r.log_probs, at::Tensor());
    });
    CHECK(MaxDiff(got.log_probs, lp_only.log_probs) < 1e-5);
    CHECK(MaxDiff(got.grad_hidden, lp_only.grad_hidden) < 1e-4);
    CHECK(MaxDiff(got.grad_weight, lp_only.grad_weight) < 1e-4);
  }
  SECTION("bfloat16 weights: the same as the plain path in bfloat16") {
    const at::Tensor h16 = hidden.to(at::kBFloat16), w16 = weight.to(at::kBFloat16);
    const Outputs want16 = Run(h16, w16, g_lp, g_ent, plain);
    const Outputs got16 = Run(h16, w16, g_lp, g_ent, [&](const at::Tensor& h, const at::Tensor& w) {
      ChunkedLogProbsResult r = ChunkedLogProbs(h, w, targets, temperature, true, 4);
      return std::make_pair(r.log_probs, r.entropy);
    });
    CHECK(MaxDiff(got16.log_probs, want16.log_probs) < 1e-5);
    CHECK(MaxDiff(got16.grad_hidden, want16.grad_hidden) < 2e-2);
    CHECK(MaxDiff(got16.grad_weight, want16.grad_weight) < 5e-2);
  }
  SECTION("without grad mode no history is kept") {
    at::NoGradGuard no_grad;
    ChunkedLogProbsResult r = ChunkedLogProbs(hidden.clone().requires_grad_(true), weight, targets, 1.0, true, 4);
    CHECK_FALSE(r.log_probs.requires_grad());
  }
}

}  // namespace
}  // namespace verl

// ChunkedLogProbs against the plain path (full logits, log_softmax, gather, EntropyFromLogits, autograd): the same
// values and the same gradients of the hidden states and the LM head, for chunks that do and do not divide the tokens.

#include "worker/train/chunked_log_probs.h"

#include <ATen/core/grad_mode.h>

#include <utility>
#include <vector>

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

TEST_CASE("ChunkedLogProbsWithGrad gives ChunkedLogProbs' values and backward, its gradients waiting on the anchor",
          "[worker][train]") {
  at::manual_seed(8);
  const int64_t B = 3, R = 5, H = 16, V = 37;
  const at::Tensor hidden = at::randn({B, R, H});
  const at::Tensor weight = at::randn({V, H}) * 0.3;
  const at::Tensor targets = at::randint(0, V, {B, R}, at::kLong);
  const at::Tensor g_lp = at::randn({B * R});
  const at::Tensor g_ent = at::randn({B * R});
  for (int64_t chunk : {0, 4, 15}) {
    for (bool with_ent : {true, false}) {
      CAPTURE(chunk, with_ent);
      // The plain chunks, backpropagated from g_lp . log_probs (+ g_ent . entropy).
      at::Tensor h1 = hidden.clone().requires_grad_(true), w1 = weight.clone().requires_grad_(true);
      ChunkedLogProbsResult plain = ChunkedLogProbs(h1, w1, targets, 0.8, /*with_entropy=*/true, chunk);
      at::Tensor loss = (plain.log_probs.reshape({-1}) * g_lp).sum();
      if (with_ent) loss = loss + (plain.entropy.reshape({-1}) * g_ent).sum();
      (2.0 * loss).backward();
      // The same gradients from the token callback, the anchor's backward scaled by 2; each chunk's callback sees the
      // chunk's own log-probs and entropy.
      at::Tensor h2 = hidden.clone().requires_grad_(true), w2 = weight.clone().requires_grad_(true);
      std::vector<std::pair<at::Tensor, at::Tensor>> seen;
      std::vector<int64_t> begins;
      const TokenLossGrad token_grad = [&](int64_t begin, const at::Tensor& lp, const at::Tensor& ent) {
        REQUIRE_FALSE(at::GradMode::is_enabled());
        begins.push_back(begin);
        seen.emplace_back(lp.clone(), ent.clone());
        const int64_t n = lp.size(0);
        return std::make_pair(g_lp.narrow(0, begin, n), with_ent ? g_ent.narrow(0, begin, n) : at::Tensor());
      };
      ChunkedLossGradResult fused = ChunkedLogProbsWithGrad(h2, w2, targets, 0.8, token_grad, chunk);
      REQUIRE_FALSE(fused.log_probs.requires_grad());
      REQUIRE(at::equal(fused.log_probs, plain.log_probs.detach()));
      REQUIRE(at::equal(fused.entropy, plain.entropy.detach()));
      REQUIRE(fused.anchor.item<double>() == 0.0);
      REQUIRE_FALSE(h2.grad().defined());  // nothing reaches the leaves before the anchor's backward
      (2.0 * fused.anchor).backward();
      CHECK(MaxDiff(h2.grad(), h1.grad()) <= 1e-6 * (1 + h1.grad().abs().max().item<double>()));
      CHECK(MaxDiff(w2.grad(), w1.grad()) <= 1e-6 * (1 + w1.grad().abs().max().item<double>()));
      // The chunks cover the tokens once, in order, and the callback saw the values returned.
      const int64_t step = chunk > 0 ? chunk : B * R;
      REQUIRE(begins.size() == static_cast<size_t>((B * R + step - 1) / step));
      for (size_t i = 0; i < begins.size(); ++i) {
        REQUIRE(begins[i] == static_cast<int64_t>(i) * step);
        REQUIRE(at::equal(seen[i].first, fused.log_probs.reshape({-1}).narrow(0, begins[i], seen[i].first.size(0))));
        REQUIRE(at::equal(seen[i].second, fused.entropy.reshape({-1}).narrow(0, begins[i], seen[i].second.size(0))));
      }
    }
  }
}

TEST_CASE("ChunkedLogProbsWithGrad with a bf16 weight hands back a bf16 weight gradient, scaled by the anchor's",
          "[worker][train]") {
  // The weight's gradient is summed over the chunks in float32, then scaled by the anchor's upstream gradient and
  // rounded to the weight's dtype.
  at::manual_seed(9);
  const at::Tensor hidden = at::randn({2, 7, 16}).to(at::kBFloat16);
  const at::Tensor weight = (at::randn({37, 16}) * 0.3).to(at::kBFloat16);
  const at::Tensor targets = at::randint(0, 37, {2, 7}, at::kLong);
  const at::Tensor g_lp = at::randn({14});
  const TokenLossGrad token_grad = [&](int64_t begin, const at::Tensor& lp, const at::Tensor&) {
    return std::make_pair(g_lp.narrow(0, begin, lp.size(0)), at::Tensor());
  };
  auto weight_grad = [&](double scale) {
    at::Tensor h = hidden.clone().requires_grad_(true), w = weight.clone().requires_grad_(true);
    ChunkedLossGradResult r = ChunkedLogProbsWithGrad(h, w, targets, 0.8, token_grad, /*chunk=*/4);
    (scale * r.anchor).backward();
    return w.grad();
  };
  const at::Tensor g1 = weight_grad(1.0), g3 = weight_grad(3.0);
  REQUIRE(g1.scalar_type() == at::kBFloat16);
  REQUIRE(g3.scalar_type() == at::kBFloat16);
  CHECK(g1.abs().max().item<double>() > 0.0);
  // 3x the bf16 gradient within bf16's rounding of each (the float32 sums are the same in both runs; zeros stay zero).
  const at::Tensor want = g1.to(at::kFloat) * 3;
  CHECK((g3.to(at::kFloat) - want).abs().le(want.abs() * (1.0 / 128)).all().item<bool>());
}

}  // namespace
}  // namespace verl

#include "worker/train/core_algos.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/worker/torch_catch.h"
#include "worker/train/advantage.h"
#include "worker/train/policy_loss.h"

namespace verl {
namespace {

using testing::MaxAbsDiff;

// The hand-computed cases below were written for whole-batch calls; these adapters run them through the production
// entry points (ComputeAdvantages, ComputePolicyLossByMode, AggLossGlobal) with the batch as its own mini-batch.
at::Tensor ComputeGrpoOutcomeAdvantage(const at::Tensor& rewards, const at::Tensor& mask,
                                       const std::vector<std::string>& uids, bool norm_by_std) {
  AdvantageInputs in;
  in.token_level_rewards = rewards;
  in.response_mask = mask;
  in.group_ids = uids;
  AdvantageOptions o;
  o.norm_adv_by_std_in_grpo = norm_by_std;
  auto r = ComputeAdvantages("grpo", in, o);
  REQUIRE(r.ok());
  return r->advantages;
}

absl::StatusOr<PolicyLossResult> ComputePolicyLoss(const at::Tensor& old_log_prob, const at::Tensor& log_prob,
                                                   const at::Tensor& adv, const at::Tensor& mask, double low,
                                                   double high, double clip_c, const std::string& mode) {
  PolicyLossOptions o;
  o.clip_ratio_low = low;
  o.clip_ratio_high = high;
  o.clip_ratio_c = clip_c;
  o.loss_agg_mode = mode;
  return ComputePolicyLossByMode(old_log_prob, log_prob, adv, mask, at::Tensor(), o, LocalAggNormalizer(mask));
}

absl::StatusOr<at::Tensor> AggLoss(const at::Tensor& loss, const at::Tensor& mask, const std::string& mode) {
  return AggLossGlobal(loss, mask, mode, LocalAggNormalizer(mask));
}

at::Tensor Floats(const std::vector<std::vector<float>>& rows) {
  at::Tensor t = at::empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())}, at::kFloat);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < rows[i].size(); ++j) t[i][j] = rows[i][j];
  }
  return t;
}

TEST_CASE("MaskedMean divides by the mask's sum", "[worker][train]") {
  at::Tensor x = Floats({{1, 2, 3}, {4, 5, 6}});
  at::Tensor mask = Floats({{1, 0, 1}, {0, 0, 1}});
  REQUIRE(MaskedMean(x, mask).item<double>() == Approx((1 + 3 + 6) / 3.0));
  // An all-zero mask gives 0, not NaN.
  REQUIRE(MaskedMean(x, at::zeros_like(mask)).item<double>() == 0.0);
}

TEST_CASE("GRPO advantage normalises scores within each uid group", "[worker][train]") {
  // Rows (uid, token rewards summing to the score):
  //   0 a [0.25, 0.75, 0] -> 1      1 b [0, 0, 0.5] -> 0.5     2 a [0, 0, 0] -> 0
  //   3 c [2, 0, 0] -> 2 (alone)    4 b [0.5, 0, 0] -> 0.5     5 a [0, 0, 0] -> 0     6 b [0, 0.5, 0] -> 0.5
  at::Tensor rewards =
      Floats({{0.25, 0.75, 0}, {0, 0, 0.5}, {0, 0, 0}, {2, 0, 0}, {0.5, 0, 0}, {0, 0, 0}, {0, 0.5, 0}});
  at::Tensor mask = Floats({{1, 1, 0}, {1, 1, 1}, {1, 0, 0}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}).to(at::kBool);
  const std::vector<std::string> uids = {"a", "b", "a", "c", "b", "a", "b"};

  SECTION("norm_by_std: (score - mean) / (unbiased std + 1e-6)") {
    at::Tensor adv = ComputeGrpoOutcomeAdvantage(rewards, mask, uids, /*norm_by_std=*/true);
    REQUIRE(adv.sizes() == rewards.sizes());
    // Group a = [1, 0, 0]: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3).
    const double std_a = std::sqrt(1.0 / 3.0);
    const double a_hi = (2.0 / 3.0) / (std_a + 1e-6);   // 1.1546985...
    const double a_lo = (-1.0 / 3.0) / (std_a + 1e-6);  // -0.5773493...
    REQUIRE(a_hi == Approx(1.1546985).epsilon(1e-6));
    // Group b = [0.5, 0.5, 0.5]: std 0, so every advantage is 0 / 1e-6 = 0.
    // Group c = [2] alone: mean 0, std 1 -> 2 / (1 + 1e-6).
    const double c = 2.0 / (1.0 + 1e-6);
    at::Tensor expected = Floats({{float(a_hi), float(a_hi), 0},
                                  {0, 0, 0},
                                  {float(a_lo), 0, 0},
                                  {float(c), float(c), float(c)},
                                  {0, 0, 0},
                                  {float(a_lo), float(a_lo), float(a_lo)},
                                  {0, 0, 0}});
    REQUIRE(MaxAbsDiff(adv, expected) < 1e-6);
    // The response mask zeroes the padded tokens.
    REQUIRE(adv[0][2].item<float>() == 0.0f);
    REQUIRE(adv[2][1].item<float>() == 0.0f);
  }

  SECTION("without norm_by_std: score - mean") {
    at::Tensor adv = ComputeGrpoOutcomeAdvantage(rewards, mask, uids, /*norm_by_std=*/false);
    at::Tensor expected = Floats({{2.f / 3, 2.f / 3, 0},
                                  {0, 0, 0},
                                  {-1.f / 3, 0, 0},
                                  {2, 2, 2},
                                  {0, 0, 0},
                                  {-1.f / 3, -1.f / 3, -1.f / 3},
                                  {0, 0, 0}});
    REQUIRE(MaxAbsDiff(adv, expected) < 1e-6);
  }
}

TEST_CASE("Policy loss: ratio clipping, dual clip and clip fractions", "[worker][train]") {
  // old_log_prob = 0, so ratio = exp(log_prob). clip 0.2 / 0.2, clip_ratio_c 3.
  //   (A, ratio)       pg1=-A r   pg2=-A clip(r)  max        dual clip (A<0): min(3 |A|, max)   clipped?  lower?
  //   ( 1, 1.5)        -1.5       -1.2            -1.2       -                                   yes       no
  //   ( 1, 0.5)        -0.5       -0.8            -0.5       -                                   no        no
  //   (-1, 0.5)         0.5        0.8             0.8       0.8                                 yes       no
  //   (-1, 4.0)         4.0        1.2             4.0       3.0                                 no        yes
  //   (-1, 1.1)         1.1        1.1             1.1       1.1                                 no        no
  //   ( 5, 10 ) masked out (it would be clipped).
  const std::vector<std::vector<float>> ratios = {{1.5, 0.5, 0.5}, {4.0, 1.1, 10.0}};
  at::Tensor log_prob = Floats(ratios).log().requires_grad_(true);
  at::Tensor old_log_prob = at::zeros({2, 3}, at::kFloat);
  at::Tensor adv = Floats({{1, 1, -1}, {-1, -1, 5}});
  at::Tensor mask = Floats({{1, 1, 1}, {1, 1, 0}});

  auto r = ComputePolicyLoss(old_log_prob, log_prob, adv, mask, 0.2, 0.2, 3.0, "token-mean");
  REQUIRE(r.ok());
  REQUIRE(r->pg_loss.item<double>() == Approx((-1.2 - 0.5 + 0.8 + 3.0 + 1.1) / 5).epsilon(1e-6));
  REQUIRE(r->pg_clipfrac.item<double>() == Approx(2.0 / 5));
  REQUIRE(r->pg_clipfrac_lower.item<double>() == Approx(1.0 / 5));
  const double ppo_kl = -(std::log(1.5) + std::log(0.5) + std::log(0.5) + std::log(4.0) + std::log(1.1)) / 5;
  REQUIRE(r->ppo_kl.item<double>() == Approx(ppo_kl).epsilon(1e-6));

  // Gradients: clipped and dual-clipped tokens get none; the others get d(-A r)/d(log r) / 5 = -A r / 5.
  r->pg_loss.backward();
  at::Tensor expected_grad = Floats({{0, -0.5f / 5, 0}, {0, 1.1f / 5, 0}});
  REQUIRE(MaxAbsDiff(log_prob.grad(), expected_grad) < 1e-6);

  SECTION("seq-mean-token-sum aggregates the same per-token losses") {
    auto s = ComputePolicyLoss(old_log_prob, log_prob, adv, mask, 0.2, 0.2, 3.0, "seq-mean-token-sum");
    REQUIRE(s.ok());
    REQUIRE(s->pg_loss.item<double>() == Approx(((-1.2 - 0.5 + 0.8) + (3.0 + 1.1)) / 2).epsilon(1e-6));
  }
  SECTION("asymmetric clip range (clip-higher)") {
    // clip_ratio_high 0.6: ratio 1.5 is no longer clipped for A = 1.
    auto s = ComputePolicyLoss(old_log_prob, log_prob, adv, mask, 0.2, 0.6, 3.0, "token-mean");
    REQUIRE(s.ok());
    REQUIRE(s->pg_loss.item<double>() == Approx((-1.5 - 0.5 + 0.8 + 3.0 + 1.1) / 5).epsilon(1e-6));
    REQUIRE(s->pg_clipfrac.item<double>() == Approx(1.0 / 5));
  }
  SECTION("errors") {
    auto bad_c = ComputePolicyLoss(old_log_prob, log_prob, adv, mask, 0.2, 0.2, 1.0, "token-mean");
    REQUIRE(bad_c.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(bad_c.status().message()).find("clip_ratio_c") != std::string::npos);
    auto bad_mode = ComputePolicyLoss(old_log_prob, log_prob, adv, mask, 0.2, 0.2, 3.0, "token-sum");
    REQUIRE(bad_mode.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(bad_mode.status().message()).find("token-sum") != std::string::npos);
  }
}

TEST_CASE("AggLoss: the four loss_agg_modes on a masked matrix", "[worker][train]") {
  at::Tensor loss = Floats({{1, 2, 3}, {4, 5, 6}});
  at::Tensor mask = Floats({{1, 1, 1}, {1, 0, 0}});
  auto agg = [&](const std::string& mode) {
    auto r = AggLoss(loss, mask, mode);
    INFO(mode << ": " << r.status().ToString());
    REQUIRE(r.ok());
    return r->item<double>();
  };
  REQUIRE(agg("token-mean") == Approx((1 + 2 + 3 + 4) / 4.0));
  REQUIRE(agg("seq-mean-token-sum") == Approx((6 + 4) / 2.0));
  REQUIRE(agg("seq-mean-token-mean") == Approx((6 / 3.0 + 4 / 1.0) / 2));
  REQUIRE(agg("seq-mean-token-sum-norm") == Approx((6 + 4) / 3.0));  // divided by the response width
  auto bad = AggLoss(loss, mask, "seq-sum");
  REQUIRE(bad.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(bad.status().message()).find("'seq-sum'") != std::string::npos);
}

TEST_CASE("KlPenalty: every estimator and its aliases", "[worker][train]") {
  // log_prob - ref = [0.5, -0.5].
  at::Tensor lp = Floats({{0.0f, -1.0f}});
  at::Tensor ref = Floats({{-0.5f, -0.5f}});
  auto kl = [&](const std::string& type) {
    auto r = KlPenalty(lp, ref, type);
    INFO(type << ": " << r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  };
  REQUIRE(MaxAbsDiff(kl("kl"), Floats({{0.5f, -0.5f}})) < 1e-7);
  REQUIRE(MaxAbsDiff(kl("k1"), Floats({{0.5f, -0.5f}})) < 1e-7);
  REQUIRE(MaxAbsDiff(kl("abs"), Floats({{0.5f, 0.5f}})) < 1e-7);
  REQUIRE(MaxAbsDiff(kl("mse"), Floats({{0.125f, 0.125f}})) < 1e-7);
  REQUIRE(MaxAbsDiff(kl("k2"), Floats({{0.125f, 0.125f}})) < 1e-7);
  // k3: with d = ref - log_prob = [-0.5, 0.5], exp(d) - d - 1.
  at::Tensor k3 = Floats({{float(std::exp(-0.5) + 0.5 - 1), float(std::exp(0.5) - 0.5 - 1)}});
  REQUIRE(MaxAbsDiff(kl("low_var_kl"), k3) < 1e-6);
  REQUIRE(MaxAbsDiff(kl("k3"), k3) < 1e-6);
  // k3 is clamped: d = -30 -> clamped to -20 -> e^-20 + 19 -> clamped to 10.
  auto far = KlPenalty(Floats({{0.0f}}), Floats({{-30.0f}}), "low_var_kl");
  REQUIRE(far.ok());
  REQUIRE(far->item<double>() == Approx(10.0));

  auto bad = KlPenalty(lp, ref, "k4");
  REQUIRE(bad.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(bad.status().message()).find("'k4'") != std::string::npos);
}

TEST_CASE("EntropyFromLogits", "[worker][train]") {
  // Uniform over V = 7: log 7, whatever the constant.
  at::Tensor uniform = at::full({2, 3, 7}, 3.0f, at::kFloat);
  at::Tensor h = EntropyFromLogits(uniform);
  REQUIRE(h.sizes() == at::IntArrayRef({2, 3}));
  REQUIRE(MaxAbsDiff(h, at::full({2, 3}, std::log(7.0), at::kFloat)) < 1e-6);
  // Nearly one-hot: ~0.
  at::Tensor peaked = Floats({{100.0f, 0.0f, 0.0f, 0.0f}});
  REQUIRE(std::abs(EntropyFromLogits(peaked).item<double>()) < 1e-6);
  // p = [1/4, 3/4] from logits [0, log 3]: -(1/4 log 1/4 + 3/4 log 3/4).
  at::Tensor two = Floats({{0.0f, float(std::log(3.0))}});
  REQUIRE(EntropyFromLogits(two).item<double>() ==
          Approx(-(0.25 * std::log(0.25) + 0.75 * std::log(0.75))).epsilon(1e-6));
}

}  // namespace
}  // namespace verl

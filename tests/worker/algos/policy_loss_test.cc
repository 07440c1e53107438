#include "worker/train/policy_loss.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/worker/algos/golden_util.h"

namespace verl {
namespace {

using testing::LoadGolden;
using testing::RequireNear;
using testing::ToTensor;

double AbsTol(at::ScalarType dtype) { return dtype == at::kDouble ? 1e-9 : 1e-6; }

PolicyLossOptions OptionsOf(const nlohmann::json& cfg) {
  PolicyLossOptions o;
  o.clip_ratio_low = cfg["clip_ratio_low"].get<double>();
  o.clip_ratio_high = cfg["clip_ratio_high"].get<double>();
  o.clip_ratio_c = cfg["clip_ratio_c"].get<double>();
  o.clip_cov_ratio = cfg["clip_cov_ratio"].get<double>();
  o.clip_cov_lb = cfg["clip_cov_lb"].get<double>();
  o.clip_cov_ub = cfg["clip_cov_ub"].get<double>();
  o.kl_cov_ratio = cfg["kl_cov_ratio"].get<double>();
  o.ppo_kl_coef = cfg["ppo_kl_coef"].get<double>();
  o.tau_pos = cfg["tau_pos"].get<double>();
  o.tau_neg = cfg["tau_neg"].get<double>();
  return o;
}

TEST_CASE("every policy loss mode and aggregation matches verl's formulas", "[algos]") {
  const nlohmann::json golden = LoadGolden("policy_loss.json");
  const nlohmann::json& in = golden["inputs"];
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    const at::Tensor old_lp = ToTensor(in["old_log_prob"], dtype);
    const at::Tensor adv = ToTensor(in["advantages"], dtype);
    const at::Tensor mask = ToTensor(in["response_mask"], dtype);
    const at::Tensor rollout = ToTensor(in["rollout_log_prob"], dtype);
    const AggNormalizer norm = LocalAggNormalizer(mask);
    for (const auto& c : golden["policy"]) {
      PolicyLossOptions o = OptionsOf(golden["config"]);
      o.loss_mode = c["loss_mode"].get<std::string>();
      o.loss_agg_mode = c["loss_agg_mode"].get<std::string>();
      // tis: the truncated IS against the rollout; for reinforce (bypass mode, old_log_prob holding the rollout's) its
      // own weights min(pi / pi_old, reinforce_is_threshold).
      const bool tis = c["tis"].get<bool>();
      const bool reinforce = o.loss_mode == "reinforce";
      if (tis && reinforce) o.reinforce_is_threshold = golden["config"]["reinforce_is_threshold"].get<double>();
      if (tis && !reinforce) o.tis_imp_ratio_cap = golden["config"]["tis_imp_ratio_cap"].get<double>();
      const std::string name =
          o.loss_mode + "/" + o.loss_agg_mode + (tis ? "/tis" : "") + (dtype == at::kFloat ? "/f32" : "/f64");
      at::Tensor lp = ToTensor(in["log_prob"], dtype).clone().requires_grad_(true);
      // A bool mask, as verl's engine passes it.
      auto r = ComputePolicyLossByMode(old_lp, lp, adv, mask.to(at::kBool), tis && !reinforce ? rollout : at::Tensor(),
                                       o, norm);
      INFO(name << ": " << r.status().ToString());
      REQUIRE(r.ok());
      const double tol = AbsTol(dtype);
      RequireNear(r->pg_loss.item<double>(), c["pg_loss"].get<double>(), name + " pg_loss", 1e-5, tol);
      RequireNear(r->pg_clipfrac.item<double>(), c["pg_clipfrac"].get<double>(), name + " pg_clipfrac", 1e-5, tol);
      RequireNear(r->ppo_kl.item<double>(), c["ppo_kl"].get<double>(), name + " ppo_kl", 1e-5, tol);
      RequireNear(r->pg_clipfrac_lower.item<double>(), c["pg_clipfrac_lower"].get<double>(),
                  name + " pg_clipfrac_lower", 1e-5, tol);
      CHECK_FALSE(r->pg_clipfrac.requires_grad());
      CHECK_FALSE(r->ppo_kl.requires_grad());
      r->pg_loss.backward();
      RequireNear(lp.grad(), ToTensor(c["grad_log_prob"]), name + " d pg_loss / d log_prob", 1e-5, tol);
    }
  }
}

TEST_CASE("the off-policy figures match verl's compute_offpolicy_metrics", "[algos]") {
  const nlohmann::json golden = LoadGolden("policy_loss.json");
  const nlohmann::json& in = golden["inputs"];
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    const at::Tensor figures =
        OffPolicyFigures(ToTensor(in["log_prob"], dtype), ToTensor(in["rollout_log_prob"], dtype),
                         ToTensor(in["response_mask"], dtype).to(at::kBool));
    REQUIRE(figures.scalar_type() == at::kFloat);
    REQUIRE(figures.numel() == static_cast<int64_t>(OffPolicyFigureNames().size()));
    REQUIRE(golden["offpolicy"].size() == OffPolicyFigureNames().size());
    for (size_t i = 0; i < OffPolicyFigureNames().size(); ++i) {
      const std::string& name = OffPolicyFigureNames()[i];
      RequireNear(figures[static_cast<int64_t>(i)].item<double>(), golden["offpolicy"][name].get<double>(),
                  "rollout_corr/" + name, 1e-5, 1e-6);
    }
  }
  // Equal log-probs: no divergence, equal perplexities.
  const at::Tensor lp = ToTensor(in["log_prob"], at::kFloat), mask = ToTensor(in["response_mask"], at::kFloat);
  const at::Tensor same = OffPolicyFigures(lp, lp, mask);
  for (const char* zero : {"kl", "k3_kl", "log_ppl_diff", "log_ppl_abs_diff", "chi2_token", "chi2_seq"}) {
    const auto at = std::find(OffPolicyFigureNames().begin(), OffPolicyFigureNames().end(), zero);
    INFO(zero);
    CHECK(std::abs(same[at - OffPolicyFigureNames().begin()].item<double>()) < 1e-6);
  }
}

TEST_CASE("loss aggregation matches verl's agg_loss and ignores padding", "[algos]") {
  const nlohmann::json golden = LoadGolden("policy_loss.json");
  const at::Tensor mask = ToTensor(golden["inputs"]["response_mask"]);
  const at::Tensor loss_mat = ToTensor(golden["agg"]["loss_mat"]);  // 1e30 on every padded position
  const AggNormalizer norm = LocalAggNormalizer(mask);
  CHECK(norm.global_tokens == mask.sum().item<double>());
  CHECK(norm.global_seqs == 7);  // one of the 8 rows is fully masked
  CHECK(norm.global_rows == 8);  // geo_mean's denominator counts it
  CHECK(norm.max_response_length == mask.size(1));
  for (const auto& c : golden["agg"]["cases"]) {
    const std::string mode = c["loss_agg_mode"].get<std::string>();
    auto r = AggLossGlobal(loss_mat, mask, mode, norm);
    INFO(mode << ": " << r.status().ToString());
    REQUIRE(r.ok());
    RequireNear(r->item<double>(), c["loss"].get<double>(), "agg_loss " + mode, 1e-5, 1e-9);
    auto as_float = AggLossGlobal(loss_mat.to(at::kFloat), mask.to(at::kBool), mode, norm);
    REQUIRE(as_float.ok());
    RequireNear(as_float->item<double>(), c["loss"].get<double>(), "agg_loss (float32) " + mode, 1e-5, 1e-6);
  }
}

TEST_CASE("the clipped value loss matches verl's compute_value_loss", "[algos]") {
  const nlohmann::json golden = LoadGolden("policy_loss.json");
  const nlohmann::json& v = golden["value"];
  const at::Tensor mask = ToTensor(golden["inputs"]["response_mask"]);
  for (const auto& c : v["cases"]) {
    const std::string mode = c["loss_agg_mode"].get<std::string>();
    auto r = ComputeValueLoss(ToTensor(v["vpreds"]), ToTensor(v["returns"]), ToTensor(v["values"]), mask,
                              v["cliprange_value"].get<double>(), mode, LocalAggNormalizer(mask));
    INFO(mode << ": " << r.status().ToString());
    REQUIRE(r.ok());
    RequireNear(r->vf_loss.item<double>(), c["vf_loss"].get<double>(), "vf_loss " + mode, 1e-5, 1e-9);
    RequireNear(r->vf_clipfrac.item<double>(), c["vf_clipfrac"].get<double>(), "vf_clipfrac " + mode, 1e-5, 1e-9);
  }
}

TEST_CASE("every KL type: the estimate, its gradient and apply_kl_penalty match verl", "[algos]") {
  const nlohmann::json golden = LoadGolden("kl.json");
  const at::Tensor scores = ToTensor(golden["token_level_scores"], at::kFloat);
  const at::Tensor old_lp = ToTensor(golden["old_log_prob"]);
  const at::Tensor ref_lp = ToTensor(golden["ref_log_prob"]);
  const at::Tensor mask = ToTensor(golden["response_mask"]);
  const double kl_coef = golden["kl_coef"].get<double>();
  for (const auto& c : golden["cases"]) {
    const std::string type = c["kl_type"].get<std::string>();
    at::Tensor lp = old_lp.clone().requires_grad_(true);
    auto kl = KlPenaltyForLoss(lp, ref_lp, type);
    INFO(type << ": " << kl.status().ToString());
    REQUIRE(kl.ok());
    RequireNear(*kl, ToTensor(c["kl"]), "kl " + type, 1e-5, 1e-9);
    kl->sum().backward();
    RequireNear(lp.grad(), ToTensor(c["grad"]), "d kl / d log_prob " + type, 1e-5, 1e-9);

    auto r = ApplyKlPenalty(scores, old_lp.to(at::kFloat), ref_lp.to(at::kFloat), mask.to(at::kBool), kl_coef, type);
    REQUIRE(r.ok());
    CHECK(r->token_level_rewards.scalar_type() == at::kFloat);
    RequireNear(r->token_level_rewards, ToTensor(c["token_level_rewards"]), "rewards " + type);
    RequireNear(r->current_kl, c["current_kl"].get<double>(), "current_kl " + type);
  }
}

// The mini-batch loss assembled from micro-batches of `micro` sequences, each aggregated with the whole mini-batch's
// normaliser, and its gradient w.r.t. log_prob.
at::Tensor MicroBatchedGrad(const nlohmann::json& in, const std::string& loss_mode, const std::string& agg_mode,
                            int64_t micro, double* loss_out) {
  const at::Tensor old_lp = ToTensor(in["old_log_prob"], at::kFloat);
  const at::Tensor adv = ToTensor(in["advantages"], at::kFloat);
  const at::Tensor mask = ToTensor(in["response_mask"], at::kFloat);
  at::Tensor lp = ToTensor(in["log_prob"], at::kFloat).clone().requires_grad_(true);
  const AggNormalizer norm = LocalAggNormalizer(mask);
  PolicyLossOptions o;
  o.loss_mode = loss_mode;
  o.loss_agg_mode = agg_mode;
  if (loss_mode == "reinforce") o.reinforce_is_threshold = 1.2;  // weights of their own, some of them capped
  at::Tensor total = at::zeros({}, at::kFloat);
  for (int64_t begin = 0; begin < lp.size(0); begin += micro) {
    const int64_t end = std::min(begin + micro, lp.size(0));
    at::Tensor loss;
    if (loss_mode == "value") {
      // The critic's loss, with log_prob standing in for the value predictions.
      auto r = ComputeValueLoss(lp.slice(0, begin, end), adv.slice(0, begin, end), old_lp.slice(0, begin, end),
                                mask.slice(0, begin, end), 0.2, agg_mode, norm);
      REQUIRE(r.ok());
      loss = r->vf_loss;
    } else {
      auto r = ComputePolicyLossByMode(old_lp.slice(0, begin, end), lp.slice(0, begin, end), adv.slice(0, begin, end),
                                       mask.slice(0, begin, end), at::Tensor(), o, norm);
      INFO(r.status().ToString());
      REQUIRE(r.ok());
      loss = r->pg_loss;
    }
    total = total + loss;
  }
  total.backward();
  *loss_out = total.item<double>();
  return lp.grad().clone();
}

TEST_CASE("micro-batch size does not change the mini-batch loss or gradient", "[algos]") {
  const nlohmann::json in = LoadGolden("policy_loss.json")["inputs"];
  for (const std::string& agg_mode : LossAggModeNames()) {
    for (const std::string loss_mode : {"vanilla", "gspo", "gpg", "cispo", "sapo", "geo_mean", "reinforce", "value"}) {
      double whole_loss = 0;
      const at::Tensor whole = MicroBatchedGrad(in, loss_mode, agg_mode, 8, &whole_loss);
      REQUIRE(whole.abs().sum().item<double>() > 0);
      for (int64_t micro : {1, 2, 4}) {
        INFO(loss_mode << " / " << agg_mode << " with micro-batches of " << micro);
        double loss = 0;
        const at::Tensor grad = MicroBatchedGrad(in, loss_mode, agg_mode, micro, &loss);
        CHECK(std::abs(loss - whole_loss) <= 1e-5 * std::abs(whole_loss) + 1e-6);
        CHECK((grad - whole).abs().max().item<double>() <= 1e-6);
      }
    }
  }
}

TEST_CASE("policy loss errors name what is wrong", "[algos]") {
  const at::Tensor lp = at::zeros({2, 3});
  const at::Tensor mask = at::ones({2, 3});
  const AggNormalizer norm = LocalAggNormalizer(mask);

  PolicyLossOptions o;
  o.loss_mode = "ppo_typo";
  auto unknown = ComputePolicyLossByMode(lp, lp, lp, mask, at::Tensor(), o, norm);
  REQUIRE(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string msg(unknown.status().message());
  CHECK(msg.find("ppo_typo") != std::string::npos);
  for (const std::string& name : PolicyLossModeNames()) CHECK(msg.find(name) != std::string::npos);

  o.loss_mode = "vanilla";
  o.loss_agg_mode = "token-sum";
  auto agg = ComputePolicyLossByMode(lp, lp, lp, mask, at::Tensor(), o, norm);
  REQUIRE(agg.status().code() == absl::StatusCode::kInvalidArgument);
  for (const std::string& name : LossAggModeNames()) {
    CHECK(std::string(agg.status().message()).find(name) != std::string::npos);
  }

  o.loss_agg_mode = "token-mean";
  o.tis_imp_ratio_cap = 2.0;
  auto tis = ComputePolicyLossByMode(lp, lp, lp, mask, at::Tensor(), o, norm);
  REQUIRE(tis.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(tis.status().message()).find("rollout_log_prob") != std::string::npos);

  o.tis_imp_ratio_cap = -1;
  o.clip_ratio_c = 1.0;
  auto dual = ComputePolicyLossByMode(lp, lp, lp, mask, at::Tensor(), o, norm);
  REQUIRE(dual.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(dual.status().message()).find("clip_ratio_c") != std::string::npos);

  o.clip_ratio_c = 3.0;
  o.loss_mode = "sapo";
  o.tau_neg = 0;
  auto tau = ComputePolicyLossByMode(lp, lp, lp, mask, at::Tensor(), o, norm);
  REQUIRE(tau.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(tau.status().message()).find("tau_neg") != std::string::npos);

  // A normaliser left at zero would silently scale the loss; it is an error instead.
  auto zero = AggLossGlobal(lp, mask, "token-mean", AggNormalizer{});
  REQUIRE(zero.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(zero.status().message()).find("global_tokens") != std::string::npos);
  o.loss_mode = "geo_mean";
  auto rows = ComputePolicyLossByMode(lp, lp, lp, mask, at::Tensor(), o, AggNormalizer{});
  REQUIRE(rows.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(rows.status().message()).find("global_rows") != std::string::npos);

  auto shape = ComputePolicyLossByMode(lp, lp, lp, at::ones({2, 2}), at::Tensor(), PolicyLossOptions{}, norm);
  REQUIRE(shape.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(shape.status().message()).find("response_mask") != std::string::npos);

  auto kl = ApplyKlPenalty(lp, lp, lp, mask, 0.1, "k4");
  REQUIRE(kl.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(kl.status().message()).find("low_var_kl+") != std::string::npos);
}

}  // namespace
}  // namespace verl

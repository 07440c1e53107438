#include "worker/train/core_algos.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace verl {

at::Tensor MaskedMean(const at::Tensor& x, const at::Tensor& mask) {
  at::Tensor m = mask.to(x.scalar_type());
  return (x * m).sum() / (m.sum() + 1e-8);
}

at::Tensor ComputeGrpoOutcomeAdvantage(const at::Tensor& token_level_rewards, const at::Tensor& response_mask,
                                       const std::vector<std::string>& group_ids, bool norm_by_std,
                                       double epsilon) {
  at::Tensor scores = token_level_rewards.sum(-1).to(at::kFloat);
  std::map<std::string, std::vector<int64_t>> groups;
  for (size_t i = 0; i < group_ids.size(); ++i) groups[group_ids[i]].push_back(static_cast<int64_t>(i));
  at::Tensor normalized = scores.clone();
  for (const auto& [id, rows] : groups) {
    at::Tensor idx = at::tensor(rows, at::TensorOptions().dtype(at::kLong));
    at::Tensor s = scores.index_select(0, idx);
    at::Tensor mean = rows.size() > 1 ? s.mean() : at::zeros({}, at::kFloat);
    at::Tensor std = rows.size() > 1 ? s.std(/*unbiased=*/true) : at::ones({}, at::kFloat);
    at::Tensor v = norm_by_std ? (s - mean) / (std + epsilon) : s - mean;
    normalized.index_copy_(0, idx, v);
  }
  return normalized.unsqueeze(-1) * response_mask.to(at::kFloat);
}

absl::StatusOr<at::Tensor> KlPenalty(const at::Tensor& log_prob, const at::Tensor& ref_log_prob,
                                     const std::string& kl_type) {
  if (kl_type == "kl" || kl_type == "k1") return log_prob - ref_log_prob;
  if (kl_type == "abs") return (log_prob - ref_log_prob).abs();
  if (kl_type == "mse" || kl_type == "k2") return 0.5 * (log_prob - ref_log_prob).square();
  if (kl_type == "low_var_kl" || kl_type == "k3") {
    at::Tensor kl = (ref_log_prob - log_prob).clamp(-20, 20);
    at::Tensor kld = kl.exp() - kl - 1;
    return kld.clamp(-10, 10);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown kl_loss_type '", kl_type,
                                                 "' (expected kl, k1, abs, mse, k2, low_var_kl or k3)"));
}

absl::StatusOr<at::Tensor> AggLoss(const at::Tensor& loss_mat, const at::Tensor& mask, const std::string& mode) {
  at::Tensor m = mask.to(loss_mat.scalar_type());
  if (mode == "token-mean") return MaskedMean(loss_mat, m);
  if (mode == "seq-mean-token-sum") return (loss_mat * m).sum(-1).mean();
  if (mode == "seq-mean-token-mean") return ((loss_mat * m).sum(-1) / m.sum(-1).clamp_min(1e-8)).mean();
  if (mode == "seq-mean-token-sum-norm") return (loss_mat * m).sum() / static_cast<double>(m.size(-1));
  return absl::InvalidArgumentError(absl::StrCat("unknown loss_agg_mode '", mode, "'"));
}

absl::StatusOr<PolicyLossResult> ComputePolicyLoss(const at::Tensor& old_log_prob, const at::Tensor& log_prob,
                                                   const at::Tensor& advantages, const at::Tensor& response_mask,
                                                   double clip_ratio_low, double clip_ratio_high,
                                                   double clip_ratio_c, const std::string& loss_agg_mode) {
  if (clip_ratio_c <= 1.0) {
    return absl::InvalidArgumentError(absl::StrCat("clip_ratio_c must be > 1.0, got ", clip_ratio_c));
  }
  at::Tensor mask = response_mask.to(at::kFloat);
  at::Tensor negative_approx_kl = (log_prob - old_log_prob).clamp(-20.0, 20.0);
  at::Tensor ratio = negative_approx_kl.exp();
  PolicyLossResult r;
  r.ppo_kl = MaskedMean(-negative_approx_kl, mask).detach();
  at::Tensor pg_losses1 = -advantages * ratio;
  at::Tensor pg_losses2 = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high);
  at::Tensor clip_pg_losses1 = at::maximum(pg_losses1, pg_losses2);
  r.pg_clipfrac = MaskedMean(pg_losses2.gt(pg_losses1).to(at::kFloat), mask).detach();
  at::Tensor pg_losses3 = -advantages * clip_ratio_c;
  at::Tensor clip_pg_losses2 = at::minimum(pg_losses3, clip_pg_losses1);
  r.pg_clipfrac_lower =
      MaskedMean(clip_pg_losses1.gt(pg_losses3).logical_and(advantages.lt(0)).to(at::kFloat), mask).detach();
  at::Tensor pg_losses = at::where(advantages.lt(0), clip_pg_losses2, clip_pg_losses1);
  auto agg = AggLoss(pg_losses, mask, loss_agg_mode);
  if (!agg.ok()) return agg.status();
  r.pg_loss = *agg;
  return r;
}

at::Tensor EntropyFromLogits(const at::Tensor& logits) {
  at::Tensor pd = logits.softmax(-1);
  return logits.logsumexp(-1) - (pd * logits).sum(-1);
}

}  // namespace verl

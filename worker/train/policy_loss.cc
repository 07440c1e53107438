#include "worker/train/policy_loss.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdint>
#include <exception>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "worker/rank/torch_util.h"

namespace verl {
namespace {

absl::Status SameShape(const char* what, const at::Tensor& t, const at::Tensor& ref, const char* ref_name) {
  if (!t.defined() || t.sizes() != ref.sizes()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must match ", ref_name, " ", ShapeOf(ref), ", got ", ShapeOf(t)));
  }
  return absl::OkStatus();
}

// verl's masked_sum: zero outside the mask (so nan/inf there cannot leak in), times the mask.
at::Tensor MaskedTerms(const at::Tensor& x, const at::Tensor& mask) {
  at::Tensor m = mask.to(x.scalar_type());
  return at::where(mask.ne(0), x, at::zeros({}, x.options())) * m;
}

// verl's masked_mean over every element: masked_sum / (sum(mask) + 1e-8), detached (metrics only).
at::Tensor MetricMean(const at::Tensor& x, const at::Tensor& mask) {
  at::NoGradGuard no_grad;
  at::Tensor xd = x.detach();
  if (!at::isFloatingType(xd.scalar_type())) xd = xd.to(at::kFloat);
  return (MaskedTerms(xd, mask).sum() / (mask.to(xd.scalar_type()).sum() + 1e-8)).detach();
}

at::Tensor Zero(const at::Tensor& like) { return at::zeros({}, like.options().requires_grad(false)); }

bool IsAggMode(const std::string& mode) {
  const auto& names = LossAggModeNames();
  return std::find(names.begin(), names.end(), mode) != names.end();
}

// The truncated importance-sampling weights against the rollout policy, or an undefined tensor when TIS is off.
absl::StatusOr<at::Tensor> TisWeights(const at::Tensor& old_log_prob, const at::Tensor& rollout_log_prob,
                                      const PolicyLossOptions& options) {
  if (options.tis_imp_ratio_cap <= 0) return at::Tensor();
  if (!rollout_log_prob.defined()) {
    return absl::FailedPreconditionError(absl::StrCat("tis_imp_ratio_cap is ", options.tis_imp_ratio_cap,
                                                      " but rollout_log_prob (the rollout policy's log-probs) is "
                                                      "missing"));
  }
  RETURN_IF_ERROR(SameShape("rollout_log_prob", rollout_log_prob, old_log_prob, "old_log_prob"));
  at::NoGradGuard no_grad;
  return (old_log_prob - rollout_log_prob).clamp(-20.0, 20.0).exp().clamp_max(options.tis_imp_ratio_cap).detach();
}

struct LossTerms {
  at::Tensor pg_losses;  // [N, R], per token, before TIS and aggregation
  std::string agg_mode;  // the aggregation the mode uses
  // geo_mean: one loss per sequence [N] (TIS already applied), averaged over the mini-batch's rows instead of
  // pg_losses and agg_mode.
  at::Tensor seq_losses;
  at::Tensor pg_clipfrac;
  at::Tensor ppo_kl;
  at::Tensor pg_clipfrac_lower;
};

absl::StatusOr<LossTerms> Vanilla(const at::Tensor& old_log_prob, const at::Tensor& log_prob, const at::Tensor& adv,
                                  const at::Tensor& mask, const PolicyLossOptions& o) {
  if (o.clip_ratio_c <= 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip_ratio_c (dual-clip lower bound) must be > 1.0, got ", o.clip_ratio_c));
  }
  LossTerms t;
  at::Tensor neg_kl = (log_prob - old_log_prob).clamp(-20.0, 20.0);
  at::Tensor ratio = neg_kl.exp();
  t.ppo_kl = MetricMean(-neg_kl, mask);
  at::Tensor losses1 = -adv * ratio;
  at::Tensor losses2 = -adv * ratio.clamp(1.0 - o.clip_ratio_low, 1.0 + o.clip_ratio_high);
  at::Tensor clipped1 = at::maximum(losses1, losses2);
  t.pg_clipfrac = MetricMean(losses2.gt(losses1), mask);
  // Dual clip: for negative advantages the loss is bounded by -A * clip_ratio_c.
  at::Tensor losses3 = -adv * o.clip_ratio_c;
  at::Tensor clipped2 = at::minimum(losses3, clipped1);
  t.pg_clipfrac_lower = MetricMean(clipped1.gt(losses3).logical_and(adv.lt(0)), mask);
  t.pg_losses = at::where(adv.lt(0), clipped2, clipped1);
  t.agg_mode = o.loss_agg_mode;
  return t;
}

LossTerms Gspo(const at::Tensor& old_log_prob, const at::Tensor& log_prob, const at::Tensor& adv,
               const at::Tensor& mask, const PolicyLossOptions& o) {
  LossTerms t;
  at::Tensor m = mask.to(log_prob.scalar_type());
  at::Tensor neg_kl = log_prob - old_log_prob;
  // Sequence-level ratio s_i = exp(mean_t log ratio), carried per token as sg[s_i] * pi / sg[pi].
  at::Tensor seq_lengths = m.sum(-1).clamp_min(1);
  at::Tensor neg_kl_seq = MaskedTerms(neg_kl, mask).sum(-1) / seq_lengths;
  at::Tensor log_seq_ratio = (log_prob - log_prob.detach() + neg_kl_seq.detach().unsqueeze(-1)).clamp_max(10.0);
  at::Tensor seq_ratio = log_seq_ratio.exp();
  at::Tensor losses1 = -adv * seq_ratio;
  at::Tensor losses2 = -adv * seq_ratio.clamp(1.0 - o.clip_ratio_low, 1.0 + o.clip_ratio_high);
  t.pg_losses = at::maximum(losses1, losses2);
  t.agg_mode = "seq-mean-token-mean";
  t.pg_clipfrac = MetricMean(losses2.gt(losses1), mask);
  t.pg_clipfrac_lower = Zero(log_prob);
  t.ppo_kl = MetricMean(-neg_kl, mask);
  return t;
}

LossTerms Gpg(const at::Tensor& log_prob, const at::Tensor& adv, const PolicyLossOptions& o) {
  LossTerms t;
  t.pg_losses = -log_prob * adv;
  t.agg_mode = o.loss_agg_mode;
  t.pg_clipfrac = Zero(log_prob);
  t.ppo_kl = Zero(log_prob);
  t.pg_clipfrac_lower = Zero(log_prob);
  return t;
}

// verl's compute_policy_loss_reinforce as its bypass mode runs it (rollout_correction.loss_type=reinforce), where the
// old log-probs are the rollout's: -A log pi, times the IS weights min(exp(clamp(log pi - old, +-20)), cap),
// detached, when reinforce_is_threshold (the cap) is > 0. Only ppo_kl is reported, the masked mean of old - log pi.
LossTerms Reinforce(const at::Tensor& old_log_prob, const at::Tensor& log_prob, const at::Tensor& adv,
                    const at::Tensor& mask, const PolicyLossOptions& o) {
  LossTerms t;
  t.pg_losses = -adv * log_prob;
  if (o.reinforce_is_threshold > 0) {
    at::Tensor weights;
    {
      at::NoGradGuard no_grad;
      weights = (log_prob.detach() - old_log_prob).clamp(-20.0, 20.0).exp().clamp_max(o.reinforce_is_threshold);
    }
    t.pg_losses = t.pg_losses * weights;
  }
  t.agg_mode = o.loss_agg_mode;
  t.pg_clipfrac = Zero(log_prob);
  t.ppo_kl = MetricMean(old_log_prob - log_prob, mask);
  t.pg_clipfrac_lower = Zero(log_prob);
  return t;
}

LossTerms Cispo(const at::Tensor& old_log_prob, const at::Tensor& log_prob, const at::Tensor& adv,
                const at::Tensor& mask, const PolicyLossOptions& o) {
  LossTerms t;
  at::Tensor neg_kl = (log_prob - old_log_prob).clamp(-20.0, 20.0);
  at::Tensor ratio = neg_kl.exp();
  t.ppo_kl = MetricMean(-neg_kl, mask);
  at::Tensor clipped_ratio = ratio.clamp(1.0 - o.clip_ratio_low, 1.0 + o.clip_ratio_high);
  // The clipped ratio is a stop-gradient weight; the gradient flows through log_prob only.
  t.pg_losses = -clipped_ratio.detach() * adv * log_prob;
  t.pg_clipfrac = MetricMean(ratio.ne(clipped_ratio), mask);
  t.pg_clipfrac_lower = Zero(log_prob);
  t.agg_mode = o.loss_agg_mode;
  return t;
}

// SAPO: a smooth gate sigmoid(tau (r - 1)) 4 / tau on each token's ratio instead of the clip, tau_pos where the
// advantage is positive and tau_neg elsewhere; aggregated with seq-mean-token-mean whatever loss_agg_mode says.
absl::StatusOr<LossTerms> Sapo(const at::Tensor& old_log_prob, const at::Tensor& log_prob, const at::Tensor& adv,
                               const at::Tensor& mask, const PolicyLossOptions& o) {
  if (!(o.tau_pos > 0) || !(o.tau_neg > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sapo's temperatures tau_pos and tau_neg must be > 0, got ", o.tau_pos, " and ", o.tau_neg));
  }
  LossTerms t;
  at::Tensor neg_kl = (log_prob - old_log_prob).clamp(-20.0, 20.0);
  at::Tensor ratio = neg_kl.exp();
  t.ppo_kl = MetricMean(-neg_kl, mask);
  const at::Tensor tau =
      at::where(adv.gt(0), at::full({}, o.tau_pos, adv.options()), at::full({}, o.tau_neg, adv.options()));
  t.pg_losses = -(at::sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)) * adv;
  t.agg_mode = "seq-mean-token-mean";
  t.pg_clipfrac = Zero(log_prob);
  t.pg_clipfrac_lower = Zero(log_prob);
  return t;
}

// GMPO: per sequence, -A * exp(the mean over its tokens of the log ratio clipped by the advantage's sign), with A the
// sequence's mean advantage; `tis` (defined when TIS is on) enters as the geometric mean of the sequence's weights.
LossTerms GeoMean(const at::Tensor& old_log_prob, const at::Tensor& log_prob, const at::Tensor& adv,
                  const at::Tensor& mask, const at::Tensor& tis, const PolicyLossOptions& o) {
  LossTerms t;
  at::Tensor neg_kl = log_prob - old_log_prob;
  t.ppo_kl = MetricMean(-neg_kl, mask);
  const at::Tensor sign = adv.sign();
  const at::Tensor clamped = neg_kl.clamp(-o.clip_ratio_low, o.clip_ratio_high);
  const at::Tensor kept = sign * at::minimum(sign * neg_kl, sign * clamped);
  const at::Tensor lengths = mask.to(log_prob.scalar_type()).sum(-1) + 1e-8;
  const at::Tensor seq_ratio = (MaskedTerms(kept, mask).sum(-1) / lengths).exp();
  const at::Tensor seq_adv = MaskedTerms(adv, mask).sum(-1) / lengths;
  t.seq_losses = -seq_adv * seq_ratio;
  if (tis.defined()) t.seq_losses = t.seq_losses * (MaskedTerms((tis + 1e-10).log(), mask).sum(-1) / lengths).exp();
  const at::Tensor clipped = neg_kl.ne(clamped);
  t.pg_clipfrac = MetricMean(clipped.logical_and(adv.gt(0)), mask);
  t.pg_clipfrac_lower = MetricMean(clipped.logical_and(adv.lt(0)), mask);
  return t;
}

absl::StatusOr<LossTerms> ClipCov(const at::Tensor& old_log_prob, const at::Tensor& log_prob, const at::Tensor& adv,
                                  const at::Tensor& mask, const PolicyLossOptions& o) {
  if (o.clip_cov_ratio <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("clip_cov_ratio must be > 0, got ", o.clip_cov_ratio));
  }
  LossTerms t;
  at::Tensor neg_kl = log_prob - old_log_prob;
  at::Tensor ratio = neg_kl.exp();
  t.ppo_kl = MetricMean(-neg_kl, mask);
  at::Tensor losses1 = -adv * ratio;
  at::Tensor losses2 = -adv * ratio.clamp(1.0 - o.clip_ratio_low, 1.0 + o.clip_ratio_high);
  at::Tensor corr;
  {
    at::NoGradGuard no_grad;
    at::Tensor valid = mask.gt(0);
    at::Tensor clip_by_origin = losses2.gt(losses1).logical_and(valid);
    // Tokens whose covariance of advantage and log-prob lies in (lb, ub) and that the PPO clip does not already
    // clip are candidates; up to clip_cov_ratio of the valid tokens, drawn at random, get no gradient.
    at::Tensor lp = log_prob.detach();
    at::Tensor cov = (adv - MetricMean(adv, mask)) * (lp - MetricMean(lp, mask));
    cov = at::where(valid.logical_not().logical_or(clip_by_origin), at::full({}, -INFINITY, cov.options()), cov);
    const int64_t clip_num =
        std::max<int64_t>(static_cast<int64_t>(o.clip_cov_ratio * mask.to(at::kDouble).sum().item<double>()), 1);
    at::Tensor candidates = cov.lt(o.clip_cov_ub).logical_and(cov.gt(o.clip_cov_lb)).logical_and(valid).nonzero();
    corr = at::ones_like(adv);
    const int64_t k = candidates.size(0);
    if (k > 0) {
      at::Tensor perm = at::randperm(k, at::TensorOptions().dtype(at::kLong).device(candidates.device()));
      at::Tensor chosen = candidates.index_select(0, perm.slice(0, 0, std::min(clip_num, k)));
      corr.index_put_({chosen.select(1, 0), chosen.select(1, 1)}, 0);
    }
  }
  t.pg_clipfrac = MetricMean(corr.eq(0), mask);
  t.pg_losses = at::maximum(losses1, losses2) * corr;
  t.pg_clipfrac_lower = Zero(log_prob);
  t.agg_mode = o.loss_agg_mode;
  return t;
}

absl::StatusOr<LossTerms> KlCov(const at::Tensor& old_log_prob, const at::Tensor& log_prob, const at::Tensor& adv,
                                const at::Tensor& mask, const PolicyLossOptions& o) {
  if (o.kl_cov_ratio <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("kl_cov_ratio must be > 0, got ", o.kl_cov_ratio));
  }
  LossTerms t;
  at::Tensor neg_kl = log_prob - old_log_prob;
  at::Tensor abs_kl = neg_kl.abs();
  at::Tensor ratio = neg_kl.exp();
  t.ppo_kl = MetricMean(abs_kl, mask);
  at::Tensor losses1 = -adv * ratio;
  at::Tensor losses_kl = -adv * ratio + o.ppo_kl_coef * abs_kl;
  at::Tensor selected;
  {
    at::NoGradGuard no_grad;
    // The kl_cov_ratio share of valid tokens with the largest covariance of advantage and log-prob get the |KL|
    // penalty.
    at::Tensor valid = mask.gt(0);
    at::Tensor valid_idx = valid.reshape({-1}).nonzero().reshape({-1});
    at::Tensor adv_v = adv.detach().reshape({-1}).index_select(0, valid_idx).to(at::kDouble);
    at::Tensor lp_v = log_prob.detach().reshape({-1}).index_select(0, valid_idx).to(at::kDouble);
    selected = at::zeros({adv.numel()}, at::TensorOptions().dtype(at::kBool).device(adv.device()));
    const int64_t n = valid_idx.size(0);
    if (n > 0) {
      at::Tensor cov = (adv_v - adv_v.mean()) * (lp_v - lp_v.mean());
      const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * o.kl_cov_ratio));
      at::Tensor top = std::get<1>(cov.topk(std::min(k, n), /*dim=*/0, /*largest=*/true));
      selected.index_fill_(0, valid_idx.index_select(0, top), true);
    }
    selected = selected.reshape(adv.sizes());
  }
  t.pg_losses = at::where(selected, losses_kl, losses1);
  t.pg_clipfrac = Zero(log_prob);
  t.pg_clipfrac_lower = Zero(log_prob);
  t.agg_mode = o.loss_agg_mode;
  return t;
}

absl::StatusOr<PolicyLossResult> PolicyLossImpl(const at::Tensor& old_log_prob, const at::Tensor& log_prob,
                                                const at::Tensor& advantages, const at::Tensor& response_mask,
                                                const at::Tensor& rollout_log_prob, const PolicyLossOptions& o,
                                                const AggNormalizer& norm) {
  const std::string& mode = o.loss_mode;
  ASSIGN_OR_RETURN(at::Tensor tis, TisWeights(old_log_prob, rollout_log_prob, o));
  LossTerms t;
  if (mode == "vanilla") {
    ASSIGN_OR_RETURN(t, Vanilla(old_log_prob, log_prob, advantages, response_mask, o));
  } else if (mode == "gspo") {
    t = Gspo(old_log_prob, log_prob, advantages, response_mask, o);
  } else if (mode == "gpg") {
    t = Gpg(log_prob, advantages, o);
  } else if (mode == "reinforce") {
    t = Reinforce(old_log_prob, log_prob, advantages, response_mask, o);
  } else if (mode == "cispo") {
    t = Cispo(old_log_prob, log_prob, advantages, response_mask, o);
  } else if (mode == "clip_cov") {
    ASSIGN_OR_RETURN(t, ClipCov(old_log_prob, log_prob, advantages, response_mask, o));
  } else if (mode == "kl_cov") {
    ASSIGN_OR_RETURN(t, KlCov(old_log_prob, log_prob, advantages, response_mask, o));
  } else if (mode == "sapo") {
    ASSIGN_OR_RETURN(t, Sapo(old_log_prob, log_prob, advantages, response_mask, o));
  } else if (mode == "geo_mean") {
    t = GeoMean(old_log_prob, log_prob, advantages, response_mask, tis, o);
  } else {
    return absl::InternalError(absl::StrCat("policy loss '", mode, "' has no implementation"));
  }
  PolicyLossResult r;
  if (t.seq_losses.defined()) {
    // verl's torch.mean over the micro-batch's sequences times loss_scale_factor (its rows over the mini-batch's):
    // the sum over the micro-batch's rows over the mini-batch's rows, all of them (an empty response counts, at 0).
    if (!(norm.global_rows > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("policy loss '", mode,
                                                     "' divides by AggNormalizer.global_rows, which is ",
                                                     norm.global_rows, " (must be > 0)"));
    }
    r.pg_loss = t.seq_losses.sum() / norm.global_rows;
  } else {
    if (tis.defined()) t.pg_losses = t.pg_losses * tis;
    ASSIGN_OR_RETURN(r.pg_loss, AggLossGlobal(t.pg_losses, response_mask, t.agg_mode, norm));
  }
  r.pg_clipfrac = t.pg_clipfrac;
  r.ppo_kl = t.ppo_kl;
  r.pg_clipfrac_lower = t.pg_clipfrac_lower;
  return r;
}

}  // namespace

ReportedPolicyMetrics PolicyMetricsReported(const std::string& loss_mode) {
  if (loss_mode == "gpg") return {false, false, false};
  if (loss_mode == "kl_cov") return {false, true, false};
  if (loss_mode == "clip_cov") return {true, true, false};
  if (loss_mode == "sapo" || loss_mode == "reinforce") return {false, true, false};
  return {};
}

bool PolicyLossIsPerToken(const PolicyLossOptions& options) {
  return options.loss_mode == "vanilla" || options.loss_mode == "gpg" || options.loss_mode == "cispo" ||
         options.loss_mode == "reinforce";
}

absl::StatusOr<at::Tensor> PerTokenPolicyLoss(const at::Tensor& old_log_prob, const at::Tensor& log_prob,
                                              const at::Tensor& advantages, const at::Tensor& response_mask,
                                              const at::Tensor& rollout_log_prob, const PolicyLossOptions& o) {
  if (!PolicyLossIsPerToken(o)) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy loss '", o.loss_mode,
                     "' is not a sum of per-token terms (vanilla, gpg, cispo and reinforce are)"));
  }
  RETURN_IF_ERROR(SameShape("old_log_prob", old_log_prob, log_prob, "log_prob"));
  RETURN_IF_ERROR(SameShape("advantages", advantages, log_prob, "log_prob"));
  RETURN_IF_ERROR(SameShape("response_mask", response_mask, log_prob, "log_prob"));
  try {
    LossTerms t;
    if (o.loss_mode == "vanilla") {
      ASSIGN_OR_RETURN(t, Vanilla(old_log_prob, log_prob, advantages, response_mask, o));
    } else if (o.loss_mode == "gpg") {
      t = Gpg(log_prob, advantages, o);
    } else if (o.loss_mode == "reinforce") {
      t = Reinforce(old_log_prob, log_prob, advantages, response_mask, o);
    } else {
      t = Cispo(old_log_prob, log_prob, advantages, response_mask, o);
    }
    ASSIGN_OR_RETURN(at::Tensor tis, TisWeights(old_log_prob, rollout_log_prob, o));
    return tis.defined() ? t.pg_losses * tis : t.pg_losses;
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("policy loss '", o.loss_mode, "' on log_prob ", ShapeOf(log_prob), ": ", e.what()));
  }
}

at::Tensor OffPolicyFigures(const at::Tensor& log_prob, const at::Tensor& rollout_log_prob, const at::Tensor& mask) {
  at::NoGradGuard no_grad;
  const at::Tensor lp = log_prob.detach().to(at::kFloat), roll = rollout_log_prob.detach().to(at::kFloat);
  const at::Tensor m = mask.to(at::kFloat);
  const at::Tensor count = m.sum() + 1e-8;
  auto masked_mean = [&](const at::Tensor& x) { return MaskedTerms(x, mask).sum() / count; };
  auto row_mean = [&](const at::Tensor& x) { return MaskedTerms(x, mask).sum(-1) / (m.sum(-1) + 1e-8); };
  const at::Tensor train_row = row_mean(lp), roll_row = row_mean(roll);
  const at::Tensor log_ratio = lp - roll;  // log(pi_train / pi_rollout)
  const at::Tensor diff = roll_row - train_row;
  const at::Tensor rho = log_ratio.clamp(-20.0, 20.0).exp();
  const at::Tensor seq_log_ratio = MaskedTerms(log_ratio, mask).sum(-1).clamp(-20.0, 20.0);
  return at::stack({(-train_row).exp().mean(), (-train_row).mean(), masked_mean(-log_ratio),
                    masked_mean(log_ratio.exp() - log_ratio - 1), (-roll_row).exp().mean(), (-roll_row).mean(),
                    diff.mean(), diff.abs().mean(), diff.max(), diff.min(), diff.exp().mean(),
                    masked_mean(rho.square()) - 1, (2.0 * seq_log_ratio).exp().mean() - 1})
      .detach();
}

const std::vector<std::string>& OffPolicyFigureNames() {
  static const auto* names = new std::vector<std::string>{
      "training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl", "rollout_log_ppl", "log_ppl_diff",
      "log_ppl_abs_diff", "log_ppl_diff_max", "log_ppl_diff_min", "ppl_ratio", "chi2_token", "chi2_seq"};
  return *names;
}

const std::vector<std::string>& PolicyLossModeNames() {
  static const auto* names = new std::vector<std::string>{"vanilla", "gspo", "gpg",      "cispo",
                                                          "clip_cov", "kl_cov", "sapo", "geo_mean", "reinforce"};
  return *names;
}

const std::vector<std::string>& LossAggModeNames() {
  static const auto* names = new std::vector<std::string>{"token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                                          "seq-mean-token-sum-norm"};
  return *names;
}

AggNormalizer LocalAggNormalizer(const at::Tensor& mini_batch_mask) {
  at::NoGradGuard no_grad;
  at::Tensor m = mini_batch_mask.to(at::kDouble);
  AggNormalizer norm;
  norm.global_tokens = m.sum().item<double>();
  norm.global_seqs = m.dim() >= 1 ? m.sum(-1).gt(0).sum().item<double>() : 0;
  norm.max_response_length = m.dim() >= 1 ? static_cast<double>(m.size(-1)) : 0;
  norm.global_rows = m.dim() >= 1 ? static_cast<double>(m.size(0)) : 0;
  return norm;
}

AggNormalizer GlobalAggNormalizer(const at::Tensor& mini_batch_mask, const ReduceSumFn& reduce_sum) {
  AggNormalizer norm = LocalAggNormalizer(mini_batch_mask);
  if (!reduce_sum) return norm;
  at::NoGradGuard no_grad;
  at::Tensor counts =
      reduce_sum(at::tensor({norm.global_tokens, norm.global_seqs, norm.global_rows}, at::kDouble)).to(at::kDouble);
  norm.global_tokens = counts[0].item<double>();
  norm.global_seqs = counts[1].item<double>();
  norm.global_rows = counts[2].item<double>();
  return norm;
}

absl::StatusOr<at::Tensor> AggLossGlobal(const at::Tensor& loss_mat, const at::Tensor& mask, const std::string& mode,
                                         const AggNormalizer& norm) {
  if (!IsAggMode(mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown loss_agg_mode '", mode, "'; valid: ", absl::StrJoin(LossAggModeNames(), ", ")));
  }
  if (!loss_mat.defined() || loss_mat.dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss_agg_mode '", mode, "': the loss matrix must be [N, R], got ", ShapeOf(loss_mat)));
  }
  RETURN_IF_ERROR(SameShape("the loss mask", mask, loss_mat, "the loss matrix"));
  auto denominator = [&](double value, const char* field) -> absl::StatusOr<double> {
    if (!(value > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("loss_agg_mode '", mode, "' divides by AggNormalizer.", field,
                                                     ", which is ", value, " (must be > 0)"));
    }
    return value;
  };
  try {
    at::Tensor terms = MaskedTerms(loss_mat, mask);
    if (mode == "token-mean") {
      ASSIGN_OR_RETURN(double d, denominator(norm.global_tokens, "global_tokens"));
      return terms.sum() / d;
    }
    if (mode == "seq-mean-token-sum-norm") {
      const double d = norm.max_response_length > 0 ? norm.max_response_length : static_cast<double>(mask.size(-1));
      ASSIGN_OR_RETURN(double checked, denominator(d, "max_response_length"));
      return terms.sum() / checked;
    }
    ASSIGN_OR_RETURN(double d, denominator(norm.global_seqs, "global_seqs"));
    at::Tensor seq_losses = terms.sum(-1);
    if (mode == "seq-mean-token-mean") seq_losses = seq_losses / (mask.to(loss_mat.scalar_type()).sum(-1) + 1e-8);
    // Fully masked sequences contribute 0 here and are not counted in global_seqs.
    return seq_losses.sum() / d;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loss_agg_mode '", mode, "' on ", ShapeOf(loss_mat), ": ", e.what()));
  }
}

absl::StatusOr<PolicyLossResult> ComputePolicyLossByMode(const at::Tensor& old_log_prob, const at::Tensor& log_prob,
                                                         const at::Tensor& advantages, const at::Tensor& response_mask,
                                                         const at::Tensor& rollout_log_prob,
                                                         const PolicyLossOptions& options, const AggNormalizer& norm) {
  const auto& names = PolicyLossModeNames();
  if (std::find(names.begin(), names.end(), options.loss_mode) == names.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown policy loss mode (actor.policy_loss.loss_mode) '",
                                                   options.loss_mode, "'; valid: ", absl::StrJoin(names, ", ")));
  }
  if (!IsAggMode(options.loss_agg_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown loss_agg_mode '", options.loss_agg_mode,
                                                   "'; valid: ", absl::StrJoin(LossAggModeNames(), ", ")));
  }
  if (!log_prob.defined() || log_prob.dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy loss '", options.loss_mode, "': log_prob must be [N, R], got ", ShapeOf(log_prob)));
  }
  RETURN_IF_ERROR(SameShape("old_log_prob", old_log_prob, log_prob, "log_prob"));
  RETURN_IF_ERROR(SameShape("advantages", advantages, log_prob, "log_prob"));
  RETURN_IF_ERROR(SameShape("response_mask", response_mask, log_prob, "log_prob"));
  try {
    auto r = PolicyLossImpl(old_log_prob, log_prob, advantages, response_mask, rollout_log_prob, options, norm);
    if (!r.ok()) return Annotate(r.status(), absl::StrCat("policy loss '", options.loss_mode, "'"));
    return r;
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("policy loss '", options.loss_mode, "' on log_prob ", ShapeOf(log_prob), ": ", e.what()));
  }
}

absl::StatusOr<ValueLossResult> ComputeValueLoss(const at::Tensor& vpreds, const at::Tensor& returns,
                                                 const at::Tensor& values, const at::Tensor& response_mask,
                                                 double cliprange_value, const std::string& loss_agg_mode,
                                                 const AggNormalizer& norm) {
  if (!vpreds.defined() || vpreds.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("value loss: vpreds must be [N, R], got ", ShapeOf(vpreds)));
  }
  RETURN_IF_ERROR(SameShape("value loss: returns", returns, vpreds, "vpreds"));
  RETURN_IF_ERROR(SameShape("value loss: values", values, vpreds, "vpreds"));
  RETURN_IF_ERROR(SameShape("value loss: response_mask", response_mask, vpreds, "vpreds"));
  try {
    // verl's clip_by_value: max(min(v, v_old + c), v_old - c).
    at::Tensor clipped = at::maximum(at::minimum(vpreds, values + cliprange_value), values - cliprange_value);
    at::Tensor losses1 = (vpreds - returns).square();
    at::Tensor losses2 = (clipped - returns).square();
    ASSIGN_OR_RETURN(at::Tensor agg, AggLossGlobal(at::maximum(losses1, losses2), response_mask, loss_agg_mode, norm));
    ValueLossResult r;
    r.vf_loss = 0.5 * agg;
    r.vf_clipfrac = MetricMean(losses2.gt(losses1), response_mask);
    return r;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("value loss on ", ShapeOf(vpreds), ": ", e.what()));
  }
}

absl::StatusOr<at::Tensor> KlPenaltyForLoss(const at::Tensor& log_prob, const at::Tensor& ref_log_prob,
                                            const std::string& kl_type) {
  const bool plus = !kl_type.empty() && kl_type.back() == '+';
  const std::string base = plus ? kl_type.substr(0, kl_type.size() - 1) : kl_type;
  auto forward = KlPenalty(log_prob, ref_log_prob, base);
  if (!forward.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown kl penalty type '", kl_type,
                     "'; valid: kl, k1, abs, mse, k2, low_var_kl, k3, and kl+, k1+, abs+, mse+, k2+, low_var_kl+, k3+ "
                     "(straight-through k2 gradient)"));
  }
  if (!plus || base == "mse" || base == "k2") return *forward;
  // Straight-through: the value of the chosen estimator, the gradient of k2 (unbiased for the KL's gradient).
  at::Tensor backward = 0.5 * (log_prob - ref_log_prob).square();
  return backward - backward.detach() + forward->detach();
}

absl::StatusOr<KlInRewardResult> ApplyKlPenalty(const at::Tensor& token_level_scores, const at::Tensor& old_log_prob,
                                                const at::Tensor& ref_log_prob, const at::Tensor& response_mask,
                                                double kl_coef, const std::string& kl_penalty) {
  if (!token_level_scores.defined() || token_level_scores.dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("apply_kl_penalty: token_level_scores must be [N, R], got ", ShapeOf(token_level_scores)));
  }
  RETURN_IF_ERROR(SameShape("apply_kl_penalty: old_log_prob", old_log_prob, token_level_scores, "token_level_scores"));
  RETURN_IF_ERROR(SameShape("apply_kl_penalty: ref_log_prob", ref_log_prob, token_level_scores, "token_level_scores"));
  RETURN_IF_ERROR(
      SameShape("apply_kl_penalty: response_mask", response_mask, token_level_scores, "token_level_scores"));
  try {
    at::NoGradGuard no_grad;
    ASSIGN_OR_RETURN(at::Tensor kld, KlPenaltyForLoss(old_log_prob, ref_log_prob, kl_penalty));
    at::Tensor m = response_mask.to(kld.scalar_type());
    kld = kld * m;
    KlInRewardResult r;
    r.token_level_rewards = (token_level_scores - kl_coef * kld).to(token_level_scores.scalar_type());
    const int64_t n = kld.size(0);
    if (n > 0) {
      at::Tensor per_seq = MaskedTerms(kld, response_mask).sum(-1) / (m.sum(-1) + 1e-8);
      r.current_kl = per_seq.to(at::kDouble).mean().item<double>();
    }
    return r;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("apply_kl_penalty on ", ShapeOf(token_level_scores), ": ", e.what()));
  }
}

}  // namespace verl

#ifndef VERL_WORKER_TRAIN_POLICY_LOSS_H_
#define VERL_WORKER_TRAIN_POLICY_LOSS_H_

// verl's policy losses (actor.policy_loss.loss_mode), loss aggregation normalised over the global mini-batch, the
// critic's clipped value loss, and the KL penalty in the reward. Definitions follow verl/trainer/ppo/core_algos.py of
// verl 0.8.0.dev (commit b178a3cd, 2026-01-29). Losses are computed in log_prob's dtype; masks are bool or float.

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/train/core_algos.h"

namespace verl {

const std::vector<std::string>& PolicyLossModeNames();

// How a micro-batch's loss is normalised so the mini-batch gradient does not depend on the micro-batch size or the
// number of ranks: the denominators are those of the whole (global) mini-batch. verl passes the same numbers as
// global_batch_info (batch_num_tokens, global_batch_size, loss_scale_factor) and multiplies by dp_size because FSDP
// averages gradients over ranks; here the results are meant to be SUMMED over micro-batches and ranks (the gradient
// all-reduce sums), so there is no dp_size factor.
struct AggNormalizer {
  double global_tokens = 0;  // sum of the response mask over the mini-batch, over all ranks (token-mean)
  // Sequences with at least one valid token in the mini-batch, over all ranks (seq-mean-*): verl's agg_loss excludes
  // fully masked sequences from the sequence mean.
  double global_seqs = 0;
  // verl's loss_scale_factor (seq-mean-token-sum-norm); 0 means the mask's width R, as verl's default.
  double max_response_length = 0;
  // Rows of the mini-batch over all ranks, empty responses included (geo_mean averages over them, as verl's
  // torch.mean times its loss_scale_factor does).
  double global_rows = 0;
};

// This rank's share of the normaliser for a mini-batch whose response mask is `mini_batch_mask` [N, R]: its token
// count, its non-empty sequence count, N and R. Sum global_tokens, global_seqs and global_rows over the ranks before
// use.
AggNormalizer LocalAggNormalizer(const at::Tensor& mini_batch_mask);
// LocalAggNormalizer with global_tokens, global_seqs and global_rows summed over the data-parallel group (a collective call).
AggNormalizer GlobalAggNormalizer(const at::Tensor& mini_batch_mask, const ReduceSumFn& reduce_sum);

// Sum-form aggregation of a micro-batch's per-token losses, divided by the global denominators of `norm` for `mode`,
// so that summing the results over all micro-batches (and ranks) gives verl's agg_loss over the mini-batch:
//   token-mean               sum(loss * mask) / global_tokens
//   seq-mean-token-sum       sum_seq(sum_t(loss * mask)) / global_seqs
//   seq-mean-token-mean      sum_seq(sum_t(loss * mask) / (sum_t(mask) + 1e-8)) / global_seqs
//   seq-mean-token-sum-norm  sum(loss * mask) / max_response_length (no division by the number of sequences)
// Positions outside the mask never contribute, even when the loss there is nan or inf. InvalidArgument for an
// unknown mode (listing the valid ones), for shapes that differ, and when the denominator the mode needs is <= 0.
absl::StatusOr<at::Tensor> AggLossGlobal(const at::Tensor& loss_mat, const at::Tensor& mask, const std::string& mode,
                                         const AggNormalizer& norm);

// The loss_agg_mode names, for error messages and config validation.
const std::vector<std::string>& LossAggModeNames();

struct PolicyLossOptions {
  std::string loss_mode = "vanilla";
  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double clip_ratio_c = 3.0;
  std::string loss_agg_mode = "token-mean";
  // clip_cov / kl_cov (verl's policy_loss.*)
  double clip_cov_ratio = 0.0002;
  double clip_cov_lb = 1.0;
  double clip_cov_ub = 5.0;
  double kl_cov_ratio = 0.0002;
  double ppo_kl_coef = 0.1;
  // sapo (verl's actor.tau_pos / tau_neg): the gate's temperature where the advantage is > 0, and elsewhere.
  double tau_pos = 1.0;
  double tau_neg = 1.05;
  // Truncated importance sampling against the rollout policy: weights min(exp(clamp(old_lp - rollout_lp, +-20)), cap),
  // detached, multiply the per-token loss of every mode when cap > 0 (verl's tis_imp_ratio_cap, which newer verl
  // generalised to rollout_is_weights with rollout_is=token and rollout_is_threshold=cap).
  double tis_imp_ratio_cap = -1;
  // loss_mode "reinforce" (verl's rollout_correction.bypass_mode with loss_type=reinforce; the old log-probs are then
  // the rollout's): -A log pi per token, times min(pi / pi_old, reinforce_is_threshold), detached, when that is > 0.
  double reinforce_is_threshold = -1;
};

// One micro-batch's policy loss for `options.loss_mode` (vanilla, gspo, gpg, cispo, clip_cov, kl_cov, sapo, geo_mean,
// and reinforce, which verl's bypass mode selects),
// aggregated with AggLossGlobal (gspo and sapo always with seq-mean-token-mean, as verl does; geo_mean, GMPO, has one
// term per sequence and averages them over norm.global_rows, whatever loss_agg_mode says, as verl's torch.mean does;
// with TIS its sequence's weight is the geometric mean of its tokens' weights). `rollout_log_prob` may be
// undefined unless tis_imp_ratio_cap > 0 (FailedPrecondition then). The metrics tensors (pg_clipfrac, ppo_kl,
// pg_clipfrac_lower) are micro-batch means, detached; a metric verl does not report for a mode, or reports as a
// constant 0, is 0 here (gpg: all three; clip_cov, kl_cov: pg_clipfrac_lower; kl_cov: pg_clipfrac, and its ppo_kl is
// the mean |log ratio| as verl's; sapo: both clip fractions), and UpdatePolicy leaves it out of its metrics
// (PolicyMetricsReported).
// clip_cov's statistics (covariance means, token budget) are per micro-batch as in verl, and it picks the tokens to
// exempt at random among the candidates (at::randperm on the default generator) when there are more than its budget.
// InvalidArgument for an unknown mode (listing the valid ones), clip_ratio_c <= 1 (vanilla), a ratio <= 0 (clip_cov,
// kl_cov), a temperature <= 0 (sapo), or shapes that differ.
absl::StatusOr<PolicyLossResult> ComputePolicyLossByMode(const at::Tensor& old_log_prob, const at::Tensor& log_prob,
                                                         const at::Tensor& advantages, const at::Tensor& response_mask,
                                                         const at::Tensor& rollout_log_prob,
                                                         const PolicyLossOptions& options, const AggNormalizer& norm);

// The per-micro-batch figures verl reports for a loss mode (its policy loss function's metrics): gpg none, kl_cov,
// sapo and reinforce only actor/ppo_kl (sapo's clip fractions are verl's constant 0), clip_cov actor/pg_clipfrac and
// actor/ppo_kl, every other mode all three. UpdatePolicy reports
// just these, so a mode's dashboard has no constant-zero series (a gpg run's ppo_kl of 0 read as "no drift").
struct ReportedPolicyMetrics {
  bool pg_clipfrac = true;
  bool ppo_kl = true;
  bool pg_clipfrac_lower = true;
};
ReportedPolicyMetrics PolicyMetricsReported(const std::string& loss_mode);

// Whether `options.loss_mode`'s loss is its aggregation (AggLossGlobal with options.loss_agg_mode) of per-token terms,
// each a function of its own token's log-prob: vanilla, gpg, cispo and reinforce (not gspo's sequence ratio, nor
// clip_cov's and kl_cov's choice of tokens over the micro-batch).
bool PolicyLossIsPerToken(const PolicyLossOptions& options);
// Those per-token terms (TIS weights applied), shaped like log_prob (any shape): ComputePolicyLossByMode's pg_loss is
// AggLossGlobal of them. InvalidArgument for another mode or shapes that differ.
absl::StatusOr<at::Tensor> PerTokenPolicyLoss(const at::Tensor& old_log_prob, const at::Tensor& log_prob,
                                              const at::Tensor& advantages, const at::Tensor& response_mask,
                                              const at::Tensor& rollout_log_prob, const PolicyLossOptions& options);

// verl's off-policy diagnostics (rollout_corr_helper.compute_offpolicy_metrics, as its actor computes them per
// micro-batch from the current log-probs against the rollout's) over one micro-batch: a float32 tensor of
// OffPolicyFigureNames().size() values, detached, in that order. Row means are over every row (an empty one counts,
// its masked mean 0, as verl's); the max and min are over rows. log_prob, rollout_log_prob and mask are [rows, r].
at::Tensor OffPolicyFigures(const at::Tensor& log_prob, const at::Tensor& rollout_log_prob, const at::Tensor& mask);
// Their names, to be prefixed with "rollout_corr/": training_ppl, training_log_ppl, kl, k3_kl, rollout_ppl,
// rollout_log_ppl, log_ppl_diff, log_ppl_abs_diff, log_ppl_diff_max, log_ppl_diff_min, ppl_ratio, chi2_token, chi2_seq.
const std::vector<std::string>& OffPolicyFigureNames();

struct ValueLossResult {
  at::Tensor vf_loss;      // scalar, differentiable (already multiplied by 0.5 as verl does)
  at::Tensor vf_clipfrac;  // scalar, detached
};

// verl's compute_value_loss: max((v - R)^2, (clip(v, v_old +- cliprange_value) - R)^2), aggregated with
// AggLossGlobal, times 0.5; vf_clipfrac is the micro-batch's masked mean of "the clipped term is larger".
absl::StatusOr<ValueLossResult> ComputeValueLoss(const at::Tensor& vpreds, const at::Tensor& returns,
                                                 const at::Tensor& values, const at::Tensor& response_mask,
                                                 double cliprange_value, const std::string& loss_agg_mode,
                                                 const AggNormalizer& norm);

// verl's kl_penalty: KlPenalty's estimators plus the straight-through variants "kl+", "k1+", "abs+", "low_var_kl+",
// "k3+" (value of the base estimator, gradient of k2 = 0.5 (log_prob - ref_log_prob)^2); "mse+"/"k2+" are k2. verl
// documents the "+" forms but its kl_penalty_forward at b178a3cd does not strip the "+" and raises for them; this is
// the documented behaviour. InvalidArgument listing the valid names for an unknown type.
absl::StatusOr<at::Tensor> KlPenaltyForLoss(const at::Tensor& log_prob, const at::Tensor& ref_log_prob,
                                            const std::string& kl_type);

// verl's apply_kl_penalty: kld = KlPenaltyForLoss(old_log_prob, ref_log_prob) * mask, token_level_rewards =
// token_level_scores - kl_coef * kld. current_kl is the mean over these N sequences of each sequence's masked mean
// KL (verl's actor/reward_kl_penalty, what the adaptive controller is fed); over several ranks, average it weighted
// by N.
struct KlInRewardResult {
  at::Tensor token_level_rewards;
  double current_kl = 0;
};
absl::StatusOr<KlInRewardResult> ApplyKlPenalty(const at::Tensor& token_level_scores, const at::Tensor& old_log_prob,
                                                const at::Tensor& ref_log_prob, const at::Tensor& response_mask,
                                                double kl_coef, const std::string& kl_penalty);

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_POLICY_LOSS_H_

#ifndef VERL_WORKER_TRAIN_CORE_ALGOS_H_
#define VERL_WORKER_TRAIN_CORE_ALGOS_H_

// verl's core algorithms (verl/trainer/ppo/core_algos.py), on ATen tensors. Shapes: N sequences, R response tokens.
// Masks are float or bool [N, R]; results follow verl's definitions term by term so numbers can be compared.

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace verl {

// sum(x * mask) / (sum(mask) + 1e-8), verl's masked_mean.
at::Tensor MaskedMean(const at::Tensor& x, const at::Tensor& mask);

// GRPO outcome advantage: per-sequence score = sum of token rewards; scores are normalised within each group of
// equal `group_ids` (mean, and unbiased std when norm_by_std); a group of one gets mean 0 and std 1; eps 1e-6.
// Returns advantages [N, R] = normalised score * response_mask (returns are identical in GRPO).
at::Tensor ComputeGrpoOutcomeAdvantage(const at::Tensor& token_level_rewards, const at::Tensor& response_mask,
                                       const std::vector<std::string>& group_ids, bool norm_by_std,
                                       double epsilon = 1e-6);

// Per-token KL estimate between the policy and the reference, verl's kl_penalty: "kl"/"k1", "abs", "mse"/"k2",
// "low_var_kl"/"k3" (clamped to [-10, 10]).
absl::StatusOr<at::Tensor> KlPenalty(const at::Tensor& log_prob, const at::Tensor& ref_log_prob,
                                     const std::string& kl_type);

// verl's agg_loss: "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm".
absl::StatusOr<at::Tensor> AggLoss(const at::Tensor& loss_mat, const at::Tensor& mask, const std::string& mode);

struct PolicyLossResult {
  at::Tensor pg_loss;            // scalar, differentiable
  at::Tensor pg_clipfrac;        // scalar
  at::Tensor ppo_kl;             // scalar
  at::Tensor pg_clipfrac_lower;  // scalar
};

// verl's vanilla PPO clipped objective with dual clip (clip_ratio_c > 1, applied to negative advantages).
absl::StatusOr<PolicyLossResult> ComputePolicyLoss(const at::Tensor& old_log_prob, const at::Tensor& log_prob,
                                                   const at::Tensor& advantages, const at::Tensor& response_mask,
                                                   double clip_ratio_low, double clip_ratio_high,
                                                   double clip_ratio_c, const std::string& loss_agg_mode);

// Entropy of softmax(logits) along the last axis: logsumexp(l) - sum(softmax(l) * l).
at::Tensor EntropyFromLogits(const at::Tensor& logits);

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_CORE_ALGOS_H_

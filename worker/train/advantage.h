#ifndef VERL_WORKER_TRAIN_ADVANTAGE_H_
#define VERL_WORKER_TRAIN_ADVANTAGE_H_

// verl's advantage estimators (algorithm.adv_estimator), as verl/trainer/ppo/core_algos.py defines them, on ATen
// tensors. N sequences, R response tokens; masks are bool or float [N, R].
//
// Batch-wide statistics (the whitening of gae, reinforce_plus_plus and reinforce_plus_plus_baseline, and gpg's
// batch size / non-zero count) must be computed over the whole batch even when it is spread over several ranks: every
// such sum goes through `reduce_sum`, which sums a tensor over the data-parallel group (identity on one rank). Group
// statistics (GRPO, RLOO, ...) stay on one rank because all samples of a prompt live there.
//
// Definitions follow verl 0.8.0.dev (commit b178a3cd, 2026-01-29). The estimators compute in float64 on the CPU (the
// tensors reduce_sum sees are float64 CPU tensors) and return tensors of token_level_rewards' dtype and device.

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/train/core_algos.h"

namespace verl {

// The estimator names verl accepts, for error messages and config validation.
const std::vector<std::string>& AdvantageEstimatorNames();

struct AdvantageInputs {
  at::Tensor token_level_rewards;      // [N, R] float32: score at the last response token, minus KL when in-reward
  at::Tensor response_mask;            // [N, R]
  std::vector<std::string> group_ids;  // N prompt uids (all samples of a prompt share one)
  at::Tensor values;                   // [N, R] critic values; required by gae only
  at::Tensor baseline_scores;          // [N] scores of the greedy baseline response; required by remax only
};

struct AdvantageOptions {
  double gamma = 1.0;                   // discount (gae, reinforce_plus_plus)
  double lam = 1.0;                     // GAE lambda
  bool norm_adv_by_std_in_grpo = true;  // grpo and grpo_passk divide by the group's std (false: Dr.GRPO)
  double epsilon = 1e-6;                // added to the group std
  // Sums a tensor over the data-parallel group; its return value is used (it may also sum in place). Every rank must
  // call ComputeAdvantages with the same estimator so the calls pair up. Identity when unset.
  ReduceSumFn reduce_sum;
};

struct AdvantageResult {
  // [N, R], zero outside the response mask, except for gae: verl whitens every position of GAE's advantages and does
  // not re-mask them (the losses mask them anyway).
  at::Tensor advantages;
  at::Tensor returns;  // [N, R]; the advantages themselves for the outcome estimators, as verl returns them
};

// Dispatches on `estimator` (gae, grpo, grpo_passk, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, remax,
// opo, gpg, grpo_vectorized, rloo_vectorized; the last two are verl's vectorised forms, which part from grpo and rloo
// for groups of near-equal scores and groups of one). InvalidArgument listing the valid names for an unknown one, for inputs of mismatched shapes, for a
// grpo_passk group of fewer than 2 samples and for whitening over fewer than 2 valid tokens (verl raises there);
// FailedPrecondition when an input the estimator needs (values, baseline_scores, group_ids) is missing.
absl::StatusOr<AdvantageResult> ComputeAdvantages(const std::string& estimator, const AdvantageInputs& inputs,
                                                  const AdvantageOptions& options);

// Masked whitening over the (global) batch, verl's masked_whiten: (x - mean) / sqrt(var + 1e-8), var unbiased, mean
// and var over the masked elements; every position (masked or not) is whitened. Needs at least 2 valid tokens over
// the group (else inf/nan, where verl raises). reduce_sum is called twice, on a [2] then a [] tensor.
at::Tensor MaskedWhiten(const at::Tensor& values, const at::Tensor& mask,
                        const ReduceSumFn& reduce_sum = nullptr);

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_ADVANTAGE_H_

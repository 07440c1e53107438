#ifndef VERL_WORKER_TRAIN_CORE_ALGOS_H_
#define VERL_WORKER_TRAIN_CORE_ALGOS_H_

// The small shared pieces of verl's core algorithms (verl/trainer/ppo/core_algos.py) on ATen tensors; the estimators
// are in advantage.h, the losses in policy_loss.h. Shapes: N sequences, R response tokens.
// Masks are float or bool [N, R]; results follow verl's definitions term by term so numbers can be compared.

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace verl {

// Sums a tensor over the data-parallel group and returns the sum (identical on every rank). Every rank of the group
// must make the same calls in the same order. An unset function means one rank: the identity.
using ReduceSumFn = std::function<at::Tensor(const at::Tensor&)>;
inline at::Tensor ReduceSum(const ReduceSumFn& fn, const at::Tensor& t) { return fn ? fn(t) : t; }

// sum(x * mask) / (sum(mask) + 1e-8), verl's masked_mean.
at::Tensor MaskedMean(const at::Tensor& x, const at::Tensor& mask);

// Per-token KL estimate between the policy and the reference, verl's kl_penalty: "kl"/"k1", "abs", "mse"/"k2",
// "low_var_kl"/"k3" (clamped to [-10, 10]).
absl::StatusOr<at::Tensor> KlPenalty(const at::Tensor& log_prob, const at::Tensor& ref_log_prob,
                                     const std::string& kl_type);

struct PolicyLossResult {
  at::Tensor pg_loss;            // scalar, differentiable
  at::Tensor pg_clipfrac;        // scalar
  at::Tensor ppo_kl;             // scalar
  at::Tensor pg_clipfrac_lower;  // scalar
};

// Entropy of softmax(logits) along the last axis: logsumexp(l) - sum(softmax(l) * l).
at::Tensor EntropyFromLogits(const at::Tensor& logits);

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_CORE_ALGOS_H_

#ifndef VERL_WORKER_TRAIN_PPO_CRITIC_H_
#define VERL_WORKER_TRAIN_PPO_CRITIC_H_

// The critic's two jobs in a PPO step, as verl's DataParallelPPOCritic: values of the responses, and the value update
// (clipped value loss over mini-batches / micro-batches / epochs, gradient clipping, AdamW).

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/value_model.h"
#include "worker/train/adamw.h"
#include "worker/train/ppo_actor.h"

namespace verl {

// Values [N, R] for the whole batch, a micro-batch at a time (padding trimmed per micro-batch), without gradients.
absl::StatusOr<at::Tensor> ComputeValuesNoGrad(const ValueModel& model, const SequenceBatch& batch,
                                               const MicroBatching& micro);
// The same with fixed micro-batches of `micro_batch_size` rows.
at::Tensor ComputeValuesNoGrad(const ValueModel& model, const SequenceBatch& batch, int64_t micro_batch_size);

struct ValueUpdateOptions {
  double lr = 1e-5;
  double grad_clip = 1.0;
  double cliprange_value = 0.5;
  std::string loss_agg_mode = "token-mean";
  int64_t mini_batch_size = 1;   // sequences per optimizer step
  int64_t micro_batch_size = 1;  // sequences per forward/backward
  int64_t max_token_len = 0;     // > 0: micro-batches by token budget (critic.use_dynamic_bsz)
  bool remove_padding = false;   // passes packed without padding (critic.model.use_remove_padding)
  int64_t ppo_epochs = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  ReduceSumFn reduce_sum;  // data parallelism, as PolicyUpdateOptions::reduce_sum
};

// Returns critic/vf_loss, critic/vf_clipfrac, critic/vpred_mean, critic/grad_norm, critic/lr.
absl::StatusOr<std::map<std::string, double>> UpdateValue(ValueModel& model, AdamW& optimizer,
                                                          const SequenceBatch& batch, const at::Tensor& old_values,
                                                          const at::Tensor& returns, const ValueUpdateOptions& options);

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_PPO_CRITIC_H_

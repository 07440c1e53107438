#ifndef VERL_WORKER_TRAIN_PPO_ACTOR_H_
#define VERL_WORKER_TRAIN_PPO_ACTOR_H_

// The actor's two jobs in a PPO/GRPO step, as verl's DataParallelPPOActor: log-probs of the responses in micro-batches,
// and the policy update over mini-batches / micro-batches / epochs with gradient clipping and AdamW.

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/decoder_model.h"
#include "worker/train/adamw.h"
#include "worker/train/chunked_log_probs.h"
#include "worker/train/policy_loss.h"
#include "worker/train/sequence_batch.h"

namespace verl {

struct LogProbResult {
  at::Tensor log_probs;  // [N, R] float32
  at::Tensor entropy;    // [N, R] float32, or undefined when not asked for
  int64_t packed_tokens = 0;  // ForwardLogProbsPacked: the tokens its forward ran (a shared prompt's once)
  at::Tensor anchor;  // with a TokenLossGradFor: ChunkedLogProbsWithGrad's anchor (log_probs, entropy without history)
};

// A pass's per-token loss gradient (chunked_log_probs.h's TokenLossGrad) for the tokens it computes, given where they
// are: their flat indices into the pass's [rows, R] log-probs (row-major), in the order the pass computes them, or
// undefined for all of them in order. With one, a forward with gradients forms the LM head's gradients chunk by chunk
// (ChunkedLogProbsWithGrad) and returns the log-probs, the entropy and the anchor whose backward applies them.
using TokenLossGradFor = std::function<TokenLossGrad(const at::Tensor& flat_tokens)>;

// Log-probs of `responses` under softmax(logits / temperature) for rows [begin, begin + count) of `batch`. Records
// autograd history when grad mode is on. `causal`: every row's valid tokens form one run (OneValidRun; checked), so
// attention is causal without a mask, each row rolled past its leading padding (DecoderModel::ForwardColumns with causal:
// the same values at the responses but for the attention kernel's rounding). The passes decide it once per step's
// batch (CausalPasses).
LogProbResult ForwardLogProbs(const DecoderModel& model, const SequenceBatch& batch, int64_t begin, int64_t count,
                              double temperature, bool with_entropy, bool causal = false,
                              const TokenLossGradFor* loss_grad = nullptr);

// ForwardLogProbs of every row of `batch` with the sequences packed back to back without padding (use_remove_padding):
// the same numbers, from attention per sequence (PackedSequences). Outputs are 0 outside the response mask.
// share_prompts (verl's use_prefix_grouper): rows with the same prompt run it once (PackBatch), the same numbers but
// for rounding, with gradients to the shared prompt's tokens summed over its rows.
LogProbResult ForwardLogProbsPacked(const DecoderModel& model, const SequenceBatch& batch, double temperature,
                                    bool with_entropy, bool share_prompts = false,
                                    const TokenLossGradFor* loss_grad = nullptr);

// Log-probs for the whole batch, a micro-batch at a time (padding trimmed per micro-batch), without gradients; 0 outside
// the response mask.
absl::StatusOr<at::Tensor> ComputeLogProbsNoGrad(const DecoderModel& model, const SequenceBatch& batch,
                                                 double temperature, const MicroBatching& micro);
// The same with fixed micro-batches of `micro_batch_size` rows.
at::Tensor ComputeLogProbsNoGrad(const DecoderModel& model, const SequenceBatch& batch, double temperature,
                                 int64_t micro_batch_size);

struct PolicyUpdateOptions {
  PolicyLossOptions loss;  // loss mode, clip ranges, loss_agg_mode (also used for the entropy and KL terms), TIS
  // verl's actor.loss_scale_factor: the divisor of seq-mean-token-sum-norm for the policy, entropy and KL terms (the
  // mini-batch's AggNormalizer::max_response_length); 0: the response mask's width.
  double loss_scale_factor = 0;
  double lr = 1e-6;
  double grad_clip = 1.0;
  double entropy_coeff = 0.0;
  bool use_kl_loss = false;
  double kl_loss_coef = 0.001;
  std::string kl_loss_type = "low_var_kl";
  int64_t mini_batch_size = 1;   // sequences per optimizer step (prompts * rollout.n)
  int64_t micro_batch_size = 1;  // sequences per forward/backward
  // > 0: micro-batches by token budget instead (use_dynamic_bsz, ppo_max_token_len_per_gpu; sequence_batch.h).
  int64_t max_token_len = 0;
  bool remove_padding = false;  // passes packed without padding (ForwardLogProbsPacked)
  // Passes packed with the rows of one prompt sharing its run (verl's use_prefix_grouper; packed with or without
  // remove_padding): MicroBatching::share_prompts.
  bool share_prompts = false;
  // The LM head's gradients formed in the forward, chunk by chunk, where the loss is a sum of per-token terms
  // (PolicyLossIsPerToken) and the model is not sharded: its GEMM then runs three times per token instead of four
  // (ChunkedLogProbsWithGrad). The same update but for rounding; false: backpropagate through ChunkedLogProbs.
  // UpdatePolicy reports whether it did as perf/actor_fused_lm_head (1 or 0).
  bool fuse_lm_head_grad = true;
  // verl's rollout_corr/* off-policy figures (OffPolicyFigures) of each micro-batch's log-probs against the
  // rollout's, averaged over the micro-batches as its actor reports them (rollout.calculate_log_probs or bypass mode).
  bool rollout_corr_metrics = false;
  int64_t ppo_epochs = 1;
  bool shuffle = false;
  double temperature = 1.0;
  uint64_t seed = 0;
  // Data parallelism: each rank passes its share of every mini-batch (mini_batch_size is per rank) and a reduce_sum
  // over the group; the normaliser counts, the gradients and the loss metrics are summed with it, so every rank takes
  // the same optimizer step as one rank with the whole mini-batch would. Unset: one rank.
  ReduceSumFn reduce_sum;
};

// Tensors the update reads besides the sequences: old_log_probs, advantages, and ref_log_probs when use_kl_loss.
struct PolicyUpdateInputs {
  at::Tensor old_log_probs;      // [N, R]
  at::Tensor ref_log_probs;      // [N, R] or undefined
  at::Tensor advantages;         // [N, R]
  at::Tensor rollout_log_probs;  // [N, R]; needed when tis_imp_ratio_cap > 0 or rollout_corr_metrics
  // Set when the old log-prob pass left out the first mini-batch (FirstMiniBatchRows): its rows' old log-probs are
  // the update's own log-probs from its first forward over them (before any optimizer step), detached, and are
  // written into old_log_probs (in place) for later epochs and for the caller.
  bool first_mini_batch_deferred = false;
};

// The rows of an update's first mini-batch (its first epoch's), in the order UpdatePolicy takes them: the first
// mini_batch_size of a permutation of N from a CPU generator seeded with `seed` when shuffling, else 0, 1, ...
at::Tensor FirstMiniBatchRows(int64_t N, int64_t mini_batch_size, bool shuffle, uint64_t seed);

// Runs the update and returns verl's actor/* metrics. Losses are normalised over each mini-batch (not per
// micro-batch), so the update does not depend on the micro-batch size; actor/pg_loss, actor/kl_loss and
// actor/entropy are mini-batch values, clip fractions micro-batch means, all averaged over mini-batches and epochs;
// perf/actor_micro_batches is the number of forward/backward passes per mini-batch on this rank, and
// perf/actor_recomputed_layers the decoder layers each recomputes in backward (activation checkpointing).
absl::StatusOr<std::map<std::string, double>> UpdatePolicy(DecoderModel& model, AdamW& optimizer,
                                                           const SequenceBatch& batch, const PolicyUpdateInputs& inputs,
                                                           const PolicyUpdateOptions& options);

}  // namespace verl

#endif  // VERL_WORKER_TRAIN_PPO_ACTOR_H_

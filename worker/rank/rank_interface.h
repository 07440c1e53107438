#ifndef VERL_WORKER_RANK_RANK_INTERFACE_H_
#define VERL_WORKER_RANK_RANK_INTERFACE_H_

// The torch-free face of a rank: one device (a CPU slot here) with the roles placed on it and a batch store keyed by
// step id. worker/service translates protobuf requests into these plain structs and calls a RankInterface; the
// implementation (worker/rank/rank.cc) lives behind the LibTorch wall.
//
// Calls are made from one thread at a time (the rank's executor). Every call returns a Status instead of throwing;
// errors carry the rank, role and stage. Calls that carry a step id are idempotent: repeating one returns the stored
// result without redoing the work (a retried RPC never updates the actor twice).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"
#include "worker/rank/host_tensor.h"
#include "worker/train/lr_schedule.h"

namespace verl {

using Metrics = std::map<std::string, double>;

struct RankActorSettings {
  double lr = 1e-6;
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  LrSchedule lr_schedule;  // warm-up, then constant or cosine (verl's lr_scheduler_type)
  double grad_clip = 1.0;
  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double clip_ratio_c = 3.0;
  std::string loss_agg_mode = "token-mean";
  double loss_scale_factor = 0;  // seq-mean-token-sum-norm's divisor; 0: the response width
  double entropy_coeff = 0.0;
  bool use_kl_loss = false;
  double kl_loss_coef = 0.001;
  std::string kl_loss_type = "low_var_kl";
  int64_t ppo_mini_batch_size = 1;           // prompts per optimizer step
  int64_t ppo_micro_batch_size_per_gpu = 1;  // sequences per forward/backward
  int64_t ppo_epochs = 1;
  bool shuffle = false;
  int64_t log_prob_micro_batch_size_per_gpu = 8;      // old log-probs (actor)
  int64_t ref_log_prob_micro_batch_size_per_gpu = 8;  // ref log-probs
  // Token budgets per pass (verl's use_dynamic_bsz); 0: the fixed micro-batch sizes above.
  int64_t ppo_max_token_len = 0;
  int64_t log_prob_max_token_len = 0;
  int64_t ref_log_prob_max_token_len = 0;
  bool gradient_checkpointing = false;  // the actor's layers recomputed in backward
  int64_t recompute_num_layers = -1;    // with it, only the first this many (< 0: all)
  bool recompute_keep_projections = true;  // a recomputed layer keeps its projections' outputs
  bool remove_padding = false;          // actor and ref passes packed without padding
  bool prefix_grouper = false;          // actor and ref passes packed, a prompt's rows sharing its run
  // actor.policy_loss.* and rollout correction
  std::string loss_mode = "vanilla";
  double clip_cov_ratio = 0.0002;
  double clip_cov_lb = 1.0;
  double clip_cov_ub = 5.0;
  double kl_cov_ratio = 0.0002;
  double ppo_kl_coef = 0.1;
  double tau_pos = 1.0;  // sapo
  double tau_neg = 1.05;
  double tis_imp_ratio_cap = -1;
  double reinforce_is_threshold = -1;  // loss_mode "reinforce" (bypass mode): its IS weights' cap; <= 0: none
  bool rollout_corr_metrics = false;   // the update's rollout_corr/* figures (PolicyUpdateOptions)
  // In a data-parallel group: keep only this rank's share of the AdamW moments (ZeRO-1); see SetCommunicator.
  bool shard_optimizer_state = true;
  // In a data-parallel group: shard the actor's and the ref's parameters too (ZeRO-3, worker/comm/param_sharding.h).
  bool shard_parameters = false;
  bool optimizer_offload = false;  // AdamW state in host memory (GPU ranks)
  bool ref_param_offload = false;  // the ref's weights in host memory between its passes (GPU ranks)
  // With shard_parameters: the rollout gathers one layer at a time per decoding step, not the whole actor.
  bool rollout_gather_layer_by_layer = false;
  // The rollout engine (worker/rollout/generator.h): sequences decoding at once, padded prompt tokens per prefill, and
  // on a GPU the share of the device's memory the rollout may fill (what is allocated already plus the KV cache).
  int32_t rollout_max_num_seqs = 1024;
  int64_t rollout_max_num_batched_tokens = 8192;
  double rollout_gpu_memory_utilization = 0.5;
  bool rollout_enforce_eager = false;  // decode without CUDA graphs
  bool rollout_share_prompts = true;   // PromptSharing::kAuto; false: kOff (rollout.enable_prefix_caching)
  bool rollout_chunked_prefill = true;  // SamplingOptions::chunked_prefill (rollout.enable_chunked_prefill)
};

struct RankCriticSettings {
  std::string model_path;
  double lr = 1e-5;
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  LrSchedule lr_schedule;  // warm-up, then constant or cosine (verl's lr_scheduler_type)
  double grad_clip = 1.0;
  double cliprange_value = 0.5;
  std::string loss_agg_mode = "token-mean";
  int64_t ppo_mini_batch_size = 1;           // prompts per optimizer step
  int64_t ppo_micro_batch_size_per_gpu = 1;  // sequences per forward/backward
  int64_t forward_micro_batch_size_per_gpu = 8;
  int64_t ppo_max_token_len = 0;      // > 0: passes by token budget (critic.use_dynamic_bsz)
  int64_t forward_max_token_len = 0;
  bool gradient_checkpointing = false;
  int64_t recompute_num_layers = -1;  // with it, only the first this many layers (< 0: all)
  bool recompute_keep_projections = true;  // a recomputed layer keeps its projections' outputs
  bool remove_padding = false;  // critic passes packed without padding
  int64_t ppo_epochs = 1;
  bool shuffle = false;
  bool shard_optimizer_state = true;
  bool optimizer_offload = false;
};

struct AdvantageSettings {
  std::string estimator = "grpo";
  bool norm_adv_by_std_in_grpo = true;
  double gamma = 1.0;
  double lam = 1.0;
  bool use_kl_in_reward = false;
  double kl_coef = 0.0;
  std::string kl_penalty = "kl";
};

struct RankConfig {
  std::vector<std::string> roles;  // "actor", "rollout", "ref", "critic"
  std::string model_path;
  RankActorSettings actor;
  RankCriticSettings critic;  // used when the "critic" role is placed here
  int32_t num_threads = 0;    // intra-op threads; 0 = leave LibTorch's default
  uint64_t seed = 0;
  std::string dtype = "float32";
  std::string device = "cpu";  // "cpu" or "cuda:N" (N = the worker's local rank)
  int32_t world_size = 0;      // ranks in the job; 1: drop the communicator of an earlier job; 0: unknown
};

struct PromptInput {
  std::vector<int32_t> token_ids;
  std::string uid;
  std::string data_source;
  std::string ground_truth;
  std::string extra_info_json;
  // The prompt's position in the step's global batch (keys its sampling streams); -1: its position in this request.
  int64_t sample_index = -1;
};

struct SamplingSettings {
  double temperature = 1.0;
  int32_t top_k = -1;
  double top_p = 1.0;
  bool do_sample = true;
  int32_t n = 1;
  int32_t max_new_tokens = 16;
  std::vector<int32_t> eos_token_ids;
  bool ignore_eos = false;  // sample past EOS tokens to max_new_tokens (vLLM's ignore_eos)
  int32_t pad_token_id = 0;
  uint64_t seed = 0;
};

struct LoadModelOutput {
  int64_t num_parameters = 0;
  int32_t vocab_size = 0;
};

struct GenerateOutput {
  HostTensor responses;  // int32 [prompts * n, max_new_tokens]
  std::vector<int32_t> response_lengths;
  std::vector<int32_t> prompt_lengths;
  Metrics metrics;
};

// The rank's accelerator memory as the caching allocator sees it (bytes). Zero everywhere for a CPU rank.
struct DeviceMemory {
  bool on_gpu = false;
  int64_t allocated = 0;        // held by live tensors now
  int64_t reserved = 0;         // held by the allocator (allocated + cached)
  int64_t peak_allocated = 0;   // the most `allocated` has been since the rank started
  int64_t peak_reserved = 0;
  int64_t phase_peak_allocated = 0;  // the most `allocated` has been since the current phase began (Generate, update)
  int64_t total = 0;                 // the device's memory
};

struct ScoreOutput {
  std::vector<double> scores;
  std::vector<std::string> response_texts;
};

// Split placement: how a step's rows move from the rollout ranks to the training ranks (TransferBatch). Ranks are
// transfer-group ranks.
struct TransferPlan {
  // Sending side: per destination (ascending), the local prompts (indices into the Generate call's prompts,
  // ascending) whose rows (all n samples of each) go there.
  std::vector<std::pair<int, std::vector<int64_t>>> sends;
  // Receiving side: this rank's prompts in order and, for each, the source rank; a source sends the rows of its
  // prompts in this order. Empty when the rank receives nothing.
  std::vector<PromptInput> prompts;
  std::vector<int> sources;
  int32_t n = 1;
  int32_t pad_token_id = 0;
};

class RankInterface {
 public:
  virtual ~RankInterface() = default;

  // Also resets the rank: stored batches and update counts of an earlier configuration are dropped (models and
  // optimizers are rebuilt by LoadModel). Called again on a surviving rank when the controller sets a job up anew
  // after another worker failed.
  virtual absl::Status Configure(const RankConfig& config) = 0;
  // Joins a data-parallel group: from now on the step calls that need batch-wide numbers (advantage whitening and
  // statistics, the loss normalisers, gradients, log-prob metrics) make collective calls on `comm`, each with
  // `timeout`; every rank of the group must then receive the same calls in the same order. Generate and Score stay
  // local (ranks may hold different numbers of prompts, or none, in validation). Without a communicator the rank is a
  // group of one. SaveCheckpoint writes only on group rank 0 (parameters and optimizer state are replicated);
  // LoadCheckpoint reads on every rank.
  virtual absl::Status SetCommunicator(std::unique_ptr<Communicator> comm, absl::Duration timeout) = 0;
  // Aborts the group's communicator: peers' pending and later collectives fail naming this rank, and this rank's
  // later step calls fail until a new SetCommunicator. Called on the rank's thread, after a failed call. No-op
  // without a group.
  virtual void AbortCommunicator() = 0;
  // Split placement (roles on different ranks): the group over every rank of the job, training ranks first, that
  // moves weights (SyncWeights) and batches (TransferBatch) between roles. Formed (before Configure) for every job
  // with split placement, replacing an earlier job's.
  virtual absl::Status SetTransferCommunicator(std::unique_ptr<Communicator> comm, absl::Duration timeout) = 0;
  // Every rank of the transfer group calls this: transfer rank 0 (the training ranks' group rank 0) sends the actor's
  // parameters, in order, in buckets of at most `bucket_bytes`, and the rollout-only ranks copy them into their
  // models. Training ranks with sharded parameters gather them first (a collective of their group).
  virtual absl::StatusOr<Metrics> SyncWeights(int64_t bucket_bytes) = 0;
  // Sends and receives step_id's rows as `plan` says; a receiving rank then holds the step as if it had generated
  // and scored it (responses, masks, rollout log-probs, token rewards, ReMax baseline scores).
  virtual absl::StatusOr<Metrics> TransferBatch(const std::string& step_id, const TransferPlan& plan) = 0;
  // Split placement with the critic on ranks of its own: one column of step_id ("values": the critic's values,
  // "returns": the advantage's returns) sent to, or received from, the transfer rank `peer`, which holds the same
  // rows in the same order.
  virtual absl::StatusOr<Metrics> TransferColumn(const std::string& step_id, const std::string& column, int peer,
                                                 bool send) = 0;
  virtual absl::StatusOr<LoadModelOutput> LoadModel() = 0;
  // With greedy_baseline (ReMax) one greedy response per prompt is also generated and later scored as the baseline.
  virtual absl::StatusOr<GenerateOutput> Generate(const std::string& step_id, const std::vector<PromptInput>& prompts,
                                                  const SamplingSettings& sampling, bool greedy_baseline) = 0;
  virtual absl::StatusOr<ScoreOutput> Score(const std::string& step_id) = 0;
  // role "actor" stores old_log_probs, "ref" stores ref_log_probs. With pass.defer_first_mini_batch (actor only) the
  // rows of the update's first mini-batch (in the first epoch's order that pass.update_seed gives) are left to the
  // update's own forward: the policy has not changed when it reaches them, so their old log-probs are its log-probs.
  // With pass.from_rollout (actor only; verl's rollout_correction.bypass_mode) the old log-probs are the rollout's,
  // with no forward and no metrics.
  struct LogProbPass {
    bool defer_first_mini_batch = false;
    uint64_t update_seed = 0;
    bool from_rollout = false;
  };
  virtual absl::StatusOr<Metrics> ComputeLogProbs(const std::string& step_id, const std::string& role,
                                                  double temperature, const LogProbPass& pass) = 0;
  absl::StatusOr<Metrics> ComputeLogProbs(const std::string& step_id, const std::string& role, double temperature) {
    return ComputeLogProbs(step_id, role, temperature, LogProbPass{});
  }
  // The critic's values of the stored responses (role "critic").
  virtual absl::StatusOr<Metrics> ComputeValues(const std::string& step_id) = 0;
  // Token rewards (scores, minus the KL penalty when in-reward), then advantages and returns.
  virtual absl::StatusOr<Metrics> ComputeAdvantage(const std::string& step_id, const AdvantageSettings& settings) = 0;
  virtual absl::StatusOr<Metrics> UpdateCritic(const std::string& step_id, uint64_t seed) = 0;
  virtual absl::StatusOr<Metrics> UpdateActor(const std::string& step_id, double temperature, uint64_t seed) = 0;
  virtual absl::Status ReleaseBatch(const std::string& step_id) = 0;
  // Writes <dir>/actor/... (and <dir>/actor/huggingface when hf_export), and <dir>/critic/... with a critic.
  virtual absl::Status SaveCheckpoint(const std::string& dir, int64_t global_step, bool hf_export) = 0;
  virtual absl::Status LoadCheckpoint(const std::string& dir, int64_t global_step) = 0;
  // Another rank of the group failed: aborts this rank's communicator (Communicator::OnPeerAborted) so that a
  // collective blocked on it returns. Safe from any thread, while the rank's thread is in a call. No-op without one.
  virtual void OnPeerAborted(int failed_global_rank) = 0;
  // Cheap; call on the rank's own thread (it reads the allocator of the rank's device).
  virtual DeviceMemory Memory() const = 0;
};

// A rank on the CPU. Defined in worker/rank/rank.cc (behind the LibTorch wall).
std::unique_ptr<RankInterface> CreateCpuRank(int32_t rank_id);

}  // namespace verl

#endif  // VERL_WORKER_RANK_RANK_INTERFACE_H_

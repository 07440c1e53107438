#ifndef VERL_COMMON_CONFIG_JOB_CONFIG_H_
#define VERL_COMMON_CONFIG_JOB_CONFIG_H_

// The job configuration as plain structs, one per YAML section, with verl's key names.
//
// Field defaults here equal the schema defaults (config_schema.cc), so a default-constructed JobConfig is the
// configuration of an empty YAML file (before the required keys are set); the loader fills every field from the
// resolved tree anyway. Each field names its YAML key when the key differs from section + field name.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/config_tree.h"

namespace verl {

// data.*
struct DataConfig {
  std::vector<std::string> train_files;    // required; parquet or jsonl files, rows concatenated in order
  std::vector<std::string> val_files;      // empty disables validation
  std::string prompt_key = "prompt";
  int64_t max_prompt_length = 512;         // tokens
  int64_t max_response_length = 512;       // tokens
  int64_t train_batch_size = 1024;         // prompts per step
  std::optional<int64_t> val_batch_size;   // nullopt: the whole validation set
  bool shuffle = true;
  int64_t seed = 1;
  bool filter_overlong_prompts = false;
  std::string truncation = "error";        // error | left | right
  bool operator==(const DataConfig&) const = default;
};

// actor_rollout_ref.model.*
struct ModelConfig {
  std::string path;                        // required; local HF directory
  std::string dtype = "float32";           // float32 | bfloat16 (ours)
  bool enable_gradient_checkpointing = true;
  std::optional<int64_t> recompute_num_layers;  // checkpoint only the first N layers (ours); null: all
  bool recompute_keep_projections = true;       // a recomputed layer keeps its projections' outputs (ours)
  bool use_remove_padding = false;
  bool operator==(const ModelConfig&) const = default;
};

// actor_rollout_ref.actor.optim.*
struct OptimConfig {
  double lr = 1e-6;
  double weight_decay = 0.01;
  std::vector<double> betas = {0.9, 0.999};  // exactly two
  double eps = 1e-8;
  int64_t lr_warmup_steps = -1;            // -1: use lr_warmup_steps_ratio
  double lr_warmup_steps_ratio = 0.0;      // fraction of total training steps
  std::string lr_scheduler_type = "constant";  // constant | cosine (warmup_style, when set, is copied here)
  std::string warmup_style;                // verl's deprecated name of lr_scheduler_type; "" when not set
  double min_lr_ratio = 0.0;               // cosine's floor, a fraction of lr
  double num_cycles = 0.5;                 // cosine's waves
  bool operator==(const OptimConfig&) const = default;
};

// actor_rollout_ref.actor.*
struct ActorConfig {
  OptimConfig optim;
  int64_t ppo_mini_batch_size = 256;       // prompts per optimizer step (x rollout.n samples)
  std::optional<int64_t> ppo_micro_batch_size_per_gpu;  // samples per pass per rank; nullopt: whole mini-batch
  bool use_dynamic_bsz = false;            // passes cut by ppo_max_token_len_per_gpu instead
  int64_t ppo_max_token_len_per_gpu = 16384;
  int64_t ppo_epochs = 1;
  bool shuffle = false;
  bool use_prefix_grouper = false;  // actor and ref passes packed, a prompt's samples sharing its run
  bool defer_first_mini_batch_log_probs = true;  // ours: the old log-prob pass leaves those rows to the update
  double clip_ratio = 0.2;
  std::optional<double> clip_ratio_low;    // nullopt: clip_ratio (see ClipRatioLow())
  std::optional<double> clip_ratio_high;   // nullopt: clip_ratio (see ClipRatioHigh())
  double clip_ratio_c = 3.0;               // dual-clip bound, > 1
  std::string loss_agg_mode = "token-mean";
  std::optional<int64_t> loss_scale_factor;  // seq-mean-token-sum-norm's divisor; nullopt: max_response_length
  double entropy_coeff = 0.0;
  bool use_kl_loss = false;
  double kl_loss_coef = 0.001;
  std::string kl_loss_type = "low_var_kl";
  double grad_clip = 1.0;                  // max global gradient norm
  // actor_rollout_ref.actor.policy_loss.*
  struct PolicyLoss {
    std::string loss_mode = "vanilla";     // vanilla | gspo | gpg | cispo | clip_cov | kl_cov | sapo | geo_mean
    double clip_cov_ratio = 0.0002;
    double clip_cov_lb = 1.0;
    double clip_cov_ub = 5.0;
    double kl_cov_ratio = 0.0002;
    double ppo_kl_coef = 0.1;
    bool operator==(const PolicyLoss&) const = default;
  };
  PolicyLoss policy_loss;
  double tau_pos = 1.0;                    // actor.tau_pos / tau_neg: sapo's gate temperatures
  double tau_neg = 1.05;
  double tis_imp_ratio_cap = -1.0;         // truncated importance sampling cap; <= 0 disables
  bool shard_optimizer_state = true;       // ZeRO-1 over the data-parallel ranks
  bool shard_parameters = false;           // ZeRO-3 over the data-parallel ranks
  bool optimizer_offload = false;          // fsdp_config.optimizer_offload
  bool param_offload = false;              // fsdp_config.param_offload: only false is valid

  double ClipRatioLow() const { return clip_ratio_low.value_or(clip_ratio); }
  double ClipRatioHigh() const { return clip_ratio_high.value_or(clip_ratio); }
  bool operator==(const ActorConfig&) const = default;
};

// actor_rollout_ref.rollout.*
struct RolloutConfig {
  // actor_rollout_ref.rollout.val_kwargs.*: sampling used for validation.
  struct ValKwargs {
    double temperature = 0.0;
    int64_t top_k = -1;
    double top_p = 1.0;
    bool do_sample = false;
    int64_t n = 1;
    bool operator==(const ValKwargs&) const = default;
  };

  int64_t n = 1;                           // responses per prompt
  double temperature = 1.0;
  int64_t top_k = -1;                      // -1 or 0: disabled
  double top_p = 1.0;                      // (0, 1]
  bool do_sample = true;
  std::optional<int64_t> log_prob_micro_batch_size_per_gpu;  // nullopt: whole batch of the rank
  bool log_prob_use_dynamic_bsz = false;
  int64_t log_prob_max_token_len_per_gpu = 16384;
  int64_t update_weights_bucket_megabytes = 512;            // split placement: weight sync buckets
  bool enforce_eager = false;                               // GPU decoding without CUDA graphs
  bool ignore_eos = false;                                  // sample past EOS tokens to the response length
  bool enable_prefix_caching = true;                        // a prompt's samples share its KV cache slot (GPU)
  bool calculate_log_probs = false;  // verl's switch; the rollout here always returns its log-probs
  bool gather_layer_by_layer = false;                      // ZeRO-3 rollout: per-layer gathers, not the whole actor
  int64_t max_num_seqs = 1024;                             // continuous batching: sequences decoding at once
  int64_t max_num_batched_tokens = 8192;                   // padded prompt tokens per prefill pass
  bool enable_chunked_prefill = true;                      // longer prompts prefilled in parts of that many tokens
  double gpu_memory_utilization = 0.5;                     // GPU ranks: device memory share during the rollout
  ValKwargs val_kwargs;
  bool operator==(const RolloutConfig&) const = default;
};

// actor_rollout_ref.ref.*
struct RefConfig {
  std::optional<int64_t> log_prob_micro_batch_size_per_gpu;  // nullopt: whole batch of the rank
  bool log_prob_use_dynamic_bsz = false;
  int64_t log_prob_max_token_len_per_gpu = 16384;
  bool param_offload = false;  // fsdp_config.param_offload: weights in host memory between the ref's passes
  bool operator==(const RefConfig&) const = default;
};

// algorithm.*
struct AlgorithmConfig {
  std::string adv_estimator = "gae";       // gae | grpo | reinforce_plus_plus | rloo | remax | grpo_passk | ...
  bool norm_adv_by_std_in_grpo = true;
  double gamma = 1.0;
  double lam = 1.0;
  bool use_kl_in_reward = false;
  std::string kl_penalty = "kl";           // estimator of the in-reward KL
  // algorithm.kl_ctrl.*
  struct KlCtrl {
    std::string type = "fixed";            // fixed | adaptive
    double kl_coef = 0.001;
    int64_t horizon = 10000;
    double target_kl = 0.1;
    bool operator==(const KlCtrl&) const = default;
  };
  KlCtrl kl_ctrl;
  // algorithm.rollout_correction.*: token-level IS weights and bypass mode (the others must stay at verl's defaults)
  struct RolloutCorrection {
    std::string rollout_is;  // "" (null) | token
    double rollout_is_threshold = 2.0;
    bool rollout_is_batch_normalize = false;
    std::string rollout_rs;            // only "" (null)
    std::string rollout_rs_threshold;  // no effect without rollout_rs
    bool bypass_mode = false;            // the rollout's log-probs as the old ones
    std::string loss_type = "ppo_clip";  // bypass_mode's loss: ppo_clip | reinforce
    bool operator==(const RolloutCorrection&) const = default;
  };
  RolloutCorrection rollout_correction;
  bool operator==(const AlgorithmConfig&) const = default;
};

// critic.* (used when algorithm.adv_estimator=gae)
struct CriticConfig {
  std::string model_path;                  // critic.model.path; defaults to actor_rollout_ref.model.path
  bool enable_gradient_checkpointing = true;  // critic.model.enable_gradient_checkpointing
  std::optional<int64_t> recompute_num_layers;  // critic.model.recompute_num_layers (ours)
  bool recompute_keep_projections = true;       // critic.model.recompute_keep_projections (ours)
  bool use_remove_padding = false;            // critic.model.use_remove_padding
  OptimConfig optim{1e-5, 0.01, {0.9, 0.999}, 1e-8, -1, 0.0};
  int64_t ppo_mini_batch_size = 256;       // prompts per optimizer step (x rollout.n samples)
  std::optional<int64_t> ppo_micro_batch_size_per_gpu;
  std::optional<int64_t> forward_micro_batch_size_per_gpu;
  bool use_dynamic_bsz = false;
  int64_t ppo_max_token_len_per_gpu = 32768;
  int64_t forward_max_token_len_per_gpu = 32768;
  int64_t ppo_epochs = 1;
  bool shard_optimizer_state = true;
  bool optimizer_offload = false;  // model.fsdp_config.optimizer_offload
  bool param_offload = false;      // model.fsdp_config.param_offload: only false is valid
  bool shuffle = false;
  double grad_clip = 1.0;
  double cliprange_value = 0.5;
  std::string loss_agg_mode = "token-mean";
  bool operator==(const CriticConfig&) const = default;
};

// trainer.*
struct TrainerConfig {
  std::string project_name = "verl_examples";
  std::string experiment_name = "gsm8k";
  std::vector<std::string> logger = {"console", "jsonl"};  // console | jsonl | tensorboard | prometheus
  std::string prometheus_listen = "127.0.0.1:9400";
  int64_t nnodes = 1;
  int64_t n_gpus_per_node = 1;             // ranks per node (GPUs or CPU slots)
  std::string device = "cpu";              // cpu | cuda
  int64_t total_epochs = 30;
  std::optional<int64_t> total_training_steps;  // nullopt: from total_epochs and dataset size
  int64_t save_freq = -1;                  // -1: no periodic checkpoints
  int64_t test_freq = -1;                  // -1: disabled
  bool val_before_train = true;
  int64_t log_val_generations = 0;         // validation samples logged as TensorBoard text
  int64_t critic_warmup = 0;               // steps that update only the critic
  std::string default_local_dir;           // resolved from checkpoints/${project_name}/${experiment_name}
  std::optional<int64_t> max_actor_ckpt_to_keep;   // nullopt: keep all
  std::optional<int64_t> max_critic_ckpt_to_keep;  // nullopt: keep all
  std::string resume_mode = "auto";        // auto | disable | resume_path
  std::string resume_from_path;
  std::string rollout_data_dir;            // "": do not dump rollouts
  std::string log_dir;                     // resolved from outputs/${project_name}/${experiment_name} (ours)
  int64_t seed = 1;                        // ours

  int64_t WorldSize() const { return nnodes * n_gpus_per_node; }
  bool operator==(const TrainerConfig&) const = default;
};

// cluster.* (ours)
struct ClusterConfig {
  std::vector<std::string> worker_addresses;  // empty: start local workers; else one per node
  double comm_timeout_s = 600.0;              // every collective between ranks
  std::string comm_backend = "auto";          // auto (NCCL when every rank can) | host
  std::string worker_binary;               // "": verl-worker next to the controller executable
  int64_t num_threads_per_rank = 0;        // 0: all cores
  double rpc_timeout_s = 600.0;            // seconds
  double worker_start_timeout_s = 60.0;    // seconds
  int64_t max_worker_restarts = 3;         // recoveries from failed workers, from the last checkpoint
  double worker_replacement_timeout_s = 600.0;  // wait for a listed worker's replacement at its address
  double heartbeat_interval_s = 2.0;       // seconds between Health checks of every worker
  double heartbeat_timeout_s = 10.0;       // a Health check unanswered this long fails the worker
  bool operator==(const ClusterConfig&) const = default;
};

// actor_rollout_ref.*
struct ActorRolloutRefConfig {
  ModelConfig model;
  ActorConfig actor;
  RolloutConfig rollout;
  RefConfig ref;
  bool operator==(const ActorRolloutRefConfig&) const = default;
};

// resource_pool.*: which ranks hold which roles.
struct ResourcePoolConfig {
  int64_t rollout_ranks = 0;  // > 0: split placement, the last this many ranks only generate
  int64_t critic_ranks = 0;   // > 0: the critic on as many ranks of its own, after the actor's
  bool operator==(const ResourcePoolConfig&) const = default;
};

struct JobConfig {
  // verl's rule: a critic is used exactly when the advantage estimator is GAE.
  bool UseCritic() const { return algorithm.adv_estimator == "gae"; }
  // The ranks that hold the actor (and ref, and the critic unless it has its own) and train: all of them unless the
  // rollout or the critic has ranks of its own.
  int64_t TrainingRanks() const {
    return trainer.WorldSize() - resource_pool.rollout_ranks - resource_pool.critic_ranks;
  }

  DataConfig data;
  ActorRolloutRefConfig actor_rollout_ref;
  AlgorithmConfig algorithm;
  CriticConfig critic;
  TrainerConfig trainer;
  ClusterConfig cluster;
  ResourcePoolConfig resource_pool;
  bool operator==(const JobConfig&) const = default;
};

// Fills a JobConfig from a resolved tree (every schema key present with its schema type). Returns InvalidArgument
// naming the key when a value has the wrong type, Internal when a schema key has no struct field (a programming error
// that the tests catch). Does not validate combinations: see ValidateJobConfig.
absl::StatusOr<JobConfig> JobConfigFromTree(const ConfigTree& tree);

// Checks the rules that span keys (docs/config.md, "Validation"): required keys set, batch sizes that divide,
// GRPO with n > 1, sampling ranges, frequencies. Returns InvalidArgument listing every violated rule, one per line,
// each naming its keys and values. Does not touch the filesystem.
absl::Status ValidateJobConfig(const JobConfig& config);

}  // namespace verl

#endif  // VERL_COMMON_CONFIG_JOB_CONFIG_H_

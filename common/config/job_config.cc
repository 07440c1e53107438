#include "common/config/job_config.h"

#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/config_schema.h"

namespace verl {
namespace {

// Reads typed values out of a resolved tree and remembers which keys it read, so that a schema key without a struct
// field is reported instead of silently ignored.
class TreeReader {
 public:
  explicit TreeReader(const ConfigTree& tree) : tree_(tree) {}

  void Read(const char* key, bool* out) { ReadAs(key, out); }
  void Read(const char* key, int64_t* out) {
    ReadAs(key, out);
    CheckRange(key, *out);
  }
  void Read(const char* key, std::string* out) { ReadAs(key, out); }
  void Read(const char* key, std::vector<std::string>* out) { ReadAs(key, out); }
  void Read(const char* key, std::vector<double>* out) { ReadAs(key, out); }
  void Read(const char* key, double* out) {
    const ConfigValue* v = Find(key);
    if (v == nullptr) return;
    if (const auto* i = std::get_if<int64_t>(v)) {
      *out = static_cast<double>(*i);
    } else {
      ReadAs(key, out);
    }
  }
  void Read(const char* key, std::optional<int64_t>* out) {
    const ConfigValue* v = Find(key);
    if (v == nullptr) return;
    if (std::holds_alternative<std::monostate>(*v)) {
      out->reset();
    } else if (const auto* i = std::get_if<int64_t>(v)) {
      *out = *i;
      CheckRange(key, *i);
    } else {
      TypeError(key);
    }
  }
  void Read(const char* key, std::optional<double>* out) {
    const ConfigValue* v = Find(key);
    if (v == nullptr) return;
    if (std::holds_alternative<std::monostate>(*v)) {
      out->reset();
    } else if (const auto* d = std::get_if<double>(v)) {
      *out = *d;
    } else if (const auto* i = std::get_if<int64_t>(v)) {
      *out = static_cast<double>(*i);
    } else {
      TypeError(key);
    }
  }

  absl::Status Finish() const {
    if (!errors_.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
    std::vector<std::string> unread;
    for (const ConfigKeySpec& spec : ConfigSchema()) {
      if (read_.count(std::string(spec.key)) == 0) unread.emplace_back(spec.key);
    }
    if (!unread.empty()) {
      return absl::InternalError(
          absl::StrCat("config keys without a JobConfig field: ", absl::StrJoin(unread, ", ")));
    }
    return absl::OkStatus();
  }

 private:
  const ConfigValue* Find(const char* key) {
    read_.insert(key);
    auto it = tree_.find(key);
    if (it == tree_.end()) {
      errors_.push_back(absl::StrCat("config key '", key, "' is missing from the resolved configuration"));
      return nullptr;
    }
    return &it->second;
  }

  template <typename V>
  void ReadAs(const char* key, V* out) {
    const ConfigValue* v = Find(key);
    if (v == nullptr) return;
    if (const auto* typed = std::get_if<V>(v)) {
      *out = *typed;
    } else {
      TypeError(key);
    }
  }

  // The workers take counts, sizes and token budgets as 32-bit integers: a larger value would wrap on the way
  // (top_k 2^32 turning into 0, "off"). Seeds keep all 64 bits.
  void CheckRange(const char* key, int64_t v) {
    const std::string_view k(key);
    if (k == "data.seed" || k == "trainer.seed") return;
    if (v > std::numeric_limits<int32_t>::max() || v < std::numeric_limits<int32_t>::min()) {
      errors_.push_back(absl::StrCat(key, " is ", v, ", beyond the supported range [",
                                     std::numeric_limits<int32_t>::min(), ", ", std::numeric_limits<int32_t>::max(),
                                     "]"));
    }
  }

  void TypeError(const char* key) {
    const ConfigKeySpec* spec = FindConfigKey(key);
    const std::string_view type = spec ? ConfigTypeName(spec->type) : std::string_view("?");
    errors_.push_back(absl::StrCat(key, ": expected ", absl::string_view(type.data(), type.size()), ", got ",
                                   FormatConfigValue(tree_.at(key))));
  }

  const ConfigTree& tree_;
  std::set<std::string> read_;
  std::vector<std::string> errors_;
};

std::string Fmt(double v) { return FormatConfigValue(ConfigValue(v)); }

}  // namespace

absl::StatusOr<JobConfig> JobConfigFromTree(const ConfigTree& tree) {
  JobConfig c;
  TreeReader r(tree);

  DataConfig& d = c.data;
  r.Read("data.train_files", &d.train_files);
  r.Read("data.val_files", &d.val_files);
  r.Read("data.prompt_key", &d.prompt_key);
  r.Read("data.max_prompt_length", &d.max_prompt_length);
  r.Read("data.max_response_length", &d.max_response_length);
  r.Read("data.train_batch_size", &d.train_batch_size);
  r.Read("data.val_batch_size", &d.val_batch_size);
  r.Read("data.shuffle", &d.shuffle);
  r.Read("data.seed", &d.seed);
  r.Read("data.filter_overlong_prompts", &d.filter_overlong_prompts);
  r.Read("data.truncation", &d.truncation);

  ModelConfig& m = c.actor_rollout_ref.model;
  r.Read("actor_rollout_ref.model.path", &m.path);
  r.Read("actor_rollout_ref.model.dtype", &m.dtype);
  r.Read("actor_rollout_ref.model.enable_gradient_checkpointing", &m.enable_gradient_checkpointing);
  r.Read("actor_rollout_ref.model.recompute_num_layers", &m.recompute_num_layers);
  r.Read("actor_rollout_ref.model.recompute_keep_projections", &m.recompute_keep_projections);
  r.Read("actor_rollout_ref.model.use_remove_padding", &m.use_remove_padding);

  ActorConfig& a = c.actor_rollout_ref.actor;
  r.Read("actor_rollout_ref.actor.optim.lr", &a.optim.lr);
  r.Read("actor_rollout_ref.actor.optim.weight_decay", &a.optim.weight_decay);
  r.Read("actor_rollout_ref.actor.optim.betas", &a.optim.betas);
  r.Read("actor_rollout_ref.actor.optim.eps", &a.optim.eps);
  r.Read("actor_rollout_ref.actor.optim.lr_warmup_steps", &a.optim.lr_warmup_steps);
  r.Read("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", &a.optim.lr_warmup_steps_ratio);
  r.Read("actor_rollout_ref.actor.optim.lr_scheduler_type", &a.optim.lr_scheduler_type);
  r.Read("actor_rollout_ref.actor.optim.warmup_style", &a.optim.warmup_style);
  r.Read("actor_rollout_ref.actor.optim.min_lr_ratio", &a.optim.min_lr_ratio);
  r.Read("actor_rollout_ref.actor.optim.num_cycles", &a.optim.num_cycles);
  if (!a.optim.warmup_style.empty()) a.optim.lr_scheduler_type = a.optim.warmup_style;  // verl's rule
  r.Read("actor_rollout_ref.actor.ppo_mini_batch_size", &a.ppo_mini_batch_size);
  r.Read("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", &a.ppo_micro_batch_size_per_gpu);
  r.Read("actor_rollout_ref.actor.use_dynamic_bsz", &a.use_dynamic_bsz);
  r.Read("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", &a.ppo_max_token_len_per_gpu);
  r.Read("actor_rollout_ref.actor.ppo_epochs", &a.ppo_epochs);
  r.Read("actor_rollout_ref.actor.shuffle", &a.shuffle);
  r.Read("actor_rollout_ref.actor.use_prefix_grouper", &a.use_prefix_grouper);
  r.Read("actor_rollout_ref.actor.defer_first_mini_batch_log_probs", &a.defer_first_mini_batch_log_probs);
  r.Read("actor_rollout_ref.actor.clip_ratio", &a.clip_ratio);
  r.Read("actor_rollout_ref.actor.clip_ratio_low", &a.clip_ratio_low);
  r.Read("actor_rollout_ref.actor.clip_ratio_high", &a.clip_ratio_high);
  r.Read("actor_rollout_ref.actor.clip_ratio_c", &a.clip_ratio_c);
  r.Read("actor_rollout_ref.actor.loss_agg_mode", &a.loss_agg_mode);
  r.Read("actor_rollout_ref.actor.loss_scale_factor", &a.loss_scale_factor);
  r.Read("actor_rollout_ref.actor.entropy_coeff", &a.entropy_coeff);
  r.Read("actor_rollout_ref.actor.use_kl_loss", &a.use_kl_loss);
  r.Read("actor_rollout_ref.actor.kl_loss_coef", &a.kl_loss_coef);
  r.Read("actor_rollout_ref.actor.kl_loss_type", &a.kl_loss_type);
  r.Read("actor_rollout_ref.actor.grad_clip", &a.grad_clip);
  r.Read("actor_rollout_ref.actor.policy_loss.loss_mode", &a.policy_loss.loss_mode);
  r.Read("actor_rollout_ref.actor.policy_loss.clip_cov_ratio", &a.policy_loss.clip_cov_ratio);
  r.Read("actor_rollout_ref.actor.policy_loss.clip_cov_lb", &a.policy_loss.clip_cov_lb);
  r.Read("actor_rollout_ref.actor.policy_loss.clip_cov_ub", &a.policy_loss.clip_cov_ub);
  r.Read("actor_rollout_ref.actor.policy_loss.kl_cov_ratio", &a.policy_loss.kl_cov_ratio);
  r.Read("actor_rollout_ref.actor.policy_loss.ppo_kl_coef", &a.policy_loss.ppo_kl_coef);
  r.Read("actor_rollout_ref.actor.tau_pos", &a.tau_pos);
  r.Read("actor_rollout_ref.actor.tau_neg", &a.tau_neg);
  r.Read("actor_rollout_ref.actor.tis_imp_ratio_cap", &a.tis_imp_ratio_cap);
  r.Read("actor_rollout_ref.actor.shard_optimizer_state", &a.shard_optimizer_state);
  r.Read("actor_rollout_ref.actor.shard_parameters", &a.shard_parameters);
  r.Read("actor_rollout_ref.actor.fsdp_config.optimizer_offload", &a.optimizer_offload);
  r.Read("actor_rollout_ref.actor.fsdp_config.param_offload", &a.param_offload);

  RolloutConfig& ro = c.actor_rollout_ref.rollout;
  r.Read("actor_rollout_ref.rollout.n", &ro.n);
  r.Read("actor_rollout_ref.rollout.temperature", &ro.temperature);
  r.Read("actor_rollout_ref.rollout.top_k", &ro.top_k);
  r.Read("actor_rollout_ref.rollout.top_p", &ro.top_p);
  r.Read("actor_rollout_ref.rollout.do_sample", &ro.do_sample);
  r.Read("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", &ro.log_prob_micro_batch_size_per_gpu);
  r.Read("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", &ro.log_prob_use_dynamic_bsz);
  r.Read("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", &ro.log_prob_max_token_len_per_gpu);
  r.Read("actor_rollout_ref.rollout.update_weights_bucket_megabytes", &ro.update_weights_bucket_megabytes);
  r.Read("actor_rollout_ref.rollout.gather_layer_by_layer", &ro.gather_layer_by_layer);
  r.Read("actor_rollout_ref.rollout.enforce_eager", &ro.enforce_eager);
  r.Read("actor_rollout_ref.rollout.ignore_eos", &ro.ignore_eos);
  r.Read("actor_rollout_ref.rollout.enable_prefix_caching", &ro.enable_prefix_caching);
  r.Read("actor_rollout_ref.rollout.calculate_log_probs", &ro.calculate_log_probs);
  r.Read("actor_rollout_ref.rollout.max_num_seqs", &ro.max_num_seqs);
  r.Read("actor_rollout_ref.rollout.max_num_batched_tokens", &ro.max_num_batched_tokens);
  r.Read("actor_rollout_ref.rollout.enable_chunked_prefill", &ro.enable_chunked_prefill);
  r.Read("actor_rollout_ref.rollout.gpu_memory_utilization", &ro.gpu_memory_utilization);
  r.Read("resource_pool.rollout_ranks", &c.resource_pool.rollout_ranks);
  r.Read("resource_pool.critic_ranks", &c.resource_pool.critic_ranks);
  r.Read("actor_rollout_ref.rollout.val_kwargs.temperature", &ro.val_kwargs.temperature);
  r.Read("actor_rollout_ref.rollout.val_kwargs.top_k", &ro.val_kwargs.top_k);
  r.Read("actor_rollout_ref.rollout.val_kwargs.top_p", &ro.val_kwargs.top_p);
  r.Read("actor_rollout_ref.rollout.val_kwargs.do_sample", &ro.val_kwargs.do_sample);
  r.Read("actor_rollout_ref.rollout.val_kwargs.n", &ro.val_kwargs.n);

  r.Read("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
         &c.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu);
  r.Read("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", &c.actor_rollout_ref.ref.log_prob_use_dynamic_bsz);
  r.Read("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
         &c.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu);
  r.Read("actor_rollout_ref.ref.fsdp_config.param_offload", &c.actor_rollout_ref.ref.param_offload);

  AlgorithmConfig& al = c.algorithm;
  r.Read("algorithm.adv_estimator", &al.adv_estimator);
  r.Read("algorithm.norm_adv_by_std_in_grpo", &al.norm_adv_by_std_in_grpo);
  r.Read("algorithm.gamma", &al.gamma);
  r.Read("algorithm.lam", &al.lam);
  r.Read("algorithm.use_kl_in_reward", &al.use_kl_in_reward);
  r.Read("algorithm.kl_penalty", &al.kl_penalty);
  r.Read("algorithm.kl_ctrl.type", &al.kl_ctrl.type);
  r.Read("algorithm.kl_ctrl.kl_coef", &al.kl_ctrl.kl_coef);
  r.Read("algorithm.kl_ctrl.horizon", &al.kl_ctrl.horizon);
  r.Read("algorithm.kl_ctrl.target_kl", &al.kl_ctrl.target_kl);
  AlgorithmConfig::RolloutCorrection& rc = al.rollout_correction;
  r.Read("algorithm.rollout_correction.rollout_is", &rc.rollout_is);
  r.Read("algorithm.rollout_correction.rollout_is_threshold", &rc.rollout_is_threshold);
  r.Read("algorithm.rollout_correction.rollout_is_batch_normalize", &rc.rollout_is_batch_normalize);
  r.Read("algorithm.rollout_correction.rollout_rs", &rc.rollout_rs);
  r.Read("algorithm.rollout_correction.rollout_rs_threshold", &rc.rollout_rs_threshold);
  r.Read("algorithm.rollout_correction.bypass_mode", &rc.bypass_mode);
  r.Read("algorithm.rollout_correction.loss_type", &rc.loss_type);

  CriticConfig& cr = c.critic;
  r.Read("critic.model.path", &cr.model_path);
  r.Read("critic.model.enable_gradient_checkpointing", &cr.enable_gradient_checkpointing);
  r.Read("critic.model.recompute_num_layers", &cr.recompute_num_layers);
  r.Read("critic.model.recompute_keep_projections", &cr.recompute_keep_projections);
  r.Read("critic.model.use_remove_padding", &cr.use_remove_padding);
  r.Read("critic.optim.lr", &cr.optim.lr);
  r.Read("critic.optim.weight_decay", &cr.optim.weight_decay);
  r.Read("critic.optim.betas", &cr.optim.betas);
  r.Read("critic.optim.eps", &cr.optim.eps);
  r.Read("critic.optim.lr_warmup_steps", &cr.optim.lr_warmup_steps);
  r.Read("critic.optim.lr_warmup_steps_ratio", &cr.optim.lr_warmup_steps_ratio);
  r.Read("critic.optim.lr_scheduler_type", &cr.optim.lr_scheduler_type);
  r.Read("critic.optim.warmup_style", &cr.optim.warmup_style);
  r.Read("critic.optim.min_lr_ratio", &cr.optim.min_lr_ratio);
  r.Read("critic.optim.num_cycles", &cr.optim.num_cycles);
  if (!cr.optim.warmup_style.empty()) cr.optim.lr_scheduler_type = cr.optim.warmup_style;  // verl's rule
  r.Read("critic.ppo_mini_batch_size", &cr.ppo_mini_batch_size);
  r.Read("critic.ppo_micro_batch_size_per_gpu", &cr.ppo_micro_batch_size_per_gpu);
  r.Read("critic.forward_micro_batch_size_per_gpu", &cr.forward_micro_batch_size_per_gpu);
  r.Read("critic.use_dynamic_bsz", &cr.use_dynamic_bsz);
  r.Read("critic.ppo_max_token_len_per_gpu", &cr.ppo_max_token_len_per_gpu);
  r.Read("critic.forward_max_token_len_per_gpu", &cr.forward_max_token_len_per_gpu);
  r.Read("critic.ppo_epochs", &cr.ppo_epochs);
  r.Read("critic.shuffle", &cr.shuffle);
  r.Read("critic.shard_optimizer_state", &cr.shard_optimizer_state);
  r.Read("critic.model.fsdp_config.optimizer_offload", &cr.optimizer_offload);
  r.Read("critic.model.fsdp_config.param_offload", &cr.param_offload);
  r.Read("critic.grad_clip", &cr.grad_clip);
  r.Read("critic.cliprange_value", &cr.cliprange_value);
  r.Read("critic.loss_agg_mode", &cr.loss_agg_mode);

  TrainerConfig& t = c.trainer;
  r.Read("trainer.project_name", &t.project_name);
  r.Read("trainer.experiment_name", &t.experiment_name);
  r.Read("trainer.logger", &t.logger);
  r.Read("trainer.prometheus_listen", &t.prometheus_listen);
  r.Read("trainer.nnodes", &t.nnodes);
  r.Read("trainer.n_gpus_per_node", &t.n_gpus_per_node);
  r.Read("trainer.device", &t.device);
  r.Read("trainer.total_epochs", &t.total_epochs);
  r.Read("trainer.total_training_steps", &t.total_training_steps);
  r.Read("trainer.save_freq", &t.save_freq);
  r.Read("trainer.test_freq", &t.test_freq);
  r.Read("trainer.val_before_train", &t.val_before_train);
  r.Read("trainer.log_val_generations", &t.log_val_generations);
  r.Read("trainer.critic_warmup", &t.critic_warmup);
  r.Read("trainer.default_local_dir", &t.default_local_dir);
  r.Read("trainer.max_actor_ckpt_to_keep", &t.max_actor_ckpt_to_keep);
  r.Read("trainer.max_critic_ckpt_to_keep", &t.max_critic_ckpt_to_keep);
  r.Read("trainer.resume_mode", &t.resume_mode);
  r.Read("trainer.resume_from_path", &t.resume_from_path);
  r.Read("trainer.rollout_data_dir", &t.rollout_data_dir);
  r.Read("trainer.log_dir", &t.log_dir);
  r.Read("trainer.seed", &t.seed);

  ClusterConfig& cl = c.cluster;
  r.Read("cluster.worker_addresses", &cl.worker_addresses);
  r.Read("cluster.comm_timeout_s", &cl.comm_timeout_s);
  r.Read("cluster.comm_backend", &cl.comm_backend);
  r.Read("cluster.worker_binary", &cl.worker_binary);
  r.Read("cluster.num_threads_per_rank", &cl.num_threads_per_rank);
  r.Read("cluster.rpc_timeout_s", &cl.rpc_timeout_s);
  r.Read("cluster.worker_start_timeout_s", &cl.worker_start_timeout_s);
  r.Read("cluster.max_worker_restarts", &cl.max_worker_restarts);
  r.Read("cluster.worker_replacement_timeout_s", &cl.worker_replacement_timeout_s);
  r.Read("cluster.heartbeat_interval_s", &cl.heartbeat_interval_s);
  r.Read("cluster.heartbeat_timeout_s", &cl.heartbeat_timeout_s);

  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return c;
}

absl::Status ValidateJobConfig(const JobConfig& c) {
  std::vector<std::string> errors;
  auto check = [&errors](bool ok, std::string message) {
    if (!ok) errors.push_back(std::move(message));
  };
  auto check_schedule = [&check](const std::string& prefix, const OptimConfig& o) {
    check(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1,
          absl::StrCat(prefix, "min_lr_ratio must lie in [0, 1], got ", Fmt(o.min_lr_ratio)));
    check(o.num_cycles >= 0, absl::StrCat(prefix, "num_cycles must be >= 0, got ", Fmt(o.num_cycles)));
  };
  const DataConfig& d = c.data;
  const ActorConfig& a = c.actor_rollout_ref.actor;
  const RolloutConfig& ro = c.actor_rollout_ref.rollout;
  const TrainerConfig& t = c.trainer;

  // Required keys.
  check(!d.train_files.empty(),
        "data.train_files is required: set it in the YAML file or with data.train_files=PATH (or =[PATH, PATH])");
  for (const auto& [key, files] : {std::pair{"data.train_files", &d.train_files}, {"data.val_files", &d.val_files}}) {
    for (size_t i = 0; i < files->size(); ++i) {
      check(!(*files)[i].empty(), absl::StrCat(key, ": entry ", i + 1, " of ", files->size(), " is an empty path"));
    }
  }
  check(!c.actor_rollout_ref.model.path.empty(),
        "actor_rollout_ref.model.path is required: set it in the YAML file or with actor_rollout_ref.model.path=DIR");

  // Data.
  check(d.max_prompt_length > 0, absl::StrCat("data.max_prompt_length must be > 0, got ", d.max_prompt_length));
  check(d.max_response_length > 0, absl::StrCat("data.max_response_length must be > 0, got ", d.max_response_length));
  check(d.train_batch_size > 0, absl::StrCat("data.train_batch_size must be > 0, got ", d.train_batch_size));
  check(!d.val_batch_size || *d.val_batch_size > 0,
        absl::StrCat("data.val_batch_size must be > 0 or null, got ", d.val_batch_size.value_or(0)));

  // recompute_num_layers narrows activation checkpointing: it needs checkpointing on, and a sharded actor recomputes
  // every layer whatever it says (its layers are gathered again for backward).
  auto check_recompute = [&](const std::optional<int64_t>& layers, bool checkpointing, const std::string& model) {
    if (!layers) return;
    check(*layers >= 0, absl::StrCat(model, ".recompute_num_layers must be >= 0 or null, got ", *layers));
    check(checkpointing, absl::StrCat(model, ".recompute_num_layers is set but ", model,
                                      ".enable_gradient_checkpointing is false: no layer is recomputed; drop "
                                      "recompute_num_layers, or turn checkpointing on"));
  };
  const ModelConfig& mc = c.actor_rollout_ref.model;
  check_recompute(mc.recompute_num_layers, mc.enable_gradient_checkpointing, "actor_rollout_ref.model");
  check_recompute(c.critic.recompute_num_layers, c.critic.enable_gradient_checkpointing, "critic.model");
  check(!mc.recompute_num_layers || !a.shard_parameters,
        "actor_rollout_ref.model.recompute_num_layers does not apply with actor_rollout_ref.actor.shard_parameters=true: "
        "a sharded actor recomputes every layer in backward (its layers are gathered again); drop one of them");

  // verl's parameter offload of the actor and the critic has no counterpart here: refused rather than ignored
  // (false, verl's default, loads). The reference model's is offered (its weights in host memory between its passes).
  check(!a.param_offload,
        "actor_rollout_ref.actor.fsdp_config.param_offload=true is not available: the actor's parameters stay on its "
        "device; actor_rollout_ref.actor.fsdp_config.optimizer_offload=true moves the AdamW state (moments and float32 "
        "master copy: 12 bytes a parameter) to host memory, and actor_rollout_ref.actor.shard_parameters=true divides "
        "parameters, gradients and state over several ranks");
  check(!c.critic.param_offload,
        "critic.model.fsdp_config.param_offload=true is not available: the critic's parameters stay on its device; "
        "critic.model.fsdp_config.optimizer_offload=true moves its AdamW state to host memory");

  // Batch arithmetic, as verl checks it: mini-batches are counted in prompts, split over all ranks after expanding
  // by rollout.n, and each rank's share must be a whole number of micro-batches.
  check(ro.n >= 1, absl::StrCat("actor_rollout_ref.rollout.n must be >= 1, got ", ro.n));
  check(ro.val_kwargs.n >= 1, absl::StrCat("actor_rollout_ref.rollout.val_kwargs.n must be >= 1, got ", ro.val_kwargs.n));
  check(t.nnodes >= 1, absl::StrCat("trainer.nnodes must be >= 1, got ", t.nnodes));
  check(t.n_gpus_per_node >= 1, absl::StrCat("trainer.n_gpus_per_node must be >= 1, got ", t.n_gpus_per_node));
  // Placement: the rollout may have ranks of its own; the batch arithmetic below is over the training ranks.
  const int64_t rollout_ranks = c.resource_pool.rollout_ranks;
  const int64_t critic_ranks = c.resource_pool.critic_ranks;
  const bool split = rollout_ranks > 0 || critic_ranks > 0;
  check(rollout_ranks >= 0 && (t.WorldSize() < 1 || rollout_ranks < t.WorldSize()),
        absl::StrCat("resource_pool.rollout_ranks (", rollout_ranks, ") must be >= 0 and leave at least one of the ",
                     t.WorldSize(), " ranks (trainer.nnodes * trainer.n_gpus_per_node) to train"));
  if (critic_ranks != 0) {
    check(c.UseCritic(), absl::StrCat("resource_pool.critic_ranks (", critic_ranks,
                                      ") places a critic, but there is none: algorithm.adv_estimator is ",
                                      c.algorithm.adv_estimator, ", not gae"));
    check(critic_ranks > 0 && critic_ranks == t.WorldSize() - rollout_ranks - critic_ranks,
          absl::StrCat("resource_pool.critic_ranks (", critic_ranks, ") must equal the actor's ranks (",
                       t.WorldSize() - rollout_ranks - critic_ranks,
                       " = trainer.nnodes * trainer.n_gpus_per_node - resource_pool.rollout_ranks - "
                       "resource_pool.critic_ranks): each critic rank takes one actor rank's rows"));
  }
  check(ro.max_num_seqs > 0 && ro.max_num_seqs <= std::numeric_limits<int32_t>::max(),
        absl::StrCat("actor_rollout_ref.rollout.max_num_seqs must be > 0, got ", ro.max_num_seqs));
  check(ro.max_num_batched_tokens > 0,
        absl::StrCat("actor_rollout_ref.rollout.max_num_batched_tokens must be > 0, got ", ro.max_num_batched_tokens));
  check(ro.gpu_memory_utilization > 0 && ro.gpu_memory_utilization <= 1,
        absl::StrCat("actor_rollout_ref.rollout.gpu_memory_utilization must be in (0, 1], got ",
                     ro.gpu_memory_utilization));
  check(ro.update_weights_bucket_megabytes > 0,
        absl::StrCat("actor_rollout_ref.rollout.update_weights_bucket_megabytes must be > 0, got ",
                     ro.update_weights_bucket_megabytes));
  const int64_t train_world = std::max<int64_t>(1, split ? c.TrainingRanks() : t.WorldSize());
  const std::string ranks_of = split ? "the number of training ranks trainer.nnodes * trainer.n_gpus_per_node - "
                                       "resource_pool.rollout_ranks - resource_pool.critic_ranks ("
                                     : "the number of ranks trainer.nnodes * trainer.n_gpus_per_node (";
  // Whole prompts go to ranks (all rollout.n samples of a prompt on one rank, so group statistics stay local).
  if (d.train_batch_size > 0 && t.nnodes >= 1 && t.n_gpus_per_node >= 1 && d.train_batch_size % train_world != 0) {
    errors.push_back(absl::StrCat("data.train_batch_size (", d.train_batch_size, ") must be divisible by ", ranks_of,
                                  train_world, "): each rank gets whole prompts"));
  }
  const int64_t mini = a.ppo_mini_batch_size;
  if (mini <= 0) {
    errors.push_back(absl::StrCat("actor_rollout_ref.actor.ppo_mini_batch_size must be > 0, got ", mini));
  } else if (d.train_batch_size > 0) {
    if (mini > d.train_batch_size) {
      errors.push_back(absl::StrCat("actor_rollout_ref.actor.ppo_mini_batch_size (", mini,
                                    ") must be <= data.train_batch_size (", d.train_batch_size, ")"));
    } else if (d.train_batch_size % mini != 0) {
      errors.push_back(absl::StrCat("data.train_batch_size (", d.train_batch_size,
                                    ") must be divisible by actor_rollout_ref.actor.ppo_mini_batch_size (", mini,
                                    ")"));
    }
    if (ro.n >= 1 && t.nnodes >= 1 && t.n_gpus_per_node >= 1) {
      const int64_t world = train_world;
      const int64_t samples = mini * ro.n;
      if (samples % world != 0) {
        errors.push_back(absl::StrCat("actor_rollout_ref.actor.ppo_mini_batch_size * actor_rollout_ref.rollout.n (",
                                      mini, " * ", ro.n, " = ", samples, ") must be divisible by ", ranks_of, world,
                                      ")"));
      } else if (!a.use_dynamic_bsz && a.ppo_micro_batch_size_per_gpu && *a.ppo_micro_batch_size_per_gpu > 0 &&
                 (samples / world) % *a.ppo_micro_batch_size_per_gpu != 0) {
        errors.push_back(absl::StrCat(
            "actor_rollout_ref.actor.ppo_mini_batch_size * actor_rollout_ref.rollout.n",
            world > 1 ? " / ranks" : "", " (", samples / world,
            ") must be divisible by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (",
            *a.ppo_micro_batch_size_per_gpu, ")"));
      }
    }
  }
  auto check_micro = [&](const std::optional<int64_t>& v, const char* key) {
    check(!v || *v > 0, absl::StrCat(key, " must be > 0 or null, got ", v.value_or(0)));
  };
  check_micro(a.ppo_micro_batch_size_per_gpu, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu");
  check_micro(ro.log_prob_micro_batch_size_per_gpu, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu");
  check_micro(c.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu,
              "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu");
  check(a.ppo_epochs >= 1, absl::StrCat("actor_rollout_ref.actor.ppo_epochs must be >= 1, got ", a.ppo_epochs));
  // A token budget must hold the longest sequence a step can produce.
  const int64_t longest_seq = d.max_prompt_length + d.max_response_length;
  auto check_budget = [&](bool on, int64_t v, const char* key) {
    if (!on) return;
    check(v >= longest_seq, absl::StrCat(key, " (", v, ") must be at least data.max_prompt_length + ",
                                         "data.max_response_length (", d.max_prompt_length, " + ",
                                         d.max_response_length, " = ", longest_seq, "): a pass takes whole sequences"));
  };
  check_budget(a.use_dynamic_bsz, a.ppo_max_token_len_per_gpu, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu");
  check_budget(ro.log_prob_use_dynamic_bsz, ro.log_prob_max_token_len_per_gpu,
               "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu");
  check_budget(c.actor_rollout_ref.ref.log_prob_use_dynamic_bsz,
               c.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu,
               "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu");
  if (c.UseCritic()) {
    check_budget(c.critic.use_dynamic_bsz, c.critic.ppo_max_token_len_per_gpu, "critic.ppo_max_token_len_per_gpu");
    check_budget(c.critic.use_dynamic_bsz, c.critic.forward_max_token_len_per_gpu,
                 "critic.forward_max_token_len_per_gpu");
  }

  // Group-based estimators compare the responses of one prompt with each other.
  const std::string& est = c.algorithm.adv_estimator;
  if ((est == "grpo" || est == "grpo_passk" || est == "rloo" || est == "grpo_vectorized" ||
       est == "rloo_vectorized") &&
      ro.n == 1) {
    const char* name = est == "grpo" || est == "grpo_vectorized" ? "GRPO"
                       : est == "grpo_passk"                     ? "GRPO pass@k"
                                                                 : "RLOO";
    errors.push_back(absl::StrCat(name, " needs actor_rollout_ref.rollout.n > 1 (algorithm.adv_estimator=", est,
                                  ", actor_rollout_ref.rollout.n=1)"));
  }

  // Optimizer.
  check(a.optim.lr >= 0, "actor_rollout_ref.actor.optim.lr must be >= 0, got " + Fmt(a.optim.lr));
  check(a.optim.weight_decay >= 0,
        "actor_rollout_ref.actor.optim.weight_decay must be >= 0, got " + Fmt(a.optim.weight_decay));
  if (a.optim.betas.size() != 2) {
    errors.push_back(absl::StrCat("actor_rollout_ref.actor.optim.betas must have two values [beta1, beta2], got ",
                                  FormatConfigValue(a.optim.betas)));
  } else {
    for (double b : a.optim.betas) {
      check(b >= 0 && b < 1, "actor_rollout_ref.actor.optim.betas must lie in [0, 1), got " +
                                 FormatConfigValue(a.optim.betas));
    }
  }
  check(a.optim.eps > 0, "actor_rollout_ref.actor.optim.eps must be > 0, got " + Fmt(a.optim.eps));
  check(a.optim.lr_warmup_steps_ratio >= 0 && a.optim.lr_warmup_steps_ratio <= 1,
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio must lie in [0, 1], got " +
            Fmt(a.optim.lr_warmup_steps_ratio));
  check(a.grad_clip > 0, "actor_rollout_ref.actor.grad_clip must be > 0, got " + Fmt(a.grad_clip));
  check_schedule("actor_rollout_ref.actor.optim.", a.optim);

  // Losses.
  check(a.clip_ratio > 0, "actor_rollout_ref.actor.clip_ratio must be > 0, got " + Fmt(a.clip_ratio));
  check(!a.clip_ratio_low || *a.clip_ratio_low > 0,
        "actor_rollout_ref.actor.clip_ratio_low must be > 0 or null, got " + Fmt(a.clip_ratio_low.value_or(0)));
  check(!a.clip_ratio_high || *a.clip_ratio_high > 0,
        "actor_rollout_ref.actor.clip_ratio_high must be > 0 or null, got " + Fmt(a.clip_ratio_high.value_or(0)));
  check(a.clip_ratio_c > 1, "actor_rollout_ref.actor.clip_ratio_c must be > 1, got " + Fmt(a.clip_ratio_c));
  check(!a.loss_scale_factor || *a.loss_scale_factor > 0,
        absl::StrCat("actor_rollout_ref.actor.loss_scale_factor must be > 0 or null, got ",
                     a.loss_scale_factor.value_or(0)));
  // The token shares clip_cov and kl_cov pick (the worker refuses them too, but only at the first update).
  const std::string& mode = a.policy_loss.loss_mode;
  check(mode != "clip_cov" || a.policy_loss.clip_cov_ratio > 0,
        "actor_rollout_ref.actor.policy_loss.clip_cov_ratio must be > 0 with loss_mode clip_cov, got " +
            Fmt(a.policy_loss.clip_cov_ratio));
  check(mode != "kl_cov" || a.policy_loss.kl_cov_ratio > 0,
        "actor_rollout_ref.actor.policy_loss.kl_cov_ratio must be > 0 with loss_mode kl_cov, got " +
            Fmt(a.policy_loss.kl_cov_ratio));
  check(mode != "sapo" || a.tau_pos > 0,
        "actor_rollout_ref.actor.tau_pos must be > 0 with loss_mode sapo (its gate divides by it), got " +
            Fmt(a.tau_pos));
  check(mode != "sapo" || a.tau_neg > 0,
        "actor_rollout_ref.actor.tau_neg must be > 0 with loss_mode sapo (its gate divides by it), got " +
            Fmt(a.tau_neg));
  check(a.kl_loss_coef >= 0, "actor_rollout_ref.actor.kl_loss_coef must be >= 0, got " + Fmt(a.kl_loss_coef));
  check(c.algorithm.gamma >= 0 && c.algorithm.gamma <= 1,
        "algorithm.gamma must lie in [0, 1], got " + Fmt(c.algorithm.gamma));
  check(c.algorithm.lam >= 0 && c.algorithm.lam <= 1, "algorithm.lam must lie in [0, 1], got " + Fmt(c.algorithm.lam));

  // Sampling.
  auto check_sampling = [&](const char* prefix, bool do_sample, double temperature, double top_p, int64_t top_k) {
    check(!do_sample || temperature > 0,
          absl::StrCat(prefix, "temperature must be > 0 when ", prefix, "do_sample is true, got ", Fmt(temperature)));
    check(temperature >= 0, absl::StrCat(prefix, "temperature must be >= 0, got ", Fmt(temperature)));
    check(top_p > 0 && top_p <= 1, absl::StrCat(prefix, "top_p must lie in (0, 1], got ", Fmt(top_p)));
    check(top_k >= -1, absl::StrCat(prefix, "top_k must be -1 (disabled) or >= 0, got ", top_k));
  };
  check_sampling("actor_rollout_ref.rollout.", ro.do_sample, ro.temperature, ro.top_p, ro.top_k);
  // The training rollout's temperature also scales the trainer's logits (its log-probs and entropy divide by it, as
  // verl's actor does), so greedy rollouts keep one > 0; validation's is the rollout's alone.
  check(ro.do_sample || ro.temperature > 0,  // with do_sample, check_sampling's message says it
        "actor_rollout_ref.rollout.temperature must be > 0, got " + Fmt(ro.temperature) +
            ": the trainer divides the logits by it (for greedy rollouts set actor_rollout_ref.rollout.do_sample=false "
            "and keep the temperature)");
  check_sampling("actor_rollout_ref.rollout.val_kwargs.", ro.val_kwargs.do_sample, ro.val_kwargs.temperature,
                 ro.val_kwargs.top_p, ro.val_kwargs.top_k);

  // Trainer.
  check(t.total_epochs > 0, absl::StrCat("trainer.total_epochs must be > 0, got ", t.total_epochs));
  check(!t.total_training_steps || *t.total_training_steps > 0,
        absl::StrCat("trainer.total_training_steps must be > 0 or null, got ", t.total_training_steps.value_or(0)));
  check(t.save_freq == -1 || t.save_freq > 0,
        absl::StrCat("trainer.save_freq must be -1 (disabled) or > 0, got ", t.save_freq));
  check(t.test_freq == -1 || t.test_freq > 0,
        absl::StrCat("trainer.test_freq must be -1 (disabled) or > 0, got ", t.test_freq));
  check(t.log_val_generations >= 0,
        absl::StrCat("trainer.log_val_generations must be >= 0 (0: none), got ", t.log_val_generations));
  check(t.resume_mode != "resume_path" || !t.resume_from_path.empty(),
        "trainer.resume_from_path must be set when trainer.resume_mode=resume_path");

  // Cluster.
  const ClusterConfig& cl = c.cluster;
  check(cl.num_threads_per_rank >= 0,
        absl::StrCat("cluster.num_threads_per_rank must be >= 0 (0: all cores), got ", cl.num_threads_per_rank));
  check(cl.heartbeat_interval_s > 0, "cluster.heartbeat_interval_s must be > 0, got " + Fmt(cl.heartbeat_interval_s));
  check(cl.heartbeat_timeout_s > 0, "cluster.heartbeat_timeout_s must be > 0, got " + Fmt(cl.heartbeat_timeout_s));
  check(cl.max_worker_restarts >= 0,
        absl::StrCat("cluster.max_worker_restarts must be >= 0, got ", cl.max_worker_restarts));
  check(cl.rpc_timeout_s > 0, "cluster.rpc_timeout_s must be > 0, got " + Fmt(cl.rpc_timeout_s));
  check(cl.worker_replacement_timeout_s > 0,
        "cluster.worker_replacement_timeout_s must be > 0, got " + Fmt(cl.worker_replacement_timeout_s));
  for (const auto& [key, keep] : {std::pair{"trainer.max_actor_ckpt_to_keep", t.max_actor_ckpt_to_keep},
                                  std::pair{"trainer.max_critic_ckpt_to_keep", t.max_critic_ckpt_to_keep}}) {
    check(!keep || *keep >= 1, absl::StrCat(key, " must be >= 1 or null, got ", keep.value_or(0)));
  }
  check(cl.comm_timeout_s > 0, "cluster.comm_timeout_s must be > 0, got " + Fmt(cl.comm_timeout_s));
  if (!cl.worker_addresses.empty() && t.nnodes >= 1 &&
      static_cast<int64_t>(cl.worker_addresses.size()) != t.nnodes) {
    errors.push_back(absl::StrCat("cluster.worker_addresses lists ", cl.worker_addresses.size(),
                                  " worker(s) but trainer.nnodes is ", t.nnodes,
                                  ": give one address per node (each worker hosts trainer.n_gpus_per_node ranks)"));
  }
  check(cl.worker_start_timeout_s > 0,
        "cluster.worker_start_timeout_s must be > 0, got " + Fmt(cl.worker_start_timeout_s));
  for (const std::string& addr : cl.worker_addresses) {
    check(!addr.empty(), "cluster.worker_addresses must not contain an empty address");
  }

  // The critic (GAE) and the in-reward KL controller.
  if (c.UseCritic()) {
    const CriticConfig& cr = c.critic;
    check(!cr.model_path.empty(), "critic.model.path must be set when algorithm.adv_estimator=gae");
    if (cr.ppo_mini_batch_size <= 0 || d.train_batch_size % cr.ppo_mini_batch_size != 0 ||
        cr.ppo_mini_batch_size > d.train_batch_size) {
      errors.push_back(absl::StrCat("critic.ppo_mini_batch_size (", cr.ppo_mini_batch_size,
                                    ") must be > 0, <= data.train_batch_size (", d.train_batch_size,
                                    ") and divide it"));
    } else if (cr.ppo_mini_batch_size * ro.n % train_world != 0) {
      errors.push_back(absl::StrCat("critic.ppo_mini_batch_size * actor_rollout_ref.rollout.n (",
                                    cr.ppo_mini_batch_size * ro.n, ") must be divisible by ", ranks_of, train_world,
                                    ")"));
    } else if (!cr.use_dynamic_bsz && cr.ppo_micro_batch_size_per_gpu &&
               *cr.ppo_micro_batch_size_per_gpu > 0 &&
               (cr.ppo_mini_batch_size * ro.n / train_world) %
                       *cr.ppo_micro_batch_size_per_gpu != 0) {
      errors.push_back(absl::StrCat("critic.ppo_mini_batch_size * actor_rollout_ref.rollout.n (",
                                    cr.ppo_mini_batch_size * ro.n,
                                    ") must be divisible by critic.ppo_micro_batch_size_per_gpu (",
                                    *cr.ppo_micro_batch_size_per_gpu, ")"));
    }
    check_micro(cr.ppo_micro_batch_size_per_gpu, "critic.ppo_micro_batch_size_per_gpu");
    check_micro(cr.forward_micro_batch_size_per_gpu, "critic.forward_micro_batch_size_per_gpu");
    check(cr.ppo_epochs >= 1, absl::StrCat("critic.ppo_epochs must be >= 1, got ", cr.ppo_epochs));
    check(cr.cliprange_value > 0, "critic.cliprange_value must be > 0, got " + Fmt(cr.cliprange_value));
    check(cr.grad_clip > 0, "critic.grad_clip must be > 0, got " + Fmt(cr.grad_clip));
    check(cr.optim.lr >= 0, "critic.optim.lr must be >= 0, got " + Fmt(cr.optim.lr));
    check(cr.optim.weight_decay >= 0, "critic.optim.weight_decay must be >= 0, got " + Fmt(cr.optim.weight_decay));
    check(cr.optim.eps > 0, "critic.optim.eps must be > 0, got " + Fmt(cr.optim.eps));
    check(cr.optim.lr_warmup_steps_ratio >= 0 && cr.optim.lr_warmup_steps_ratio <= 1,
          "critic.optim.lr_warmup_steps_ratio must lie in [0, 1], got " + Fmt(cr.optim.lr_warmup_steps_ratio));
    check_schedule("critic.optim.", cr.optim);
    check(cr.optim.betas.size() == 2 && cr.optim.betas[0] >= 0 && cr.optim.betas[0] < 1 && cr.optim.betas[1] >= 0 &&
              cr.optim.betas[1] < 1,
          "critic.optim.betas must be two values in [0, 1), got " + FormatConfigValue(cr.optim.betas));
  } else {
    check(c.trainer.critic_warmup == 0,
          absl::StrCat("trainer.critic_warmup=", c.trainer.critic_warmup, " needs a critic (algorithm.adv_estimator=gae",
                       ", got ", est, ")"));
  }
  if (c.algorithm.use_kl_in_reward && c.algorithm.kl_ctrl.type == "adaptive") {
    check(c.algorithm.kl_ctrl.target_kl > 0,
          "algorithm.kl_ctrl.target_kl must be > 0 for adaptive control, got " + Fmt(c.algorithm.kl_ctrl.target_kl));
    check(c.algorithm.kl_ctrl.horizon > 0,
          absl::StrCat("algorithm.kl_ctrl.horizon must be > 0 for adaptive control, got ", c.algorithm.kl_ctrl.horizon));
  }
  check(c.algorithm.kl_ctrl.kl_coef >= 0, "algorithm.kl_ctrl.kl_coef must be >= 0, got " + Fmt(c.algorithm.kl_ctrl.kl_coef));

  // verl's rollout correction: its token-level IS weights are our TIS; the rest is refused rather than ignored.
  const AlgorithmConfig::RolloutCorrection& rc = c.algorithm.rollout_correction;
  check(rc.rollout_is.empty() || rc.rollout_is == "token",
        "algorithm.rollout_correction.rollout_is=" + rc.rollout_is +
            " is not available: null (off) or token (per-token truncated importance weights) are");
  check(rc.rollout_is.empty() || rc.rollout_is_threshold > 0,
        "algorithm.rollout_correction.rollout_is_threshold must be > 0, got " + Fmt(rc.rollout_is_threshold));
  check(rc.rollout_is.empty() || a.tis_imp_ratio_cap <= 0,
        "algorithm.rollout_correction.rollout_is and actor_rollout_ref.actor.tis_imp_ratio_cap both turn on the same "
        "truncated importance weights: set one (rollout_is=token with rollout_is_threshold=" +
            Fmt(rc.rollout_is_threshold) + ", or tis_imp_ratio_cap=" + Fmt(a.tis_imp_ratio_cap) + ")");
  check(!rc.rollout_is_batch_normalize,
        "algorithm.rollout_correction.rollout_is_batch_normalize=true is not available: only false (the weights as "
        "truncated)");
  check(rc.rollout_rs.empty(), "algorithm.rollout_correction.rollout_rs=" + rc.rollout_rs +
                                   " is not available: rejection sampling by rollout divergence is not built in; "
                                   "rollout_is=token weights tokens instead");
  // Bypass mode: verl's apply_bypass_mode sets the loss mode to its own, whatever the actor's says; a loss the user
  // chose is refused rather than silently replaced. Its old log-probs are the rollout's, so TIS against the rollout
  // would weigh every token by min(1, cap).
  check(!rc.bypass_mode || a.policy_loss.loss_mode == "vanilla",
        "algorithm.rollout_correction.bypass_mode=true replaces the policy loss with loss_type's (" + rc.loss_type +
            "), so actor_rollout_ref.actor.policy_loss.loss_mode=" + a.policy_loss.loss_mode +
            " would not run: set loss_mode=vanilla, or bypass_mode=false");
  check(!rc.bypass_mode || a.tis_imp_ratio_cap <= 0,
        "algorithm.rollout_correction.bypass_mode=true takes the old log-probs from the rollout, so "
        "actor_rollout_ref.actor.tis_imp_ratio_cap=" + Fmt(a.tis_imp_ratio_cap) +
            " has nothing to correct: leave it unset (rollout_is=token weighs loss_type=reinforce's tokens)");
  check(t.critic_warmup >= 0, absl::StrCat("trainer.critic_warmup must be >= 0, got ", t.critic_warmup));

  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
}

}  // namespace verl

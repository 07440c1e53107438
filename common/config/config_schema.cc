#include "common/config/config_schema.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace verl {
namespace {

using T = ConfigType;
using O = ConfigOrigin;

// Keep keys of one section contiguous: --print-config nests them in this order.
const std::vector<ConfigKeySpec>& Table() {
  static const auto* table = new std::vector<ConfigKeySpec>{
      // ---- data ----
      {"data.train_files", T::kStringList, "[]", "", true, O::kVerl,
       "Training set: parquet or jsonl files in verl's layout, one path or a list, their rows in order (required)."},
      {"data.val_files", T::kStringList, "[]", "", false, O::kVerl,
       "Validation set: one path or a list, same layout; empty disables validation."},
      {"data.prompt_key", T::kString, "prompt", "", false, O::kVerl,
       "Column holding the prompt (a chat message list)."},
      {"data.max_prompt_length", T::kInt, "512", "", false, O::kVerl,
       "Maximum prompt length in tokens (prompts are left-padded to it)."},
      {"data.max_response_length", T::kInt, "512", "", false, O::kVerl,
       "Maximum number of generated tokens per response."},
      {"data.train_batch_size", T::kInt, "1024", "", false, O::kVerl,
       "Prompts per training step (each sampled actor_rollout_ref.rollout.n times)."},
      {"data.val_batch_size", T::kOptionalInt, "null", "", false, O::kVerl,
       "Prompts per validation batch; null means the whole validation set at once."},
      {"data.shuffle", T::kBool, "true", "", false, O::kVerl, "Shuffle the training set every epoch."},
      {"data.seed", T::kInt, "1", "", false, O::kVerl, "Seed of the training-set shuffle."},
      {"data.filter_overlong_prompts", T::kBool, "false", "", false, O::kVerl,
       "Drop prompts longer than data.max_prompt_length when loading."},
      {"data.truncation", T::kString, "error", "error|left|right", false, O::kVerl,
       "What to do with a prompt longer than data.max_prompt_length."},

      // ---- actor_rollout_ref.model ----
      {"actor_rollout_ref.model.path", T::kString, "\"\"", "", true, O::kVerl,
       "Local HuggingFace model directory (config.json, *.safetensors, tokenizer.json) (required)."},
      {"actor_rollout_ref.model.dtype", T::kString, "float32", "float32|bfloat16", false, O::kOurs,
       "Parameter dtype of actor, rollout, ref and critic; with bfloat16 the optimizer keeps float32 master weights (and saves them in the optimizer checkpoint)."},
      {"actor_rollout_ref.model.use_remove_padding", T::kBool, "false", "", false, O::kVerl,
       "Actor and ref passes run with their sequences packed back to back without padding (attention per sequence: flash attention's variable-length kernel on GPUs in bf16, one call per sequence otherwise); the same numbers with less work when lengths vary."},
      {"actor_rollout_ref.model.enable_gradient_checkpointing", T::kBool, "true", "", false, O::kVerl,
       "Activation checkpointing in the actor update: each decoder layer keeps its input (and, on a GPU, its shared-prompt attention output; with recompute_keep_projections its q/k/v and output projections' outputs) and is recomputed in backward (same gradients, less memory; at 86be33a a B3 mini-batch's update took 15 % longer than with none recomputed, before the recompute kept the attention and projections). recompute_num_layers narrows it to the first layers. Always on with actor.shard_parameters."},
      {"actor_rollout_ref.model.recompute_keep_projections", T::kBool, "true", "", false, O::kOurs,
       "With enable_gradient_checkpointing: each recomputed layer also keeps its q/k/v and output projections' outputs from its forward, and its recompute takes them instead of running those two GEMMs again (a B3 mini-batch's update on an H100: 2.31 -> 2.26 s, +2.0 GB at its peak). Same gradients (to the GEMMs' rounding); more memory: about 4 KB a token per recomputed layer at the Qwen2.5-0.5B shape in bf16, beside the 4 KB of input and attention output it keeps anyway (a layer not recomputed keeps 37). false recomputes them, for the least memory."},
      {"actor_rollout_ref.model.recompute_num_layers", T::kOptionalInt, "null", "", false, O::kOurs,
       "With enable_gradient_checkpointing: only the first this many decoder layers are recomputed in backward, the others keep their activations (Megatron's recompute_method block); null recomputes every layer. Trades memory for speed: each kept layer holds its activations for the micro-batch's tokens until its backward (about 37 KB per token per layer at the Qwen2.5-0.5B shape in bf16). Not with actor.shard_parameters."},

      // ---- actor_rollout_ref.actor ----
      {"actor_rollout_ref.actor.optim.lr", T::kDouble, "1.0e-6", "", false, O::kVerl, "AdamW learning rate."},
      {"actor_rollout_ref.actor.optim.weight_decay", T::kDouble, "0.01", "", false, O::kVerl,
       "AdamW decoupled weight decay."},
      {"actor_rollout_ref.actor.optim.betas", T::kDoubleList, "[0.9, 0.999]", "", false, O::kVerl,
       "AdamW betas [beta1, beta2]."},
      {"actor_rollout_ref.actor.optim.eps", T::kDouble, "1.0e-8", "", false, O::kVerl, "AdamW epsilon."},
      {"actor_rollout_ref.actor.optim.lr_warmup_steps", T::kInt, "-1", "", false, O::kVerl,
       "Linear warm-up steps; -1 uses lr_warmup_steps_ratio instead."},
      {"actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", T::kDouble, "0.0", "", false, O::kVerl,
       "Warm-up steps as a fraction of the total training steps (used when lr_warmup_steps is -1)."},
      {"actor_rollout_ref.actor.optim.lr_scheduler_type", T::kString, "constant", "constant|cosine", false, O::kVerl,
       "Actor learning rate after the warm-up: constant, or cosine (from lr down to min_lr_ratio x lr over the run's remaining steps, num_cycles waves)."},
      {"actor_rollout_ref.actor.optim.warmup_style", T::kString, "null", "|constant|cosine", false, O::kVerl,
       "Deprecated in verl in favour of lr_scheduler_type: when set, it is the schedule, whatever lr_scheduler_type says (verl's rule)."},
      {"actor_rollout_ref.actor.optim.min_lr_ratio", T::kDouble, "0.0", "", false, O::kVerl,
       "cosine: the floor of the schedule as a fraction of lr, in [0, 1]."},
      {"actor_rollout_ref.actor.optim.num_cycles", T::kDouble, "0.5", "", false, O::kVerl,
       "cosine: waves of the cosine over the steps after the warm-up (0.5: one fall from lr to the floor), >= 0."},
      {"actor_rollout_ref.actor.ppo_mini_batch_size", T::kInt, "256", "", false, O::kVerl,
       "Prompts per optimizer step (times rollout.n samples); must divide data.train_batch_size."},
      {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", T::kOptionalInt, "null", "", false, O::kVerl,
       "Samples per forward/backward pass on one rank (gradient accumulation); null means the whole mini-batch."},
      {"actor_rollout_ref.actor.use_dynamic_bsz", T::kBool, "false", "", false, O::kVerl,
       "Cut each mini-batch into micro-batches by a token budget (ppo_max_token_len_per_gpu) instead of a number of samples: sequences longest first, as many per pass as fit. Every pass (fixed or dynamic) drops the padding columns none of its sequences uses."},
      {"actor_rollout_ref.actor.ppo_max_token_len_per_gpu", T::kInt, "16384", "", false, O::kVerl,
       "With use_dynamic_bsz: the most tokens one forward/backward pass takes on a rank, counted as the tokens the pass computes: samples x the longest sample (the padded passes roll each sample past its prompt's left padding), samples x (longest prompt + longest response, in columns) for every pass of a step whose batch holds a sample with holes in its attention mask (or with VERL_CAUSAL_PASSES=0 set), the samples' tokens with use_remove_padding (a shared prompt's once with use_prefix_grouper); at least data.max_prompt_length + data.max_response_length."},
      {"actor_rollout_ref.actor.ppo_epochs", T::kInt, "1", "", false, O::kVerl,
       "Passes over each step's batch in the actor update."},
      {"actor_rollout_ref.actor.shuffle", T::kBool, "false", "", false, O::kVerl,
       "Shuffle samples between mini-batches in the actor update."},
      {"actor_rollout_ref.actor.use_prefix_grouper", T::kBool, "false", "", false, O::kVerl,
       "The actor's passes (old log-probs, update) and the ref's run packed (as with use_remove_padding), the samples of one prompt sharing one run of it: the prompt's tokens are computed once per pass instead of once per sample (rollout.n times), and each response attends to them; the same log-probs and gradients but for rounding. With use_dynamic_bsz a prompt's samples go to the same pass where they fit and its tokens count once (fixed micro-batches share within runs of consecutive samples; actor.shuffle spreads a prompt's samples over mini-batches, so less is shared). Attention still runs over each sample's prompt + response (gathered rows, cuDNN on GPUs), so with long prompts and short responses a pass's attention memory approaches the unshared pass's. Unlike verl's, works with use_dynamic_bsz and use_remove_padding."},
      {"actor_rollout_ref.actor.defer_first_mini_batch_log_probs", T::kBool, "true", "", false, O::kOurs,
       "The old log-prob pass skips the samples of the update's first mini-batch: the update's own forward reaches "
       "them before any optimizer step, so their old log-probs are its log-probs, detached (verl does the same when a "
       "step is one mini-batch and one epoch; with one mini-batch the pass is skipped whole). The same update up to "
       "rounding (the first mini-batch's ratios are exactly 1); training/rollout_probs_diff_* then come with the "
       "update's metrics. Not with algorithm.use_kl_in_reward (the advantage needs the old log-probs first) or in "
       "critic-warmup steps."},
      {"actor_rollout_ref.actor.clip_ratio", T::kDouble, "0.2", "", false, O::kVerl, "PPO clip range epsilon."},
      {"actor_rollout_ref.actor.clip_ratio_low", T::kOptionalDouble, "null", "", false, O::kVerlChanged,
       "Lower clip range (1 - low); null uses clip_ratio (verl: 0.2)."},
      {"actor_rollout_ref.actor.clip_ratio_high", T::kOptionalDouble, "null", "", false, O::kVerlChanged,
       "Upper clip range (1 + high, DAPO clip-higher); null uses clip_ratio (verl: 0.2)."},
      {"actor_rollout_ref.actor.clip_ratio_c", T::kDouble, "3.0", "", false, O::kVerl,
       "Dual-clip lower bound for negative advantages (must be > 1)."},
      {"actor_rollout_ref.actor.loss_agg_mode", T::kString, "token-mean",
       "token-mean|seq-mean-token-sum|seq-mean-token-mean|seq-mean-token-sum-norm", false, O::kVerl,
       "How per-token losses are aggregated into the batch loss."},
      {"actor_rollout_ref.actor.loss_scale_factor", T::kOptionalInt, "null", "", false, O::kVerl,
       "seq-mean-token-sum-norm: the constant the token sum is divided by; null uses data.max_response_length."},
      {"actor_rollout_ref.actor.entropy_coeff", T::kDouble, "0.0", "", false, O::kVerl,
       "Weight of the entropy bonus in the actor loss."},
      {"actor_rollout_ref.actor.use_kl_loss", T::kBool, "false", "", false, O::kVerl,
       "Add a KL(actor || ref) term to the actor loss (GRPO style)."},
      {"actor_rollout_ref.actor.kl_loss_coef", T::kDouble, "0.001", "", false, O::kVerl,
       "Weight of the KL loss term."},
      {"actor_rollout_ref.actor.kl_loss_type", T::kString, "low_var_kl", "kl|k1|abs|mse|k2|low_var_kl|k3", false,
       O::kVerl, "KL estimator of the KL loss term."},
      {"actor_rollout_ref.actor.grad_clip", T::kDouble, "1.0", "", false, O::kVerl,
       "Gradient clipping by global norm."},
      {"actor_rollout_ref.actor.policy_loss.loss_mode", T::kString, "vanilla",
       "vanilla|gspo|gpg|cispo|clip_cov|kl_cov|sapo|geo_mean", false, O::kVerl,
       "Policy loss of the actor update (geo_mean: GMPO, one term per sequence, its own aggregation)."},
      {"actor_rollout_ref.actor.policy_loss.clip_cov_ratio", T::kDouble, "0.0002", "", false, O::kVerl,
       "clip_cov: fraction of tokens whose gradient is detached."},
      {"actor_rollout_ref.actor.policy_loss.clip_cov_lb", T::kDouble, "1.0", "", false, O::kVerl,
       "clip_cov: lower bound of the covariance window."},
      {"actor_rollout_ref.actor.policy_loss.clip_cov_ub", T::kDouble, "5.0", "", false, O::kVerl,
       "clip_cov: upper bound of the covariance window."},
      {"actor_rollout_ref.actor.policy_loss.kl_cov_ratio", T::kDouble, "0.0002", "", false, O::kVerl,
       "kl_cov: fraction of tokens that get the KL penalty."},
      {"actor_rollout_ref.actor.policy_loss.ppo_kl_coef", T::kDouble, "0.1", "", false, O::kVerl,
       "kl_cov: coefficient of the KL penalty."},
      {"actor_rollout_ref.actor.tau_pos", T::kDouble, "1.0", "", false, O::kVerl,
       "sapo: temperature of the smooth gate on tokens with a positive advantage."},
      {"actor_rollout_ref.actor.tau_neg", T::kDouble, "1.05", "", false, O::kVerl,
       "sapo: temperature of the smooth gate on the other tokens."},
      {"actor_rollout_ref.actor.tis_imp_ratio_cap", T::kDouble, "-1.0", "", false, O::kVerl,
       "Truncated importance sampling against the rollout log-probs: cap of the per-token weight; -1 disables."},
      {"actor_rollout_ref.actor.shard_optimizer_state", T::kBool, "true", "", false, O::kOurs,
       "Over several data-parallel ranks, each rank keeps and updates the AdamW moments of only its share of the parameters, then broadcasts them (ZeRO stage 1): optimizer memory per rank falls with the ranks. No effect on one rank."},
      {"actor_rollout_ref.actor.shard_parameters", T::kBool, "false", "", false, O::kOurs,
       "Over several data-parallel ranks, shard the actor's (and the ref's) parameters, gradients and optimizer state (ZeRO stage 3, FSDP FULL_SHARD): each rank keeps 1/ranks of each layer, gathers a layer just before using it and drops it after; layers are recomputed in backward (activation checkpointing). Generation gathers the whole actor for the rollout. No effect on one rank."},
      {"actor_rollout_ref.actor.fsdp_config.optimizer_offload", T::kBool, "false", "", false, O::kVerl,
       "Keep the actor's AdamW state (moments and a float32 master copy) in host memory and update there; GPU ranks only (CPU ranks keep it there anyway)."},
      {"actor_rollout_ref.actor.fsdp_config.param_offload", T::kBool, "false", "", false, O::kVerl,
       "verl's parameter offload (FSDP CPUOffload): not available here, only false is accepted; the parameters stay on the rank's device (fsdp_config.optimizer_offload moves the larger AdamW state to host memory)."},

      // ---- actor_rollout_ref.rollout ----
      {"actor_rollout_ref.rollout.n", T::kInt, "1", "", false, O::kVerl, "Responses sampled per prompt."},
      {"actor_rollout_ref.rollout.temperature", T::kDouble, "1.0", "", false, O::kVerl,
       "Sampling temperature; > 0, since the trainer's log-probs and entropy divide the logits by it too (as verl's actor does), greedy rollouts (do_sample false) included."},
      {"actor_rollout_ref.rollout.top_k", T::kInt, "-1", "", false, O::kVerl,
       "Top-k sampling; -1 (or 0) disables it."},
      {"actor_rollout_ref.rollout.top_p", T::kDouble, "1.0", "", false, O::kVerl,
       "Nucleus sampling probability mass, in (0, 1]: a token is dropped when the tokens of larger logit (after top-k) "
       "hold more than top_p of the mass; tokens of equal logit stay or go together."},
      {"actor_rollout_ref.rollout.do_sample", T::kBool, "true", "", false, O::kVerl,
       "Sample (true) or decode greedily (false)."},
      {"actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", T::kBool, "${actor_rollout_ref.actor.use_dynamic_bsz}",
       "", false, O::kVerl, "Old log-probs in passes cut by a token budget (log_prob_max_token_len_per_gpu)."},
      {"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", T::kInt,
       "${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}", "", false, O::kVerl,
       "With log_prob_use_dynamic_bsz: the most tokens per old-log-prob forward pass on a rank."},
      {"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", T::kOptionalInt, "null", "", false, O::kVerl,
       "Samples per forward pass when computing old log-probs; null means the whole batch of the rank."},
      {"actor_rollout_ref.rollout.gather_layer_by_layer", T::kBool, "false", "", false, O::kOurs,
       "With actor_rollout_ref.actor.shard_parameters: generate gathering one layer at a time for every decoding step, so no rank ever holds the whole actor (a collective per layer per token: slow), instead of gathering the whole actor once per rollout. The rollout then runs static passes of whole prompts, at most max_num_seqs rows each (at least one prompt's rollout.n samples) and on a GPU what gpu_memory_utilization leaves for their KV cache and prefill; every rank of the group makes as many passes as the busiest one, and none starts where one cannot."},
      {"actor_rollout_ref.rollout.enforce_eager", T::kBool, "false", "", false, O::kVerl,
       "GPU ranks: false replays each decoding step (forward, LM head, sampling) as a CUDA graph captured at its first use per batch-size bucket (powers of two up to the slot count); true launches every kernel eagerly. No effect on CPU ranks or models the decode kernel does not take (head_dim 64 or 128, at most 8 query heads per KV head)."},
      {"actor_rollout_ref.rollout.ignore_eos", T::kBool, "false", "", false, O::kVerl,
       "Keep sampling past EOS tokens until data.max_response_length (vLLM's ignore_eos, as verl passes it): every response is full length and may hold EOS tokens inside it. For benchmarks with fixed lengths; off, a response ends at its first EOS."},
      {"actor_rollout_ref.rollout.enable_prefix_caching", T::kBool, "true", "", false, O::kVerl,
       "GPU ranks (the decode kernel): the rollout.n samples of a prompt read its keys and values from one KV cache slot instead of a copy each (the prefill writes the prompt once; when the sample holding it ends first, the prompt moves to one still running). The same tokens and log-probs bit for bit; decoding reads less memory. Only a prompt's own samples share, while one of them runs (no cache across prompts or steps), and each slot keeps room for its prompt. No effect with rollout.n = 1, on CPU ranks or with models the decode kernel does not take (head_dim 64 or 128, at most 8 query heads per KV head)."},
      {"actor_rollout_ref.rollout.calculate_log_probs", T::kBool, "false", "", false, O::kVerl,
       "verl: have the rollout return each sampled token's log-prob. Here the rollout always does (they come with the "
       "sampling): training/rollout_probs_diff_* and TIS use them. true adds verl's rollout_corr/* figures of the "
       "update (its log-probs against the rollout's, per micro-batch: kl, k3_kl, perplexities, chi2), as bypass_mode "
       "does."},
      {"actor_rollout_ref.rollout.max_num_seqs", T::kInt, "1024", "", false, O::kVerl,
       "Continuous batching: the most sequences decoding at once, each in a slot of a KV cache allocated at the start of the rollout; when one ends, the next waiting prompt takes its slot (layer by layer: the rows of a static pass). On a GPU also bounded by gpu_memory_utilization."},
      {"actor_rollout_ref.rollout.max_num_batched_tokens", T::kInt, "8192", "", false, O::kVerl,
       "Waiting prompts are prefilled in groups of at most this many tokens (prompts in the group x its longest prompt; the rollout.n samples of a prompt share one prefill); a longer prompt is prefilled alone, in chunks of at most this many tokens with enable_chunked_prefill."},
      {"actor_rollout_ref.rollout.enable_chunked_prefill", T::kBool, "true", "", false, O::kVerl,
       "Continuous batching: a prompt longer than max_num_batched_tokens is prefilled in chunks of at most that many tokens, each written into the prompt's KV cache slot and attending to the chunks before it there, so no prefill pass is larger than max_num_batched_tokens (on a GPU: more slots within gpu_memory_utilization for long prompts); false: such a prompt is prefilled in one pass of its own. Unlike vLLM's, chunks do not share a pass with decoding steps. Static passes (gather_layer_by_layer) prefill whole prompts."},
      {"actor_rollout_ref.rollout.gpu_memory_utilization", T::kDouble, "0.5", "", false, O::kVerl,
       "GPU ranks: the share of the device's memory the rollout may fill (vLLM's meaning): what is allocated already (weights, optimizer state) plus its KV cache, a decoding step's logits and activations per slot, its largest prefill (a pass of max_num_batched_tokens) and the batch it returns, the activations estimated; the number of cache slots is what fits, at most max_num_seqs. A share too small for one sequence (layer by layer: one prompt's rollout.n samples) is an error naming the numbers. No effect on CPU ranks."},
      {"actor_rollout_ref.rollout.update_weights_bucket_megabytes", T::kInt, "512", "", false, O::kVerl,
       "Split placement (resource_pool.rollout_ranks > 0): the actor's weights go to the rollout ranks in buckets of at most this many MB, each under cluster.comm_timeout_s."},
      {"actor_rollout_ref.rollout.val_kwargs.temperature", T::kDouble, "0.0", "", false, O::kVerl,
       "Validation sampling temperature."},
      {"actor_rollout_ref.rollout.val_kwargs.top_k", T::kInt, "-1", "", false, O::kVerl, "Validation top-k."},
      {"actor_rollout_ref.rollout.val_kwargs.top_p", T::kDouble, "1.0", "", false, O::kVerl, "Validation top-p."},
      {"actor_rollout_ref.rollout.val_kwargs.do_sample", T::kBool, "false", "", false, O::kVerl,
       "Sample during validation (false: greedy)."},
      {"actor_rollout_ref.rollout.val_kwargs.n", T::kInt, "1", "", false, O::kVerl,
       "Responses per validation prompt."},

      // ---- actor_rollout_ref.ref ----
      {"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", T::kOptionalInt, "null", "", false, O::kVerl,
       "Samples per forward pass of the reference model; null means the whole batch of the rank."},
      {"actor_rollout_ref.ref.log_prob_use_dynamic_bsz", T::kBool, "${actor_rollout_ref.actor.use_dynamic_bsz}", "",
       false, O::kVerl, "Reference log-probs in passes cut by a token budget (log_prob_max_token_len_per_gpu)."},
      {"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", T::kInt,
       "${actor_rollout_ref.actor.ppo_max_token_len_per_gpu}", "", false, O::kVerl,
       "With log_prob_use_dynamic_bsz: the most tokens per reference forward pass on a rank."},
      {"actor_rollout_ref.ref.fsdp_config.param_offload", T::kBool, "false", "", false, O::kVerl,
       "The reference model's weights (or, with shard_parameters, its shards) in pinned host memory between its log-prob passes, copied to the GPU for each pass: its 2 bytes a parameter (bf16) leave the GPU during rollout and update. No effect on a CPU rank."},

      // ---- algorithm ----
      {"algorithm.adv_estimator", T::kString, "gae",
       "gae|grpo|reinforce_plus_plus|rloo|remax|grpo_passk|reinforce_plus_plus_baseline|opo|gpg|grpo_vectorized|"
       "rloo_vectorized",
       false, O::kVerl, "Advantage estimator."},
      {"algorithm.norm_adv_by_std_in_grpo", T::kBool, "true", "", false, O::kVerl,
       "GRPO: divide group-centred scores by the group std (false gives Dr. GRPO)."},
      {"algorithm.gamma", T::kDouble, "1.0", "", false, O::kVerl, "Discount factor (GAE, REINFORCE++)."},
      {"algorithm.lam", T::kDouble, "1.0", "", false, O::kVerl, "GAE lambda."},
      {"algorithm.use_kl_in_reward", T::kBool, "false", "", false, O::kVerl,
       "Subtract a KL penalty from the token-level reward (PPO style)."},
      {"algorithm.kl_penalty", T::kString, "kl", "kl|k1|abs|mse|k2|low_var_kl|k3", false, O::kVerl,
       "KL estimator of the in-reward KL penalty."},
      {"algorithm.kl_ctrl.type", T::kString, "fixed", "fixed|adaptive", false, O::kVerl,
       "In-reward KL coefficient controller."},
      {"algorithm.kl_ctrl.kl_coef", T::kDouble, "0.001", "", false, O::kVerl, "Initial in-reward KL coefficient."},
      {"algorithm.kl_ctrl.horizon", T::kInt, "10000", "", false, O::kVerl, "Adaptive controller horizon."},
      {"algorithm.kl_ctrl.target_kl", T::kDouble, "0.1", "", false, O::kVerl, "Adaptive controller target KL."},
      // ---- algorithm.rollout_correction (verl's rollout correction; token-level IS weights and bypass mode) ----
      {"algorithm.rollout_correction.rollout_is", T::kString, "null", "", false, O::kVerl,
       "Importance sampling against the rollout policy: null (off) or token, per-token weights min(exp(old log-prob - "
       "rollout log-prob), rollout_is_threshold), detached, on every loss mode (the same as "
       "actor.tis_imp_ratio_cap=rollout_is_threshold). In bypass mode the weights are min(pi / pi_rollout, "
       "threshold), which loss_type=reinforce applies and ppo_clip does not (as verl). sequence is not available."},
      {"algorithm.rollout_correction.rollout_is_threshold", T::kDouble, "2.0", "", false, O::kVerl,
       "With rollout_is: the cap of the IS weights (> 0)."},
      {"algorithm.rollout_correction.rollout_is_batch_normalize", T::kBool, "false", "", false, O::kVerl,
       "Only false is available (weights not rescaled to mean 1)."},
      {"algorithm.rollout_correction.rollout_rs", T::kString, "null", "", false, O::kVerl,
       "Rejection sampling of tokens or sequences by their divergence from the rollout: only null (off) is "
       "available."},
      {"algorithm.rollout_correction.rollout_rs_threshold", T::kString, "null", "", false, O::kVerl,
       "rollout_rs's bounds; no effect without rollout_rs (as in verl)."},
      {"algorithm.rollout_correction.bypass_mode", T::kBool, "false", "", false, O::kVerl,
       "true: the rollout's log-probs are the old ones (no old log-prob pass) and the policy loss is loss_type's; "
       "false: the actor recomputes them (decoupled). Needs actor.policy_loss.loss_mode=vanilla, which verl would "
       "replace, and no actor.tis_imp_ratio_cap."},
      {"algorithm.rollout_correction.loss_type", T::kString, "ppo_clip", "ppo_clip|reinforce", false, O::kVerl,
       "bypass_mode's policy loss: ppo_clip (vanilla's clipped ratio against the rollout) or reinforce (-A log pi, "
       "with rollout_is=token's weights); no effect without bypass_mode (as in verl)."},

      // ---- critic (used when algorithm.adv_estimator=gae) ----
      {"critic.model.path", T::kString, "${actor_rollout_ref.model.path}", "", false, O::kVerlChanged,
       "HF model directory of the critic (a decoder; the value head is added); verl: no default."},
      {"critic.model.use_remove_padding", T::kBool, "false", "", false, O::kVerl,
       "Critic passes packed without padding, as actor_rollout_ref.model.use_remove_padding."},
      {"critic.model.enable_gradient_checkpointing", T::kBool, "true", "", false, O::kVerl,
       "Activation checkpointing in the critic update, as actor_rollout_ref.model.enable_gradient_checkpointing."},
      {"critic.model.recompute_keep_projections", T::kBool, "true", "", false, O::kOurs,
       "With critic.model.enable_gradient_checkpointing: as actor_rollout_ref.model.recompute_keep_projections."},
      {"critic.model.recompute_num_layers", T::kOptionalInt, "null", "", false, O::kOurs,
       "With critic.model.enable_gradient_checkpointing: only the first this many layers recomputed, as actor_rollout_ref.model.recompute_num_layers."},
      {"critic.model.fsdp_config.optimizer_offload", T::kBool, "false", "", false, O::kVerl,
       "As actor_rollout_ref.actor.fsdp_config.optimizer_offload, for the critic."},
      {"critic.model.fsdp_config.param_offload", T::kBool, "false", "", false, O::kVerl,
       "As actor_rollout_ref.actor.fsdp_config.param_offload (only false is accepted), for the critic."},
      {"critic.optim.lr", T::kDouble, "1e-5", "", false, O::kVerl, "Critic learning rate."},
      {"critic.optim.weight_decay", T::kDouble, "0.01", "", false, O::kVerl, "Critic AdamW weight decay."},
      {"critic.optim.betas", T::kDoubleList, "[0.9, 0.999]", "", false, O::kVerl, "Critic AdamW betas."},
      {"critic.optim.eps", T::kDouble, "1e-8", "", false, O::kOurs, "Critic AdamW epsilon."},
      {"critic.optim.lr_warmup_steps", T::kInt, "-1", "", false, O::kVerl,
       "Critic warmup steps; -1 uses critic.optim.lr_warmup_steps_ratio."},
      {"critic.optim.lr_warmup_steps_ratio", T::kDouble, "0.0", "", false, O::kVerl,
       "Critic warmup, as a fraction of the total steps."},
      {"critic.optim.lr_scheduler_type", T::kString, "constant", "constant|cosine", false, O::kVerl,
       "Critic learning rate after the warm-up: constant, or cosine (from lr down to min_lr_ratio x lr over the run's remaining steps, num_cycles waves)."},
      {"critic.optim.warmup_style", T::kString, "null", "|constant|cosine", false, O::kVerl,
       "Deprecated in verl in favour of lr_scheduler_type: when set, it is the schedule, whatever lr_scheduler_type says (verl's rule)."},
      {"critic.optim.min_lr_ratio", T::kDouble, "0.0", "", false, O::kVerl,
       "cosine: the floor of the schedule as a fraction of lr, in [0, 1]."},
      {"critic.optim.num_cycles", T::kDouble, "0.5", "", false, O::kVerl,
       "cosine: waves of the cosine over the steps after the warm-up (0.5: one fall from lr to the floor), >= 0."},
      {"critic.ppo_mini_batch_size", T::kInt, "${actor_rollout_ref.actor.ppo_mini_batch_size}", "", false, O::kVerl,
       "Prompts per critic optimizer step."},
      {"critic.ppo_micro_batch_size_per_gpu", T::kOptionalInt, "null", "", false, O::kVerl,
       "Samples per critic forward/backward; null means the whole mini-batch."},
      {"critic.forward_micro_batch_size_per_gpu", T::kOptionalInt, "${critic.ppo_micro_batch_size_per_gpu}", "",
       false, O::kVerl,
       "Samples per forward pass when computing values; null means the whole batch of the rank."},
      {"critic.use_dynamic_bsz", T::kBool, "${actor_rollout_ref.actor.use_dynamic_bsz}", "", false, O::kVerl,
       "Critic passes cut by token budgets (ppo_max_token_len_per_gpu, forward_max_token_len_per_gpu), as the actor's."},
      {"critic.ppo_max_token_len_per_gpu", T::kInt, "32768", "", false, O::kVerl,
       "With use_dynamic_bsz: the most tokens per critic forward/backward pass on a rank."},
      {"critic.forward_max_token_len_per_gpu", T::kInt, "${critic.ppo_max_token_len_per_gpu}", "", false, O::kVerl,
       "With use_dynamic_bsz: the most tokens per forward pass when computing values."},
      {"critic.ppo_epochs", T::kInt, "${actor_rollout_ref.actor.ppo_epochs}", "", false, O::kVerl,
       "Passes over each step's batch in the critic update."},
      {"critic.shuffle", T::kBool, "${actor_rollout_ref.actor.shuffle}", "", false, O::kVerl,
       "Shuffle samples between critic mini-batches."},
      {"critic.shard_optimizer_state", T::kBool, "${actor_rollout_ref.actor.shard_optimizer_state}", "", false,
       O::kOurs, "As actor_rollout_ref.actor.shard_optimizer_state, for the critic."},
      {"critic.grad_clip", T::kDouble, "1.0", "", false, O::kVerl, "Critic gradient clipping by global norm."},
      {"critic.cliprange_value", T::kDouble, "0.5", "", false, O::kVerl, "Value clipping range."},
      {"critic.loss_agg_mode", T::kString, "${actor_rollout_ref.actor.loss_agg_mode}",
       "token-mean|seq-mean-token-sum|seq-mean-token-mean|seq-mean-token-sum-norm", false, O::kVerl,
       "Aggregation of the value loss."},

      // ---- trainer ----
      {"trainer.project_name", T::kString, "verl_examples", "", false, O::kVerl, "Project name (paths, loggers)."},
      {"trainer.experiment_name", T::kString, "gsm8k", "", false, O::kVerl, "Experiment name (paths, loggers)."},
      {"trainer.logger", T::kStringList, "[console, jsonl]", "console|jsonl|file|tensorboard|prometheus", false,
       O::kVerlChanged,
       "Metric sinks (verl: [console, wandb]); jsonl writes <trainer.log_dir>/metrics.jsonl; file is verl's file "
       "logger (the same lines at $VERL_FILE_LOGGER_PATH, else ${VERL_FILE_LOGGER_ROOT:-.}/<project_name>/"
       "<experiment_name>.jsonl); prometheus serves /metrics on trainer.prometheus_listen."},
      {"trainer.prometheus_listen", T::kString, "\"127.0.0.1:9400\"", "", false, O::kOurs,
       "host:port of the controller's Prometheus /metrics endpoint when trainer.logger has prometheus (\":9400\" for "
       "every interface, port 0 for any free port)."},
      {"trainer.nnodes", T::kInt, "1", "", false, O::kVerl, "Number of worker nodes."},
      {"trainer.n_gpus_per_node", T::kInt, "1", "", false, O::kVerlChanged,
       "Ranks per node: GPUs, or CPU slots when trainer.device=cpu (verl: 8)."},
      {"trainer.device", T::kString, "cpu", "cpu|cuda", false, O::kVerlChanged,
       "Device of the ranks (verl: cuda)."},
      {"trainer.total_epochs", T::kInt, "30", "", false, O::kVerl, "Passes over the training set."},
      {"trainer.total_training_steps", T::kOptionalInt, "null", "", false, O::kVerl,
       "Stop after this many steps; null derives it from total_epochs and the dataset size."},
      {"trainer.save_freq", T::kInt, "-1", "", false, O::kVerl,
       "Checkpoint every N steps (and at the end); -1 disables periodic checkpoints."},
      {"trainer.test_freq", T::kInt, "-1", "", false, O::kVerl, "Validate every N steps; -1 disables."},
      {"trainer.val_before_train", T::kBool, "true", "", false, O::kVerl, "Validate once before the first step."},
      {"trainer.log_val_generations", T::kInt, "0", "", false, O::kVerl,
       "At each validation, log this many (input, output, score) samples as TensorBoard text 'val/generations' "
       "(verl's choice: sorted by input, shuffled with numpy's RandomState(42), the first N); only the tensorboard "
       "logger shows them, as in verl. 0: none."},
      {"trainer.critic_warmup", T::kInt, "0", "", false, O::kVerl,
       "Steps that update only the critic before the actor starts updating."},
      {"trainer.default_local_dir", T::kString, "checkpoints/${trainer.project_name}/${trainer.experiment_name}", "",
       false, O::kVerl, "Checkpoint directory."},
      {"trainer.max_actor_ckpt_to_keep", T::kOptionalInt, "null", "", false, O::kVerl, "Keep at most this many global_step_N checkpoints (older ones are deleted after a newer one is complete); null keeps all."},
      {"trainer.max_critic_ckpt_to_keep", T::kOptionalInt, "null", "", false, O::kVerl, "As trainer.max_actor_ckpt_to_keep for the critic; actor and critic share each global_step_N directory, so a directory is deleted only when both limits allow it."},
      {"trainer.resume_mode", T::kString, "auto", "auto|disable|resume_path", false, O::kVerl,
       "auto: resume from the latest checkpoint in default_local_dir; resume_path: from resume_from_path."},
      {"trainer.resume_from_path", T::kString, "\"\"", "", false, O::kVerl,
       "Checkpoint (global_step_N directory) to resume from when resume_mode=resume_path."},
      {"trainer.rollout_data_dir", T::kString, "\"\"", "", false, O::kVerl,
       "If set, dump each step's prompts, responses and scores as jsonl here."},
      {"trainer.log_dir", T::kString, "outputs/${trainer.project_name}/${trainer.experiment_name}", "", false,
       O::kOurs, "Directory of metrics.jsonl and the controller log."},
      {"trainer.seed", T::kInt, "1", "", false, O::kOurs, "Seed of sampling and weight initialization."},

      // ---- cluster ----
      {"cluster.worker_addresses", T::kStringList, "[]", "", false, O::kOurs,
       "host:port of running verl-worker daemons, one per node (trainer.nnodes), each started with --ranks "
       "trainer.n_gpus_per_node; empty starts local workers."},
      {"cluster.comm_backend", T::kString, "auto", "auto|host", false, O::kOurs, "Collectives between ranks: auto uses NCCL when every rank is on a GPU of a worker built with NCCL, else the host (TCP) backend; host forces the host backend."},
      {"cluster.comm_timeout_s", T::kDouble, "600.0", "", false, O::kOurs,
       "Deadline of every collective between ranks (gradient all-reduce, batch statistics), in seconds; a rank that "
       "stops answering turns into an error naming it within this time."},
      {"cluster.worker_binary", T::kString, "\"\"", "", false, O::kOurs,
       "verl-worker executable for local workers; empty means the one next to the controller."},
      {"cluster.num_threads_per_rank", T::kInt, "0", "", false, O::kOurs,
       "CPU threads per rank (intra-op); 0 uses all cores divided among the local ranks."},
      {"cluster.rpc_timeout_s", T::kDouble, "600.0", "", false, O::kOurs,
       "Deadline of a worker RPC, in seconds."},
      {"cluster.heartbeat_interval_s", T::kDouble, "2.0", "", false, O::kOurs,
       "How often the controller checks that each worker still answers (Health), in seconds."},
      {"cluster.heartbeat_timeout_s", T::kDouble, "10.0", "", false, O::kOurs,
       "A worker that does not answer a heartbeat within this many seconds is treated as failed."},
      {"cluster.max_worker_restarts", T::kInt, "3", "", false, O::kOurs,
       "Recoveries from a failed worker (a local one restarted, a listed one replaced) from the last checkpoint of "
       "this run, at most this many times."},
      {"cluster.worker_replacement_timeout_s", T::kDouble, "600.0", "", false, O::kOurs,
       "When a worker of cluster.worker_addresses fails, how long to wait for a replacement to answer at the same "
       "address (e.g. its pod restarting) before the job fails, in seconds."},
      {"cluster.worker_start_timeout_s", T::kDouble, "60.0", "", false, O::kOurs,
       "How long to wait for a local worker to come up, in seconds."},
      {"resource_pool.critic_ranks", T::kInt, "0", "", false, O::kOurs,
       "Ranks given to the critic alone (split placement; needs a critic, algorithm.adv_estimator=gae): as many as the actor's, placed after them; each holds the rows of its actor rank, computes values and updates the critic, while values and returns move rank to rank and the critic's update runs alongside the actor's. 0: the critic on the actor's ranks."},
      {"resource_pool.rollout_ranks", T::kInt, "0", "", false, O::kOurs,
       "Ranks given to the rollout alone (split placement): the last this many of the trainer.nnodes * trainer.n_gpus_per_node ranks only generate and score, the others hold the actor, ref and critic and train; responses move rank to rank to the training ranks and the actor's weights back after each update. 0: every role on every rank (colocated, verl's hybrid engine: the rollout reads the actor's weights in place)."},
  };
  return *table;
}

std::string_view LastComponent(std::string_view key) {
  const size_t dot = key.rfind('.');
  return dot == std::string_view::npos ? key : key.substr(dot + 1);
}

}  // namespace

const std::vector<ConfigKeySpec>& ConfigSchema() { return Table(); }

const ConfigKeySpec* FindConfigKey(std::string_view key) {
  static const auto* index = [] {
    auto* m = new std::unordered_map<std::string_view, const ConfigKeySpec*>();
    for (const ConfigKeySpec& spec : Table()) (*m)[spec.key] = &spec;
    return m;
  }();
  auto it = index->find(key);
  return it == index->end() ? nullptr : it->second;
}

bool IsConfigSection(std::string_view prefix) {
  if (prefix.empty()) return true;
  for (const ConfigKeySpec& spec : Table()) {
    if (spec.key.size() > prefix.size() && spec.key.substr(0, prefix.size()) == prefix &&
        spec.key[prefix.size()] == '.') {
      return true;
    }
  }
  return false;
}

std::vector<std::string> AllowedValues(const ConfigKeySpec& spec) {
  std::vector<std::string> out;
  std::string_view rest = spec.allowed;
  while (!rest.empty()) {
    const size_t bar = rest.find('|');
    out.emplace_back(rest.substr(0, bar));
    if (bar == std::string_view::npos) break;
    rest.remove_prefix(bar + 1);
  }
  return out;
}

std::string_view ConfigTypeName(ConfigType type) {
  switch (type) {
    case ConfigType::kBool: return "bool";
    case ConfigType::kInt: return "int";
    case ConfigType::kDouble: return "double";
    case ConfigType::kString: return "string";
    case ConfigType::kStringList: return "string list";
    case ConfigType::kDoubleList: return "double list";
    case ConfigType::kOptionalInt: return "optional int (null allowed)";
    case ConfigType::kOptionalDouble: return "optional double (null allowed)";
  }
  return "unknown";
}

std::string_view ConfigOriginName(ConfigOrigin origin) {
  switch (origin) {
    case ConfigOrigin::kVerl: return "verl";
    case ConfigOrigin::kVerlChanged: return "verl (changed default)";
    case ConfigOrigin::kOurs: return "ours";
  }
  return "unknown";
}

int EditDistance(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diag = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string SuggestConfigKey(std::string_view key) {
  const std::string_view last = LastComponent(key);
  // Rank by (min(whole-key distance, last-component distance), whole-key distance): a typo anywhere in the path and a
  // right leaf name under the wrong section both find their key; ties go to the key closest as a whole.
  const ConfigKeySpec* best = nullptr;
  std::pair<int, int> best_score{std::numeric_limits<int>::max(), std::numeric_limits<int>::max()};
  for (const ConfigKeySpec& spec : Table()) {
    const int whole = EditDistance(key, spec.key);
    const int leaf = EditDistance(last, LastComponent(spec.key));
    const std::pair<int, int> score{std::min(whole, leaf), whole};
    if (score < best_score) {
      best_score = score;
      best = &spec;
    }
  }
  // Short names need a closer match, or "foo.bar" would suggest "algorithm.lam" (and "x.name" or "x.steps" would
  // suggest "algorithm.lam" or "critic.optim.eps" by their last components alone).
  const int threshold = std::max<int>(last.size() <= 5 ? 1 : 2, static_cast<int>(last.size()) / 3);
  if (best == nullptr || best_score.first > threshold) return "";
  return std::string(best->key);
}

std::string SuggestClosest(std::string_view value, const std::vector<std::string>& candidates) {
  const std::string* best = nullptr;
  int best_distance = std::numeric_limits<int>::max();
  for (const std::string& c : candidates) {
    const int d = EditDistance(value, c);
    if (d < best_distance) {
      best_distance = d;
      best = &c;
    }
  }
  const int threshold = std::max<int>(2, static_cast<int>(value.size()) / 3);
  if (best == nullptr || best_distance > threshold) return "";
  return *best;
}

}  // namespace verl

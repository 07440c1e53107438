// The CPU rank: LibTorch lives here, behind the wall described in rank_interface.h.

#include <ATen/Parallel.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#ifdef VERL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/reward/scorer_registry.h"
#include "common/status/status_macros.h"
#include "common/text/tokenizer.h"
#include "worker/checkpoint/actor_checkpoint.h"
#include "worker/model/decoder_model.h"
#include "worker/model/value_model.h"
#include "worker/rank/rank_interface.h"
#include "worker/rank/torch_util.h"
#include "worker/rollout/generator.h"
#include "worker/train/adamw.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/advantage.h"
#include "worker/train/core_algos.h"
#include "worker/train/flops.h"
#include "worker/train/policy_loss.h"
#include "worker/train/ppo_actor.h"
#include "worker/train/ppo_critic.h"

namespace verl {
namespace {

// The process's peak resident set (VmHWM), in GB; 0 when /proc is unreadable.
double PeakRssGb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) * 1024 / (1 << 30);  // kB
  }
  return 0;
}

// Everything a step keeps on the rank, from rollout to update.
struct StepBatch {
  std::vector<PromptInput> prompts;
  int32_t n = 1;
  RolloutBatch rollout;
  SequenceBatch seq;
  std::vector<std::string> row_uids;
  GenerateOutput generate_output;
  std::optional<ScoreOutput> score_output;
  at::Tensor token_level_rewards;
  at::Tensor old_log_probs;
  // Rows whose old log-probs the update's first mini-batch computes (ComputeLogProbs' defer_first_mini_batch), and the
  // update seed that chose them; undefined / unset when none were deferred.
  at::Tensor deferred_rows;
  std::optional<uint64_t> deferred_seed;
  at::Tensor ref_log_probs;
  at::Tensor advantages;
  at::Tensor returns;
  at::Tensor values;
  std::optional<RolloutBatch> baseline;  // ReMax greedy responses, one per prompt
  at::Tensor baseline_scores;            // [N], each prompt's baseline score repeated n times
  std::map<std::string, Metrics> log_prob_metrics;
  std::optional<Metrics> value_metrics;
  std::optional<Metrics> advantage_metrics;
  std::optional<Metrics> critic_update_metrics;
  std::optional<Metrics> update_metrics;
};

class CpuRank final : public RankInterface {
 public:
  explicit CpuRank(int32_t rank_id) : rank_id_(rank_id) {}

  absl::Status Configure(const RankConfig& config) override {
    for (const std::string& role : config.roles) {
      if (role != "actor" && role != "rollout" && role != "ref" && role != "critic") {
        return absl::InvalidArgumentError(
            absl::StrCat("rank ", rank_id_, ": unknown role '", role, "' (expected actor, rollout, ref or critic)"));
      }
    }
    if (config.dtype != "float32" && config.dtype != "bfloat16") {
      return absl::InvalidArgumentError(absl::StrCat("unsupported model dtype '", config.dtype, "'"));
    }
    if (config.device != "cpu" && config.device.rfind("cuda", 0) != 0) {
      return Error("Configure", absl::InvalidArgumentError(absl::StrCat("unknown device '", config.device,
                                                                        "' (expected cpu or cuda:N)")));
    }
    if (config.device != "cpu" && !at::hasCUDA()) {
      return Error("Configure", absl::FailedPreconditionError(absl::StrCat(
                                    "device ", config.device, ": this worker has no CUDA (built without "
                                    "VERL_WITH_CUDA, or no GPU visible)")));
    }
    ASSIGN_OR_RETURN(device_, CatchTorch(Context("Configure"), [&]() -> absl::StatusOr<at::Device> {
                       return at::Device(config.device);
                     }));
    peak_flops_.reset();
#ifdef VERL_WITH_CUDA
    if (device_.is_cuda()) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, device_.has_index() ? device_.index() : 0) == cudaSuccess) {
        peak_flops_ = PromisedFlops(prop.name);
      }
    }
#endif
    config_ = config;
    // A fresh start for this rank (a new job, or the same job set up again after another worker failed): nothing of
    // an earlier run may answer for a step id (a stored batch would make a retried UpdateActor a no-op) or count
    // towards the LR warm-up. LoadModel rebuilds the models and optimizers; the communicator, when there is one,
    // is replaced by InitCommunicator.
    batches_.clear();
    updates_done_ = 0;
    critic_updates_done_ = 0;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (config.world_size == 1) {  // a job of one rank: a group formed for an earlier job must not be used
        if (comm_) comm_->Abort();
        comm_.reset();
      }
    }
    if (config.num_threads > 0) at::set_num_threads(config.num_threads);
    // Tiny random weights produce subnormal floats, which are orders of magnitude slower on x86.
    at::globalContext().setFlushDenormal(true);
    return absl::OkStatus();
  }

  absl::Status SetCommunicator(std::unique_ptr<Communicator> comm, absl::Duration timeout) override {
    RETURN_IF_ERROR(Replace("SetCommunicator", std::move(comm), timeout, &comm_, &comm_timeout_));
    batches_.clear();
    ApplySharding();
    return absl::OkStatus();
  }

  DeviceMemory Memory() const override {
    DeviceMemory m;
    if (!device_.is_cuda()) return m;
    m.on_gpu = true;
    try {
      const auto stats = c10::getDeviceAllocator(device_.type())->getDeviceStats(device_.index());
      constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
      m.allocated = stats.allocated_bytes[kAggregate].current;
      m.reserved = stats.reserved_bytes[kAggregate].current;
      m.phase_peak_allocated = stats.allocated_bytes[kAggregate].peak;
      m.peak_allocated = std::max<int64_t>(stats.allocated_bytes[kAggregate].peak, lifetime_peak_allocated_.load());
      m.peak_reserved = std::max<int64_t>(stats.reserved_bytes[kAggregate].peak, lifetime_peak_reserved_.load());
      m.total = static_cast<int64_t>(c10::getDeviceAllocator(device_.type())->getMemoryInfo(device_.index()).second);
    } catch (const std::exception&) {
      // The caching allocator initialises at the device's first allocation and refuses ("Invalid device argument")
      // to report before: nothing is allocated yet.
    }
    return m;
  }

  // Starts a phase's peak-memory window on a GPU rank (DeviceMemory::phase_peak_allocated): the allocator's peak
  // restarts from what is allocated now, and the rank-lifetime peak is kept beside it.
  void StartMemoryPhase() {
    if (!device_.is_cuda()) return;
    const DeviceMemory m = Memory();
    lifetime_peak_allocated_ = m.peak_allocated;  // Memory() already took the larger of the two
    lifetime_peak_reserved_ = m.peak_reserved;
    try {
      c10::getDeviceAllocator(device_.type())->resetPeakStats(device_.index());
    } catch (const std::exception&) {
      // Not initialised yet: nothing allocated, no peak to reset.
    }
  }

  // On a GPU rank, the peak allocation since StartMemoryPhase as perf/<phase>_max_memory_allocated_gb (from `mem`
  // where the caller has just read it).
  void AddPhasePeak(const char* phase, Metrics& m, std::optional<DeviceMemory> mem = std::nullopt) const {
    if (!device_.is_cuda()) return;
    if (!mem) mem = Memory();
    m[absl::StrCat("perf/", phase, "_max_memory_allocated_gb")] =
        static_cast<double>(mem->phase_peak_allocated) / (1 << 30);
  }

  void OnPeerAborted(int failed_global_rank) override {
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (comm_) comm_->OnPeerAborted(failed_global_rank);
    if (transfer_comm_) transfer_comm_->OnPeerAborted(failed_global_rank);
  }

  void AbortCommunicator() override {
    if (comm_) comm_->Abort();
    if (transfer_comm_) transfer_comm_->Abort();
  }

  absl::Status SetTransferCommunicator(std::unique_ptr<Communicator> comm, absl::Duration timeout) override {
    return Replace("SetTransferCommunicator", std::move(comm), timeout, &transfer_comm_, &transfer_timeout_);
  }

  // Puts `comm` (with its collective `timeout`) in *slot under comm_mu_, aborting the communicator it replaces.
  absl::Status Replace(const std::string& stage, std::unique_ptr<Communicator> comm, absl::Duration timeout,
                       std::unique_ptr<Communicator>* slot, absl::Duration* slot_timeout) {
    if (comm == nullptr) return Error(stage, absl::InvalidArgumentError("no communicator"));
    if (timeout <= absl::ZeroDuration()) {
      return Error(stage, absl::InvalidArgumentError("the collective timeout must be positive"));
    }
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (*slot) (*slot)->Abort();
    *slot = std::move(comm);
    *slot_timeout = timeout;
    return absl::OkStatus();
  }

  absl::StatusOr<Metrics> SyncWeights(int64_t bucket_bytes) override {
    RETURN_IF_ERROR(RequireModel("SyncWeights"));
    if (!transfer_comm_) {
      return Error("SyncWeights", absl::FailedPreconditionError("no transfer group (the job's roles are colocated)"));
    }
    if (bucket_bytes <= 0) {
      return Error("SyncWeights", absl::InvalidArgumentError(absl::StrCat("bucket size ", bucket_bytes, " bytes")));
    }
    return CatchTorch(Context("SyncWeights"), [&]() -> absl::StatusOr<Metrics> {
      const auto start = std::chrono::steady_clock::now();
      at::NoGradGuard no_grad;
      const bool root = transfer_comm_->rank() == 0;  // the actor's group rank 0
      const bool receiver = actor_ && !HasRole("actor");  // a rollout-only rank
      std::optional<GatheredModel> gathered;  // a sharded actor: the whole of it, on every trainer
      if (actor_) gathered.emplace(*actor_, /*keep_changes=*/false);
      std::vector<at::Tensor> params;
      int64_t total = 0;
      if (actor_) {
        for (const auto& [name, t] : actor_->named_parameters()) {
          params.push_back(t);
          total += t.numel();
        }
      }
      // The size and dtype first, from the root: a rank without the actor (a critic-only rank) takes part in the
      // broadcasts without knowing the model. Like every buffer of the group, it lives where the communicator works
      // (device memory for NCCL).
      const at::Device where = CommDeviceOf(transfer_comm_.get());
      at::Tensor header =
          at::tensor({total, static_cast<int64_t>(params.empty() ? DType::kFloat32
                                                                 : FromScalarType(params.front().scalar_type()))},
                     at::kLong)
              .to(where);
      {
        if (header.is_cuda()) SyncDevice();
        absl::Status s = transfer_comm_->Broadcast(header.data_ptr(), 2, DType::kInt64, 0, transfer_timeout_);
        if (!s.ok()) throw StatusError(Annotate(s, "weight sync header"));
      }
      header = header.cpu();
      total = header[0].item<int64_t>();
      const at::ScalarType dtype = ToScalarType(static_cast<DType>(header[1].item<int64_t>()));
      if (total == 0) return Metrics{};
      const int64_t bucket_elements = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(c10::elementSize(dtype)));
      at::Tensor bucket = at::empty({std::min(bucket_elements, total)}, at::TensorOptions(dtype).device(where));
      int64_t buckets = 0;
      // The parameters, in order, as one stream of `total` elements cut into buckets (a large tensor spans several).
      for (int64_t offset = 0; offset < total; offset += bucket_elements, ++buckets) {
        const int64_t len = std::min(bucket_elements, total - offset);
        at::Tensor window = bucket.narrow(0, 0, len);
        ForEachOverlap(params, offset, len, [&](const at::Tensor& flat_part, int64_t at_in_window) {
          if (root) window.narrow(0, at_in_window, flat_part.numel()).copy_(flat_part);
        });
        if (window.is_cuda()) SyncDevice();
        absl::Status s = transfer_comm_->Broadcast(window.data_ptr(), len, FromScalarType(dtype), 0, transfer_timeout_);
        if (!s.ok()) throw StatusError(Annotate(s, absl::StrCat("weight bucket ", buckets)));
        if (receiver) {
          ForEachOverlap(params, offset, len, [&](at::Tensor flat_part, int64_t at_in_window) {
            flat_part.copy_(window.narrow(0, at_in_window, flat_part.numel()));
          });
        }
      }
      Metrics m;
      m["perf/weight_sync_gb"] = static_cast<double>(total * static_cast<int64_t>(c10::elementSize(dtype))) / (1 << 30);
      m["perf/weight_sync_buckets"] = static_cast<double>(buckets);
      m["timing_s/weight_sync"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return m;
    });
  }

  absl::StatusOr<Metrics> TransferColumn(const std::string& step_id, const std::string& column, int peer,
                                         bool send) override {
    ASSIGN_OR_RETURN(StepBatch * batch, Find("TransferColumn", step_id));
    if (!transfer_comm_) {
      return Error("TransferColumn", absl::FailedPreconditionError("no transfer group (the job's roles are colocated)"));
    }
    at::Tensor* slot = column == "values" ? &batch->values : column == "returns" ? &batch->returns : nullptr;
    if (slot == nullptr) {
      return Error("TransferColumn",
                   absl::InvalidArgumentError(absl::StrCat("unknown column '", column, "' (values or returns)")));
    }
    if (send && !slot->defined()) {
      return Error("TransferColumn", absl::FailedPreconditionError(absl::StrCat("step has no ", column, " yet")));
    }
    return CatchTorch(Context("TransferColumn/" + column), [&]() -> absl::StatusOr<Metrics> {
      const int64_t rows = batch->seq.size();
      if (send) {
        SendTensor(at::tensor({slot->size(0), slot->size(1)}, at::kLong), peer);
        SendTensor(slot->to(at::kFloat), peer);
        return Metrics{};
      }
      const at::Tensor shape = RecvTensor({2}, at::kLong, peer).cpu();
      if (shape[0].item<int64_t>() != rows) {
        throw StatusError(absl::InvalidArgumentError(absl::StrCat("transfer rank ", peer, " sent ", column, " for ",
                                                                  shape[0].item<int64_t>(), " rows, this rank holds ",
                                                                  rows)));
      }
      // Where the rank's own would be: values on the device (ComputeValues), returns on the host (ComputeAdvantage).
      *slot = RecvTensor({rows, shape[1].item<int64_t>()}, at::kFloat, peer)
                  .to(column == "values" ? device_ : at::Device(at::kCPU));
      return Metrics{};
    });
  }

  absl::StatusOr<Metrics> TransferBatch(const std::string& step_id, const TransferPlan& plan) override {
    RETURN_IF_ERROR(RequireModel("TransferBatch"));
    if (!transfer_comm_) {
      return Error("TransferBatch", absl::FailedPreconditionError("no transfer group (the job's roles are colocated)"));
    }
    if (plan.prompts.size() != plan.sources.size() || plan.n < 1) {
      return Error("TransferBatch", absl::InvalidArgumentError(absl::StrCat(
                                        plan.prompts.size(), " prompts with ", plan.sources.size(), " sources, n ",
                                        plan.n)));
    }
    StepBatch* sending = nullptr;
    if (!plan.sends.empty()) {
      ASSIGN_OR_RETURN(sending, Find("TransferBatch", step_id));
      if (!sending->token_level_rewards.defined()) {
        return Error("TransferBatch", absl::FailedPreconditionError("the step has not been scored"));
      }
    }
    if (!plan.prompts.empty() && batches_.count(step_id)) return Metrics{};  // received already (a retried call)
    return CatchTorch(Context("TransferBatch"), [&]() -> absl::StatusOr<Metrics> {
      int64_t bytes = 0;
      // Sends first (a rank either sends or receives in a plan from the controller).
      for (const auto& [peer, prompt_indices] : plan.sends) {
        std::vector<int64_t> rows;
        for (int64_t p : prompt_indices) {
          for (int32_t j = 0; j < sending->n; ++j) rows.push_back(p * sending->n + j);
        }
        const RolloutBatch& r = sending->rollout;
        const at::Tensor idx = at::tensor(rows, at::kLong);
        const at::Tensor idx_dev = idx.to(r.responses.device());
        const bool baseline = sending->baseline_scores.defined();
        SendTensor(at::tensor({static_cast<int64_t>(rows.size()), r.prompts.size(1), r.responses.size(1),
                               static_cast<int64_t>(baseline)},
                              at::kLong),
                   peer);
        for (const at::Tensor& t :
             {r.prompts.index_select(0, idx_dev), r.prompt_mask.index_select(0, idx_dev).to(at::kByte),
              r.responses.index_select(0, idx_dev), r.response_mask.index_select(0, idx_dev).to(at::kByte),
              r.log_probs.index_select(0, idx_dev), sending->token_level_rewards.index_select(0, idx)}) {
          SendTensor(t, peer);
          bytes += t.numel() * t.element_size();
        }
        if (baseline) SendTensor(sending->baseline_scores.index_select(0, idx), peer);
      }
      if (!plan.prompts.empty()) batches_[step_id] = ReceiveRows(plan, &bytes);
      Metrics m;
      m["perf/transfer_batch_mb"] = static_cast<double>(bytes) / (1 << 20);
      return m;
    });
  }

  absl::StatusOr<LoadModelOutput> LoadModel() override {
    if (config_.model_path.empty()) return Error("LoadModel", absl::FailedPreconditionError("roles not configured"));
    return CatchTorch(Context("LoadModel"), [&]() -> absl::StatusOr<LoadModelOutput> {
      const at::ScalarType dtype = config_.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
      // Load errors carry the rank and the role, as every other error of this interface does. A critic-only rank
      // (split placement) loads neither the actor nor the tokenizer.
      actor_.reset();
      ref_.reset();
      critic_.reset();
      critic_optimizer_.reset();
      optimizer_.reset();
      tokenizer_.reset();
      if (HasRole("actor") || HasRole("rollout")) {
        auto actor = DecoderModel::Load(config_.model_path, dtype, device_);
        if (!actor.ok()) return Error("LoadModel/actor", actor.status());
        actor_ = std::move(*actor);
        actor_->SetRequiresGrad(false);
        actor_->SetGradientCheckpointing(config_.actor.gradient_checkpointing, config_.actor.recompute_num_layers,
                                         config_.actor.recompute_keep_projections);
      }
      if (HasRole("ref")) {
        auto ref = DecoderModel::Load(config_.model_path, dtype, device_);
        if (!ref.ok()) return Error("LoadModel/ref", ref.status());
        ref_ = std::move(*ref);
        ref_->SetRequiresGrad(false);
      }
      if (HasRole("critic")) {
        const RankCriticSettings& c = config_.critic;
        auto critic = ValueModel::Load(c.model_path, dtype, config_.seed, device_);
        if (!critic.ok()) return Error("LoadModel/critic", critic.status());
        critic_ = std::move(*critic);
        critic_->SetRequiresGrad(false);
        critic_->SetGradientCheckpointing(c.gradient_checkpointing, c.recompute_num_layers,
                                          c.recompute_keep_projections);
        critic_optimizer_ = std::make_unique<AdamW>(
            critic_->named_parameters(),
            AdamWOptions{c.lr, c.weight_decay, c.beta1, c.beta2, c.eps, c.optimizer_offload});
      }
      // A rollout-only rank (split placement) holds the actor's weights to generate with, and no optimizer.
      if (HasRole("actor")) optimizer_ = std::make_unique<AdamW>(actor_->named_parameters(), ActorOptimizerOptions());
      ApplySharding();
      // verl's ref param_offload: the ref's weights (shards) wait in pinned host memory between its passes. On a CPU
      // rank they are in host memory already.
      if (ref_ && config_.actor.ref_param_offload && device_.is_cuda()) {
        if (absl::Status s = ref_->OffloadParameters(); !s.ok()) return Error("LoadModel/ref", s);
      }
      if (!actor_) {
        const DecoderModel& d = critic_->decoder();
        return LoadModelOutput{d.num_parameters(), static_cast<int32_t>(d.config().vocab_size)};
      }
      auto tok = Tokenizer::FromFile(config_.model_path + "/tokenizer.json");
      if (!tok.ok()) return Error("LoadModel/tokenizer", tok.status());
      tokenizer_ = std::make_unique<Tokenizer>(std::move(*tok));
      auto clean_up = ReadCleanUpTokenizationSpaces(config_.model_path + "/tokenizer_config.json");
      if (!clean_up.ok()) return Error("LoadModel/tokenizer", clean_up.status());
      clean_up_tokenization_spaces_ = *clean_up;
      return LoadModelOutput{actor_->num_parameters(), static_cast<int32_t>(actor_->config().vocab_size)};
    });
  }

  // The rollout's KV cache slots (static passes layer by layer: rows a pass): rollout.max_num_seqs, and on a GPU what
  // fits in rollout.gpu_memory_utilization of the device beside what is allocated already (the whole actor gathered,
  // for a sharded one; layer by layer, the largest unit held gathered), the folded weights the rollout will make, its
  // sampling memory (a row of logits per slot), its activations (continuous batching: a decoding step's per slot
  // and the largest prefill, PrefillBytes; layer by layer, each row's prefill) and the batches it returns (with
  // `baseline`, the greedy baseline's too). The folded weights (opts->fold_input_norms, fold_post_attention_norms)
  // are made only where they cost none of the slots the rollout's sequences would use; otherwise the options are
  // turned off here. Too little room for one sequence (layer by layer: one prompt's n samples) is ResourceExhausted,
  // naming the key.
  absl::StatusOr<int32_t> RolloutSlots(const std::vector<PromptInput>& prompts, bool baseline,
                                       SamplingOptions* opts) const {
    const int32_t max_seqs = std::max(1, config_.actor.rollout_max_num_seqs);
    const DeviceMemory mem = Memory();
    if (!mem.on_gpu || mem.total <= 0) return max_seqs;
    size_t longest = 0;
    for (const PromptInput& p : prompts) longest = std::max(longest, p.token_ids.size());
    const at::ScalarType dtype = actor_->trainable_parameters().front().second.scalar_type();
    const int64_t count = static_cast<int64_t>(prompts.size());
    const int64_t wanted = std::min<int64_t>(max_seqs, count * opts->n);
    // The batches returned (the greedy baseline's beside the rollout's; static passes: the passes' and their
    // concatenation).
    const int64_t outputs = (opts->lockstep ? 2 : 1) * RolloutOutputBytes(count * (opts->n + (baseline ? 1 : 0)),
                                                                          static_cast<int64_t>(longest),
                                                                          opts->max_new_tokens);
    // A slot's cache and its row of a decoding step's logits (the fused sampler needs nothing more, filters included).
    int64_t slot = KvSlotBytes(actor_->config(), dtype, static_cast<int64_t>(longest) + opts->max_new_tokens) +
                   SamplingRowBytes(actor_->config().vocab_size, static_cast<int64_t>(c10::elementSize(dtype)));
    double available = config_.actor.rollout_gpu_memory_utilization * static_cast<double>(mem.total) -
                       static_cast<double>(mem.allocated) -
                       static_cast<double>(outputs);
    int64_t prefill = 0;
    if (opts->lockstep) {
      // Layer by layer (static passes): each row's prefill too, and the largest unit gathered at a time.
      slot += StaticRowBytes(actor_->config(), dtype, static_cast<int64_t>(longest));
      available -= static_cast<double>(LayerByLayerGatherBytes(actor_->config(), dtype));
    } else {
      // Continuous batching: a decoding step's activations per slot (its CUDA graphs keep them in their pool), and
      // the largest prefill a pass of max_num_batched_tokens makes beside them.
      slot += ForwardTokenBytes(actor_->config(), dtype);
      std::vector<int64_t> lengths;
      for (const PromptInput& p : prompts) lengths.push_back(static_cast<int64_t>(p.token_ids.size()));
      prefill =
          PrefillBytes(actor_->config(), dtype, std::move(lengths), opts->n, opts->max_num_batched_tokens, wanted,
                       opts->chunked_prefill);
      available -= static_cast<double>(prefill);
    }
    // The folded q/k/v (and gate/up) weights decoding makes for this rollout count against the budget too, where they
    // are made (not layer by layer: the decode kernel needs the whole model) and cost no slot.
    const int64_t qkv_copy = FoldedQkvBytes(actor_->config(), dtype);
    const int64_t gate_up_copy = FoldedGateUpBytes(actor_->config(), dtype);
    int64_t folded = 0;
    opts->fold_input_norms = opts->fold_input_norms && !opts->lockstep && actor_->InputNormsFoldable() &&
                             FoldCostsNoSlots(available, 0, qkv_copy, slot, wanted);
    if (opts->fold_input_norms) folded = qkv_copy;
    opts->fold_post_attention_norms = opts->fold_input_norms && opts->fold_post_attention_norms &&
                                      actor_->PostAttentionNormsFoldable() &&
                                      FoldCostsNoSlots(available, folded, gate_up_copy, slot, wanted);
    if (opts->fold_post_attention_norms) folded += gate_up_copy;
    const double budget = available - static_cast<double>(folded);
    // Static passes decode a prompt's n samples together; continuous batching needs one slot.
    const int64_t rows = opts->lockstep ? std::max(1, opts->n) : 1;
    if (budget < static_cast<double>(rows * slot)) {
      return Error("Generate", absl::ResourceExhaustedError(absl::StrCat(
                                   "actor_rollout_ref.rollout.gpu_memory_utilization ",
                                   config_.actor.rollout_gpu_memory_utilization, " of ", mem.total >> 20,
                                   " MiB leaves ", std::max<int64_t>(0, static_cast<int64_t>(budget)) >> 20,
                                   " MiB for the KV cache beside the ", mem.allocated >> 20, " MiB allocated",
                                   folded > 0 ? absl::StrCat(" and ", folded >> 20, " MiB of folded weights") : "",
                                   opts->lockstep
                                       ? " and a layer gathered (actor_rollout_ref.rollout.gather_layer_by_layer)"
                                       : absl::StrCat(" and ", prefill >> 20,
                                                      " MiB for a prefill (rollout.max_num_batched_tokens",
                                                      opts->chunked_prefill
                                                          ? ")"
                                                          : "; rollout.enable_chunked_prefill is off)"),
                                   rows > 1 ? absl::StrCat("; a pass of one prompt's ", rows, " samples of ")
                                            : std::string("; one sequence of "),
                                   longest, " + ", opts->max_new_tokens, " tokens needs ", (rows * slot) >> 20,
                                   " MiB: raise it")));
    }
    return static_cast<int32_t>(std::min<double>(max_seqs, budget / static_cast<double>(slot)));
  }

  // Generate's checks of its inputs, made before any collective: the first problem, named.
  absl::Status CheckGenerateInputs(const std::vector<PromptInput>& prompts, const SamplingSettings& sampling) const {
    // Ids outside the vocabulary would index past the embedding table: an error on the CPU, a device-side assert that
    // poisons the whole CUDA context on a GPU. Refuse them here, naming where they are.
    const int64_t vocab = actor_->config().vocab_size;
    auto out_of_vocab = [vocab](int64_t id) { return id < 0 || id >= vocab; };
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (prompts[i].token_ids.empty()) {
        return Error("Generate", absl::InvalidArgumentError(absl::StrCat("prompt ", i, " is empty")));
      }
      for (size_t p = 0; p < prompts[i].token_ids.size(); ++p) {
        if (out_of_vocab(prompts[i].token_ids[p])) {
          return Error("Generate", absl::InvalidArgumentError(absl::StrCat(
                                       "prompt ", i, ": token id ", prompts[i].token_ids[p], " at position ", p,
                                       " is outside the vocabulary [0, ", vocab, ")")));
        }
      }
    }
    if (out_of_vocab(sampling.pad_token_id)) {
      return Error("Generate", absl::InvalidArgumentError(absl::StrCat("pad_token_id ", sampling.pad_token_id,
                                                                       " is outside the vocabulary [0, ", vocab, ")")));
    }
    // n 0 is a request that leaves n out (one sample); a NaN temperature fails `>= 0` (the samplers would take it as
    // no scaling, temperature 1).
    if (sampling.max_new_tokens < 0 || sampling.n < 0 || !(sampling.temperature >= 0)) {
      return Error("Generate", absl::InvalidArgumentError(absl::StrCat(
                                   "bad sampling settings: max_new_tokens ", sampling.max_new_tokens, ", n ", sampling.n,
                                   ", temperature ", sampling.temperature)));
    }
    // As the job config: a request that leaves top_p out (0 in the protocol) would otherwise decode greedily unasked.
    if (!(sampling.top_p > 0 && sampling.top_p <= 1)) {
      return Error("Generate", absl::InvalidArgumentError(absl::StrCat(
                                   "top_p must lie in (0, 1] (1: no filter; for greedy decoding set do_sample false), got ",
                                   sampling.top_p)));
    }
    // Temperature 0 means plain logits to the samplers, so sampling at 0 would draw at temperature 1 (the job config
    // refuses it as well; this is for callers of the WorkerService itself).
    if (sampling.do_sample && sampling.temperature == 0) {
      return Error("Generate", absl::InvalidArgumentError(
                                   "temperature 0 with do_sample: sampling needs a temperature > 0 (for greedy decoding "
                                   "set do_sample false)"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<GenerateOutput> Generate(const std::string& step_id, const std::vector<PromptInput>& prompts,
                                          const SamplingSettings& sampling, bool greedy_baseline) override {
    if (auto it = batches_.find(step_id); it != batches_.end()) return it->second.generate_output;
    RETURN_IF_ERROR(RequireRollout("Generate"));
    const bool per_layer = actor_->sharded() && config_.actor.rollout_gather_layer_by_layer;
    if (absl::Status inputs = CheckGenerateInputs(prompts, sampling); !inputs.ok()) {
      // Layer by layer the peers are about to agree on their passes: they learn of the failure there (the third
      // count) instead of waiting for passes that will not come.
      if (per_layer) {
        (void)CatchTorch(Context("Generate"), [&]() -> absl::StatusOr<int> {
          GroupMax({0, 0, 1});
          return 0;
        });
      }
      return inputs;
    }
    if (prompts.empty() && actor_->sharded()) {
      // A rank without prompts (a validation round smaller than the group) still makes the sharded actor's gathers:
      // the whole-actor gather, or, layer by layer, as many forward passes as its peers (a dummy prompt, lockstep).
      return CatchTorch(Context("Generate"), [&]() -> absl::StatusOr<GenerateOutput> {
        std::optional<GatheredModel> gathered;
        if (!per_layer) gathered.emplace(*actor_, /*keep_changes=*/false);
        if (per_layer) {
          // As many static passes as the group's busiest rank makes, each over a dummy prompt.
          const std::vector<int64_t> passes = GroupMax({0, 0, 0});
          if (passes[2] != 0) return PeerCannotGenerate();
          SamplingOptions dummy;
          dummy.max_new_tokens = sampling.max_new_tokens;
          dummy.pad_token_id = sampling.pad_token_id;
          dummy.do_sample = false;
          dummy.lockstep = true;
          dummy.lockstep_passes = passes[0];
          (void)verl::Generate(*actor_, {}, dummy);
          if (greedy_baseline) {
            dummy.lockstep_passes = passes[1];
            (void)verl::Generate(*actor_, {}, dummy);
          }
        }
        return GenerateOutput{};
      });
    }
    if (prompts.empty()) return Error("Generate", absl::InvalidArgumentError("no prompts"));
    const std::string memory_keys =
        "actor_rollout_ref.rollout.gpu_memory_utilization (the KV cache's share), max_num_seqs, "
        "max_num_batched_tokens, enable_chunked_prefill";
    return CatchTorch(Context("Generate"), memory_keys, [&]() -> absl::StatusOr<GenerateOutput> {
      StartMemoryPhase();
      SamplingOptions opts;
      opts.temperature = sampling.temperature;
      opts.top_k = sampling.top_k;
      opts.top_p = sampling.top_p;
      opts.do_sample = sampling.do_sample;
      opts.n = std::max(1, sampling.n);
      opts.max_new_tokens = sampling.max_new_tokens;
      if (!sampling.ignore_eos) opts.eos_token_ids = sampling.eos_token_ids;  // ignored: no token ends a response
      opts.pad_token_id = sampling.pad_token_id;
      opts.seed = sampling.seed;
      opts.lockstep = per_layer;
      opts.enforce_eager = config_.actor.rollout_enforce_eager;
      opts.prompt_sharing = config_.actor.rollout_share_prompts ? PromptSharing::kAuto : PromptSharing::kOff;
      opts.max_num_batched_tokens = config_.actor.rollout_max_num_batched_tokens;
      opts.chunked_prefill = config_.actor.rollout_chunked_prefill;
      for (size_t i = 0; i < prompts.size(); ++i) {
        opts.prompt_keys.push_back(
            static_cast<uint64_t>(prompts[i].sample_index >= 0 ? prompts[i].sample_index : static_cast<int64_t>(i)));
      }
      StepBatch batch;
      batch.prompts = prompts;
      batch.n = opts.n;
      {
        // A sharded actor is gathered whole for the rollout and dropped again after, unless asked to gather layer by
        // layer (every layer for every token: memory-lean, slow).
        std::optional<GatheredModel> gathered;
        if (!config_.actor.rollout_gather_layer_by_layer) gathered.emplace(*actor_, /*keep_changes=*/false);
        absl::StatusOr<int32_t> slots = RolloutSlots(prompts, greedy_baseline, &opts);
        std::vector<int64_t> passes;
        if (per_layer) {
          // Static passes of what fits, as many on every rank of the group (the peers' gathers pair with ours); a
          // rank that cannot run its passes says so in the same reduction, and none starts.
          const int64_t count = static_cast<int64_t>(prompts.size());
          passes = GroupMax({slots.ok() ? StaticPasses(count, opts.n, *slots) : 0,
                             slots.ok() && greedy_baseline ? StaticPasses(count, 1, *slots) : 0, slots.ok() ? 0 : 1});
          if (slots.ok() && passes[2] != 0) return PeerCannotGenerate();
        }
        ASSIGN_OR_RETURN(opts.max_num_seqs, std::move(slots));
        SamplingOptions greedy = opts;
        greedy.do_sample = false;
        greedy.n = 1;
        if (per_layer) {
          opts.lockstep_passes = passes[0];
          greedy.lockstep_passes = passes[1];
        }
        batch.rollout = verl::Generate(*actor_, ToTokenLists(prompts), opts);
        if (greedy_baseline) batch.baseline = verl::Generate(*actor_, ToTokenLists(prompts), greedy);
      }
      const RolloutBatch& r = batch.rollout;
      // With host copies (one read-back), from which every pass over the batch is planned (SequenceBatch).
      batch.seq = WithHostCopies({at::cat({r.prompts, r.responses}, 1), at::cat({r.prompt_mask, r.response_mask}, 1),
                                  r.responses, r.response_mask});
      for (const PromptInput& p : prompts) {
        for (int32_t j = 0; j < opts.n; ++j) batch.row_uids.push_back(p.uid);
      }
      GenerateOutput out;
      out.responses = ToHostTensor(r.responses.to(at::kInt));
      at::Tensor resp_len = r.response_mask.sum(1).to(at::kInt).cpu().contiguous();
      at::Tensor prompt_len = r.prompt_mask.sum(1).to(at::kInt).cpu().contiguous();
      out.response_lengths.assign(resp_len.data_ptr<int32_t>(), resp_len.data_ptr<int32_t>() + resp_len.numel());
      out.prompt_lengths.assign(prompt_len.data_ptr<int32_t>(), prompt_len.data_ptr<int32_t>() + prompt_len.numel());
      at::Tensor mask = r.response_mask.to(at::kFloat);
      out.metrics["rollout/log_prob/mean"] = MaskedMean(r.log_probs, mask).item<double>();
      // The rollout's KV cache (continuous batching: slots x the longest prompt + max_new_tokens; static: the rows of
      // its largest pass).
      const int64_t rows = r.responses.size(0);
      const int64_t slots = std::min<int64_t>(
          rows, opts.lockstep ? StaticPassPrompts(opts.n, opts.max_num_seqs) * opts.n : opts.max_num_seqs);
      out.metrics["perf/rollout_kv_cache_slots"] = static_cast<double>(slots);
      if (opts.lockstep) out.metrics["perf/rollout_static_passes"] = static_cast<double>(r.static_passes);
      if (r.prefill_chunks > 0) out.metrics["perf/rollout_prefill_chunks"] = static_cast<double>(r.prefill_chunks);
      out.metrics["perf/rollout_kv_cache_gb"] =
          static_cast<double>(slots * KvSlotBytes(actor_->config(),
                                                  actor_->trainable_parameters().front().second.scalar_type(),
                                                  r.prompts.size(1) + opts.max_new_tokens)) /
          (1 << 30);
      if (device_.is_cuda()) {
        AddPhasePeak("rollout", out.metrics);
        // The copies of the q/k/v and gate/up weights with the norms folded in (RolloutSlots makes each only where it
        // costs no KV slot).
        out.metrics["perf/rollout_folded_weights_gb"] = static_cast<double>(r.folded_weight_bytes) / (1 << 30);
      }
      batch.generate_output = out;
      batches_[step_id] = std::move(batch);
      return out;
    });
  }

  absl::StatusOr<ScoreOutput> Score(const std::string& step_id) override {
    RETURN_IF_ERROR(RequireRollout("Score"));
    ASSIGN_OR_RETURN(StepBatch * batch, Find("Score", step_id));
    if (batch->score_output) return *batch->score_output;
    return CatchTorch(Context("Score"), [&]() -> absl::StatusOr<ScoreOutput> {
      const RolloutBatch& r = batch->rollout;
      const int64_t N = r.responses.size(0);
      ScoreOutput out;
      at::Tensor rewards = at::zeros({N, r.responses.size(1)}, at::kFloat);
      auto reward_at = rewards.accessor<float, 2>();
      const at::Tensor responses = r.responses.cpu().contiguous();
      const auto& lengths = batch->generate_output.response_lengths;
      for (int64_t i = 0; i < N; ++i) {
        const PromptInput& p = batch->prompts[i / batch->n];
        auto scored = DecodeAndScore(responses, i, lengths[i], p);
        if (!scored.ok()) {
          return Error("Score", Annotate(scored.status(), absl::StrCat("scoring sample ", i, " (uid ", p.uid, ")")));
        }
        out.scores.push_back(scored->second);
        out.response_texts.push_back(std::move(scored->first));
        if (lengths[i] > 0) reward_at[i][lengths[i] - 1] = static_cast<float>(scored->second);
      }
      batch->token_level_rewards = rewards;
      if (batch->baseline) {
        const at::Tensor base = batch->baseline->responses.cpu().contiguous();
        const at::Tensor base_len = batch->baseline->response_mask.sum(1).cpu().contiguous();
        std::vector<float> scores(N);
        for (size_t p = 0; p < batch->prompts.size(); ++p) {
          auto scored = DecodeAndScore(base, p, base_len.data_ptr<int64_t>()[p], batch->prompts[p]);
          if (!scored.ok()) return Error("Score", Annotate(scored.status(), "scoring the greedy baseline"));
          for (int32_t j = 0; j < batch->n; ++j) scores[p * batch->n + j] = static_cast<float>(scored->second);
        }
        batch->baseline_scores = at::tensor(scores);
      }
      batch->score_output = out;
      return out;
    });
  }

  using RankInterface::ComputeLogProbs;
  absl::StatusOr<Metrics> ComputeLogProbs(const std::string& step_id, const std::string& role, double temperature,
                                          const LogProbPass& pass) override {
    ASSIGN_OR_RETURN(StepBatch * batch, Find("ComputeLogProbs", step_id));
    if (auto it = batch->log_prob_metrics.find(role); it != batch->log_prob_metrics.end()) return it->second;
    const DecoderModel* model = nullptr;
    if (role == "actor") model = actor_.get();
    if (role == "ref") model = ref_.get();
    if (model == nullptr) {
      return Error("ComputeLogProbs",
                   absl::FailedPreconditionError(absl::StrCat("role '", role, "' is not placed on this rank")));
    }
    RETURN_IF_ERROR(RequirePositiveTemperature("ComputeLogProbs", temperature));
    if (pass.from_rollout) {  // bypass mode: the rollout's log-probs are the old ones, as verl's apply_bypass_mode
      if (role != "actor") {
        return Error("ComputeLogProbs", absl::InvalidArgumentError(absl::StrCat(
                                            "from_rollout gives the actor's old log-probs, not role '", role, "'")));
      }
      if (!batch->rollout.log_probs.defined()) {
        return Error("ComputeLogProbs", absl::FailedPreconditionError("the step holds no rollout log-probs"));
      }
      batch->old_log_probs = batch->rollout.log_probs.to(at::kFloat);
      batch->log_prob_metrics[role] = Metrics{};
      return Metrics{};
    }
    const std::string memory_keys = absl::StrCat(
        role == "ref" ? "actor_rollout_ref.ref." : "actor_rollout_ref.rollout.",
        "log_prob_micro_batch_size_per_gpu or log_prob_max_token_len_per_gpu (with log_prob_use_dynamic_bsz)");
    return CatchTorch(Context("ComputeLogProbs/" + role), memory_keys, [&]() -> absl::StatusOr<Metrics> {
      const bool ref = role == "ref";
      StartMemoryPhase();
      // An offloaded ref comes to the device for this pass and leaves it after, whatever the pass returns.
      const bool reload = ref && ref_->parameters_offloaded();
      if (reload) ref_->LoadParameters();
      struct OffloadAgain {
        DecoderModel* model;
        ~OffloadAgain() {
          if (model != nullptr) (void)model->OffloadParameters();  // it was offloaded before: its check passes again
        }
      } offload_again{reload ? ref_.get() : nullptr};
      MicroBatching micro;
      micro.rows = std::max<int64_t>(1, ref ? config_.actor.ref_log_prob_micro_batch_size_per_gpu
                                            : config_.actor.log_prob_micro_batch_size_per_gpu);
      micro.max_token_len = ref ? config_.actor.ref_log_prob_max_token_len : config_.actor.log_prob_max_token_len;
      micro.budget_key = ref ? "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"
                             : "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu";
      if (model->sharded()) micro.agree = DpSumFn();  // every pass gathers the layers: same count on every rank
      micro.packed = config_.actor.remove_padding || config_.actor.prefix_grouper;
      micro.share_prompts = config_.actor.prefix_grouper;
      Metrics m;
      at::Tensor lp;
      at::Tensor computed = at::ones({batch->seq.size()}, at::kBool);  // the rows this pass computes
      if (!ref && pass.defer_first_mini_batch) {
        // The update's first mini-batch is left to the update: the other rows only (none with one mini-batch).
        ASSIGN_OR_RETURN(const int64_t mini, PerRankMiniBatch("actor", config_.actor.ppo_mini_batch_size, batch->n));
        const int64_t N = batch->seq.size();
        const at::Tensor deferred = FirstMiniBatchRows(N, mini, config_.actor.shuffle, pass.update_seed);
        computed.index_fill_(0, deferred, false);
        const at::Tensor rest = computed.nonzero().squeeze(1);
        lp = at::zeros({N, batch->seq.responses.size(1)},
                       at::TensorOptions().dtype(at::kFloat).device(batch->seq.input_ids.device()));
        // Every rank defers as many rows (equal shares), so sharded models still agree on their pass counts.
        if (rest.numel() > 0) {
          const at::Tensor rest_on = rest.to(lp.device());
          micro.causal = CausalPasses(batch->seq, micro.packed);  // the update's decision, over every row
          ASSIGN_OR_RETURN(at::Tensor part,
                           ComputeLogProbsNoGrad(*model, SelectRows(batch->seq, rest), temperature, micro));
          lp.index_copy_(0, rest_on, part);
        }
        batch->deferred_rows = deferred;
        batch->deferred_seed = pass.update_seed;
        m["perf/old_log_prob_deferred_rows"] = static_cast<double>(deferred.numel());
      } else {
        ASSIGN_OR_RETURN(lp, ComputeLogProbsNoGrad(*model, batch->seq, temperature, micro));
      }
      if (role == "actor") {
        batch->old_log_probs = lp;
        // How far the trainer's log-probs are from the rollout's (they share the kernels, so this stays tiny), over
        // the rows computed here; the update adds the deferred ones.
        const Metrics diff = RolloutDiff(*batch, computed);
        m.insert(diff.begin(), diff.end());
      } else {
        batch->ref_log_probs = lp;
      }
      // The pass returns once its kernels have run (the actor's already has, for its mismatch figures), so that its
      // timing_s/ key counts its own work, as verl's, whose outputs come back to the host, and the next phase's
      // (the advantage's first copy to the host) does not take in the tail of its queue.
      SyncDevice();
      // The pass's peak (an offloaded ref's parameters, brought in for it, included), named as its timing_s/ key.
      AddPhasePeak(ref ? "ref" : "old_log_prob", m);
      batch->log_prob_metrics[role] = m;
      return m;
    });
  }

  absl::StatusOr<Metrics> ComputeValues(const std::string& step_id) override {
    ASSIGN_OR_RETURN(StepBatch * batch, Find("ComputeValues", step_id));
    if (batch->value_metrics) return *batch->value_metrics;
    if (!critic_) return Error("ComputeValues", absl::FailedPreconditionError("no critic is placed on this rank"));
    const std::string memory_keys =
        "critic.forward_micro_batch_size_per_gpu or forward_max_token_len_per_gpu (with use_dynamic_bsz)";
    return CatchTorch(Context("ComputeValues"), memory_keys, [&]() -> absl::StatusOr<Metrics> {
      StartMemoryPhase();
      MicroBatching micro;
      micro.rows = std::max<int64_t>(1, config_.critic.forward_micro_batch_size_per_gpu);
      micro.max_token_len = config_.critic.forward_max_token_len;
      micro.budget_key = "critic.forward_max_token_len_per_gpu";
      micro.packed = config_.critic.remove_padding;
      ASSIGN_OR_RETURN(batch->values, ComputeValuesNoGrad(*critic_, batch->seq, micro));
      SyncDevice();  // done on the device when it returns, as the log-prob passes
      batch->value_metrics = Metrics{};
      AddPhasePeak("values", *batch->value_metrics);
      return *batch->value_metrics;
    });
  }

  absl::StatusOr<Metrics> ComputeAdvantage(const std::string& step_id, const AdvantageSettings& settings) override {
    ASSIGN_OR_RETURN(StepBatch * batch, Find("ComputeAdvantage", step_id));
    if (batch->advantage_metrics) return *batch->advantage_metrics;
    if (!batch->token_level_rewards.defined()) {
      return Error("ComputeAdvantage", absl::FailedPreconditionError("the step has not been scored"));
    }
    if (settings.use_kl_in_reward && (!batch->old_log_probs.defined() || !batch->ref_log_probs.defined())) {
      return Error("ComputeAdvantage",
                   absl::FailedPreconditionError("use_kl_in_reward needs the actor's and the ref's log-probs first"));
    }
    if (settings.use_kl_in_reward && batch->deferred_rows.defined()) {
      return Error("ComputeAdvantage",
                   absl::FailedPreconditionError("use_kl_in_reward needs every old log-prob, but the old log-prob pass "
                                                 "deferred the first mini-batch's to the update"));
    }
    return CatchTorch(Context("ComputeAdvantage"), [&]() -> absl::StatusOr<Metrics> {
      Metrics m;
      // Advantages are computed on the host (small [N, R] tensors, per-group loops); the updates move them back.
      at::Tensor mask = batch->seq.response_mask.cpu();
      at::Tensor rewards = batch->token_level_rewards;
      if (settings.use_kl_in_reward) {
        auto kl = ApplyKlPenalty(rewards, batch->old_log_probs.cpu(), batch->ref_log_probs.cpu(), mask, settings.kl_coef,
                                 settings.kl_penalty);
        if (!kl.ok()) return Error("ComputeAdvantage", kl.status());
        rewards = kl->token_level_rewards;
        m["actor/reward_kl_penalty"] = kl->current_kl;
        m["actor/reward_kl_penalty_coeff"] = settings.kl_coef;
      }
      AdvantageInputs in;
      in.token_level_rewards = rewards;
      in.response_mask = mask;
      in.group_ids = batch->row_uids;
      in.values = batch->values.defined() ? batch->values.cpu() : at::Tensor();
      in.baseline_scores = batch->baseline_scores;
      AdvantageOptions opts;
      opts.gamma = settings.gamma;
      opts.lam = settings.lam;
      opts.norm_adv_by_std_in_grpo = settings.norm_adv_by_std_in_grpo;
      opts.reduce_sum = DpSumFn();
      auto adv = ComputeAdvantages(settings.estimator, in, opts);
      if (!adv.ok()) return Error("ComputeAdvantage", adv.status());
      batch->advantages = adv->advantages;
      batch->returns = adv->returns;
      AddGlobalStats(m, "critic/advantages", batch->advantages.masked_select(mask));
      AddGlobalStats(m, "critic/returns", batch->returns.masked_select(mask));
      AddGlobalStats(m, "critic/rewards", rewards.sum(-1));
      if (batch->values.defined()) {
        at::Tensor v = batch->values.cpu().masked_select(mask);
        at::Tensor ret = batch->returns.masked_select(mask);
        AddGlobalStats(m, "critic/values", v);
        // verl: 1 - Var(returns - values) / Var(returns), over the whole batch.
        m["critic/vf_explained_var"] = 1.0 - GlobalVar(ret - v) / (GlobalVar(ret) + 1e-5);
      }
      batch->advantage_metrics = m;
      return m;
    });
  }

  absl::StatusOr<Metrics> UpdateCritic(const std::string& step_id, uint64_t seed) override {
    ASSIGN_OR_RETURN(StepBatch * batch, Find("UpdateCritic", step_id));
    if (batch->critic_update_metrics) return *batch->critic_update_metrics;
    if (!critic_) return Error("UpdateCritic", absl::FailedPreconditionError("no critic is placed on this rank"));
    if (!batch->values.defined() || !batch->returns.defined()) {
      return Error("UpdateCritic",
                   absl::FailedPreconditionError("values and returns must be computed before the critic update"));
    }
    const std::string memory_keys =
        "critic.ppo_micro_batch_size_per_gpu or ppo_max_token_len_per_gpu (with use_dynamic_bsz), "
        "critic.model.enable_gradient_checkpointing, critic.model.fsdp_config.optimizer_offload";
    return CatchTorch(Context("UpdateCritic"), memory_keys, [&]() -> absl::StatusOr<Metrics> {
      const RankCriticSettings& c = config_.critic;
      ValueUpdateOptions o;
      o.lr = c.lr * LrFactor(c.lr_schedule, critic_updates_done_);
      o.grad_clip = c.grad_clip;
      o.cliprange_value = c.cliprange_value;
      o.loss_agg_mode = c.loss_agg_mode;
      ASSIGN_OR_RETURN(o.mini_batch_size, PerRankMiniBatch("critic", c.ppo_mini_batch_size, batch->n));
      o.micro_batch_size = std::max<int64_t>(1, c.ppo_micro_batch_size_per_gpu);
      o.max_token_len = c.ppo_max_token_len;
      o.remove_padding = c.remove_padding;
      o.reduce_sum = DpSumFn();
      o.ppo_epochs = c.ppo_epochs;
      o.shuffle = c.shuffle;
      o.seed = seed;
      StartMemoryPhase();
      GradScope<ValueModel> grad_scope(*critic_);
      auto metrics =
          UpdateValue(*critic_, *critic_optimizer_, batch->seq, batch->values, batch->returns.to(device_), o);
      if (!metrics.ok()) return Error("UpdateCritic", metrics.status());
      AddPhasePeak("update_critic", *metrics);
      ++critic_updates_done_;
      batch->critic_update_metrics = *metrics;
      return *metrics;
    });
  }

  absl::StatusOr<Metrics> UpdateActor(const std::string& step_id, double temperature, uint64_t seed) override {
    ASSIGN_OR_RETURN(StepBatch * batch, Find("UpdateActor", step_id));
    if (batch->update_metrics) return *batch->update_metrics;
    if (!optimizer_) return Error("UpdateActor", absl::FailedPreconditionError("no actor is placed on this rank"));
    RETURN_IF_ERROR(RequirePositiveTemperature("UpdateActor", temperature));
    if (!batch->advantages.defined() || !batch->old_log_probs.defined()) {
      return Error("UpdateActor",
                   absl::FailedPreconditionError("advantages and old log-probs must be computed before the update"));
    }
    const std::string memory_keys =
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu or ppo_max_token_len_per_gpu (with use_dynamic_bsz), "
        "actor_rollout_ref.model.enable_gradient_checkpointing, actor_rollout_ref.actor.fsdp_config.optimizer_offload";
    return CatchTorch(Context("UpdateActor"), memory_keys, [&]() -> absl::StatusOr<Metrics> {
      const RankActorSettings& a = config_.actor;
      PolicyUpdateOptions o;
      o.lr = a.lr * LrFactor(a.lr_schedule, updates_done_);
      o.loss.loss_mode = a.loss_mode;
      o.loss.clip_cov_ratio = a.clip_cov_ratio;
      o.loss.clip_cov_lb = a.clip_cov_lb;
      o.loss.clip_cov_ub = a.clip_cov_ub;
      o.loss.kl_cov_ratio = a.kl_cov_ratio;
      o.loss.ppo_kl_coef = a.ppo_kl_coef;
      o.loss.tau_pos = a.tau_pos;
      o.loss.tau_neg = a.tau_neg;
      o.loss.tis_imp_ratio_cap = a.tis_imp_ratio_cap;
      o.loss.reinforce_is_threshold = a.reinforce_is_threshold;
      o.rollout_corr_metrics = a.rollout_corr_metrics;
      o.grad_clip = a.grad_clip;
      o.loss.clip_ratio_low = a.clip_ratio_low;
      o.loss.clip_ratio_high = a.clip_ratio_high;
      o.loss.clip_ratio_c = a.clip_ratio_c;
      o.loss.loss_agg_mode = a.loss_agg_mode;
      o.loss_scale_factor = a.loss_scale_factor;
      o.entropy_coeff = a.entropy_coeff;
      o.use_kl_loss = a.use_kl_loss;
      o.kl_loss_coef = a.kl_loss_coef;
      o.kl_loss_type = a.kl_loss_type;
      ASSIGN_OR_RETURN(o.mini_batch_size, PerRankMiniBatch("actor", a.ppo_mini_batch_size, batch->n));
      o.micro_batch_size = std::max<int64_t>(1, a.ppo_micro_batch_size_per_gpu);
      o.max_token_len = a.ppo_max_token_len;
      o.remove_padding = a.remove_padding;
      o.share_prompts = a.prefix_grouper;
      o.reduce_sum = DpSumFn();
      o.ppo_epochs = a.ppo_epochs;
      o.shuffle = a.shuffle;
      o.temperature = temperature;
      o.seed = seed;
      const bool deferred = batch->deferred_rows.defined();
      if (deferred && batch->deferred_seed != seed) {
        return Error("UpdateActor", absl::FailedPreconditionError(absl::StrCat(
                                        "the old log-prob pass deferred the first mini-batch of update seed ",
                                        *batch->deferred_seed, " but the update has seed ", seed)));
      }
      StartMemoryPhase();
      GradScope<DecoderModel> grad_scope(*actor_);
      const auto update_start = std::chrono::steady_clock::now();
      auto metrics = UpdatePolicy(*actor_, *optimizer_, batch->seq,
                                  {batch->old_log_probs, batch->ref_log_probs, batch->advantages.to(device_),
                                   batch->rollout.log_probs, deferred},
                                  o);
      if (!metrics.ok()) return Error("UpdateActor", metrics.status());
      if (peak_flops_) {
        // verl's perf/mfu/actor: this rank's tokens (prompt + response of each row), its update time, its GPU's peak.
        const at::Tensor lengths = batch->seq.plan_attention_mask().sum(1).to(at::kCPU, at::kLong).contiguous();
        const int64_t* len = lengths.data_ptr<int64_t>();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - update_start).count();
        const double flops = EstimateTrainingFlops(actor_->config(), std::vector<int64_t>(len, len + lengths.numel()));
        (*metrics)["perf/mfu/actor"] = flops * static_cast<double>(a.ppo_epochs) / seconds / *peak_flops_;
      }
      if (deferred) {  // the old log-probs are whole now: the rollout comparison over every row
        for (const auto& [key, value] : RolloutDiff(*batch, at::ones({batch->seq.size()}, at::kBool))) {
          metrics->insert_or_assign(key, value);
        }
      }
      (*metrics)["perf/actor_optimizer_state_gb"] = static_cast<double>(optimizer_->StateBytes()) / (1 << 30);
      int64_t param_bytes = 0;
      for (const auto& [name, t] : actor_->trainable_parameters()) param_bytes += t.numel() * t.element_size();
      (*metrics)["perf/actor_parameters_gb"] = static_cast<double>(param_bytes) / (1 << 30);
      (*metrics)["perf/max_memory_rss_gb"] = PeakRssGb();
      if (device_.is_cuda()) {  // verl's names, from torch.cuda.max_memory_allocated / _reserved
        const DeviceMemory mem = Memory();
        (*metrics)["perf/max_memory_allocated_gb"] = static_cast<double>(mem.peak_allocated) / (1 << 30);
        (*metrics)["perf/max_memory_reserved_gb"] = static_cast<double>(mem.peak_reserved) / (1 << 30);
        AddPhasePeak("update", *metrics, mem);
      }
      ++updates_done_;
      batch->update_metrics = *metrics;
      return *metrics;
    });
  }

  // The trainer's old log-probs against the rollout's over the response tokens of the rows `rows` ([N] bool, on the
  // CPU), over the whole data-parallel group: training/rollout_probs_diff_{mean,max,std} as verl computes them, on
  // the probabilities (|exp(a) - exp(b)|, std with Bessel's correction), and ours,
  // training/rollout_log_probs_diff_{mean,max}, on the log-probs themselves (where rare tokens show).
  Metrics RolloutDiff(const StepBatch& batch, const at::Tensor& rows) {
    const at::Tensor mask =
        batch.seq.response_mask.to(at::kFloat) * rows.to(batch.seq.response_mask.device()).to(at::kFloat).unsqueeze(1);
    const at::Tensor old_lp = batch.old_log_probs.to(at::kFloat);
    const at::Tensor rollout_lp = batch.rollout.log_probs.to(at::kFloat);
    const at::Tensor log_diff = (old_lp - rollout_lp).abs() * mask;
    const at::Tensor prob_diff = (old_lp.exp() - rollout_lp.exp()).abs() * mask;
    // One copy to the host for all five figures.
    const at::Tensor host =
        at::cat({DpSum(at::stack({log_diff.sum(), prob_diff.sum(), prob_diff.square().sum(), mask.sum()})),
                 DpReduce(at::stack({log_diff.max(), prob_diff.max()}), ReduceOp::kMax)})
            .to(at::kCPU, at::kDouble);
    const double* v = host.data_ptr<double>();  // log sum, prob sum, prob square sum, count, log max, prob max
    const double n = std::max(v[3], 1.0);
    const double prob_mean = v[1] / n;
    const double prob_var = v[3] > 1 ? (v[2] - v[3] * prob_mean * prob_mean) / (v[3] - 1) : 0.0;
    Metrics m;
    m["training/rollout_probs_diff_mean"] = prob_mean;
    m["training/rollout_probs_diff_max"] = v[5];
    m["training/rollout_probs_diff_std"] = std::sqrt(std::max(prob_var, 0.0));
    m["training/rollout_log_probs_diff_mean"] = v[0] / n;
    m["training/rollout_log_probs_diff_max"] = v[4];
    return m;
  }

  absl::Status ReleaseBatch(const std::string& step_id) override {
    batches_.erase(step_id);
    return absl::OkStatus();
  }

  absl::Status SaveCheckpoint(const std::string& dir, int64_t global_step, bool hf_export) override {
    RETURN_IF_ERROR(RequireModel("SaveCheckpoint"));
    if (!optimizer_ && !critic_) {
      return Error("SaveCheckpoint", absl::FailedPreconditionError("neither an actor nor a critic is placed here"));
    }
    // Data-parallel replicas hold identical parameters and optimizer state: group rank 0 writes them, in the layout
    // of one rank (model_world_size_1_rank_0), so a checkpoint resumes on any number of ranks. A sharded optimizer
    // state is first sent to rank 0 (and dropped there again after the write).
    // A sharded actor (parameters and their optimizer state) is gathered whole the same way, so its checkpoint is
    // the same files.
    return CatchTorch(Context("SaveCheckpoint"), [&]() -> absl::Status {
      GatherShardedMoments(optimizer_.get(), true);
      if (critic_optimizer_) GatherShardedMoments(critic_optimizer_.get(), true);
      std::optional<GatheredModel> gathered;
      std::vector<at::Tensor> gathered_moments;  // keeps the full moments of a sharded actor alive
      std::optional<TrainableState> actor_state;
      if (optimizer_) {
        gathered.emplace(*actor_, /*keep_changes=*/false);
        actor_state = ActorState(/*gather=*/true, &gathered_moments);
      }
      absl::Status written =
          GroupRank() == 0 ? WriteCheckpoint(dir, actor_state, global_step, hf_export) : absl::OkStatus();
      GatherShardedMoments(optimizer_.get(), false);
      if (critic_optimizer_) GatherShardedMoments(critic_optimizer_.get(), false);
      return written;
    });
  }

  // Group rank 0's part of SaveCheckpoint (the optimizer state gathered): the actor's part where the actor is, the
  // critic's where the critic is (a critic on ranks of its own has a group of its own, whose rank 0 writes it).
  absl::Status WriteCheckpoint(const std::string& dir, const std::optional<TrainableState>& actor_state,
                               int64_t global_step, bool hf_export) {
    {
      const std::string actor_dir = dir + "/actor";
      if (actor_state) {
        RETURN_IF_ERROR(SaveTrainableState(actor_dir, *actor_state, global_step, 1, 0, updates_done_));
        if (hf_export) RETURN_IF_ERROR(ExportHuggingFace(actor_dir + "/huggingface", *actor_, config_.model_path));
      }
      if (critic_) {
        RETURN_IF_ERROR(SaveTrainableCheckpoint(dir + "/critic", critic_->named_parameters(), *critic_optimizer_,
                                                global_step, 1, 0, critic_updates_done_));
      }
      return absl::OkStatus();
    }
  }

  absl::Status LoadCheckpoint(const std::string& dir, int64_t global_step) override {
    RETURN_IF_ERROR(RequireModel("LoadCheckpoint"));
    if (!optimizer_ && !critic_) {
      return Error("LoadCheckpoint", absl::FailedPreconditionError("neither an actor nor a critic is placed here"));
    }
    return CatchTorch(Context("LoadCheckpoint"), [&]() -> absl::Status {
      // The update counts drive the lr warmup; older checkpoints without them fall back to the step.
      int64_t actor_updates = -1, critic_updates = -1;
      if (optimizer_) {
        // A sharded actor loads into full buffers and keeps its slices (Reshard, ScatterMoments).
        GatheredModel gathered(*actor_, /*keep_changes=*/true);
        std::vector<at::Tensor> full_moments;
        TrainableState state = ActorState(/*gather=*/false, &full_moments);
        RETURN_IF_ERROR(Error("LoadCheckpoint", LoadTrainableState(dir + "/actor", state, 1, 0, &actor_updates)));
        optimizer_->set_step_count(state.optimizer_step);
        ScatterMoments(full_moments);
      }
      if (critic_) {
        RETURN_IF_ERROR(Error("LoadCheckpoint", LoadTrainableCheckpoint(dir + "/critic", critic_->named_parameters(),
                                                                        *critic_optimizer_, 1, 0, &critic_updates)));
        critic_updates_done_ = critic_updates >= 0 ? critic_updates : global_step;
      }
      updates_done_ = actor_updates >= 0 ? actor_updates : global_step;
      batches_.clear();
      return absl::OkStatus();
    });
  }

 private:
  // Unshard() for a scope (no-ops for an unsharded model); Reshard(keep_changes) at its end, also on exceptions.
  class GatheredModel {
   public:
    GatheredModel(DecoderModel& model, bool keep_changes) : model_(model), keep_changes_(keep_changes) {
      model_.Unshard();
    }
    ~GatheredModel() {
      try {
        model_.Reshard(keep_changes_);
      } catch (...) {  // a failed collective while unwinding: the step fails anyway; the model stays gathered
      }
    }
    GatheredModel(const GatheredModel&) = delete;
    GatheredModel& operator=(const GatheredModel&) = delete;

   private:
    DecoderModel& model_;
    bool keep_changes_;
  };

  AdamWOptions ActorOptimizerOptions() const {
    const RankActorSettings& a = config_.actor;
    return AdamWOptions{a.lr, a.weight_decay, a.beta1, a.beta2, a.eps, a.optimizer_offload};
  }

  // The actor's checkpoint tensors under HF names (the actor gathered when sharded). For a sharded actor the moments
  // are full buffers per unit, kept in *full (in unit order, exp_avg, exp_avg_sq, master for each): gathered from the
  // group when `gather`, else zero-filled destinations for a load (ScatterMoments puts them back into the shards).
  TrainableState ActorState(bool gather, std::vector<at::Tensor>* full) {
    TrainableState state;
    state.params = actor_->named_parameters();
    state.optimizer_step = optimizer_->step_count();
    if (!actor_->sharded()) {
      for (size_t i = 0; i < optimizer_->params().size(); ++i) {
        if (!gather && !optimizer_->owns(i)) continue;  // ZeRO-1: another rank loads this parameter's moments
        state.moments.push_back({optimizer_->params()[i].first, optimizer_->exp_avg()[i], optimizer_->exp_avg_sq()[i],
                                 optimizer_->master()[i]});
      }
      return state;
    }
    const std::vector<const FlatUnit*> units = actor_->units();
    const bool masters = optimizer_->master()[0].defined();
    std::vector<at::Tensor> exp_avg, exp_avg_sq, master;
    for (size_t u = 0; u < units.size(); ++u) {
      auto full_of = [&](const at::Tensor& shard) {
        return gather ? units[u]->Gather(shard) : at::zeros({units[u]->padded_numel()}, shard.options());
      };
      exp_avg.push_back(full_of(optimizer_->exp_avg()[u]));
      exp_avg_sq.push_back(full_of(optimizer_->exp_avg_sq()[u]));
      if (masters) master.push_back(full_of(optimizer_->master()[u]));
    }
    const auto named_m = actor_->NamedViews(exp_avg);
    const auto named_v = actor_->NamedViews(exp_avg_sq);
    const auto named_master = masters ? actor_->NamedViews(master) : decltype(named_m){};
    for (size_t i = 0; i < named_m.size(); ++i) {
      state.moments.push_back({named_m[i].first, named_m[i].second, named_v[i].second,
                               masters ? named_master[i].second : at::Tensor()});
    }
    full->clear();
    for (size_t u = 0; u < units.size(); ++u) {
      full->push_back(exp_avg[u]);
      full->push_back(exp_avg_sq[u]);
      full->push_back(masters ? master[u] : at::Tensor());
    }
    return state;
  }

  // Copies this rank's slices of the full moments ActorState(gather=false) loaded into the optimizer's shards.
  void ScatterMoments(const std::vector<at::Tensor>& full) {
    if (!actor_->sharded()) return;
    at::NoGradGuard no_grad;
    const std::vector<const FlatUnit*> units = actor_->units();
    for (size_t u = 0; u < units.size(); ++u) {
      optimizer_->exp_avg()[u].copy_(units[u]->SliceOf(full[3 * u]));
      optimizer_->exp_avg_sq()[u].copy_(units[u]->SliceOf(full[3 * u + 1]));
      if (full[3 * u + 2].defined()) optimizer_->master()[u].copy_(units[u]->SliceOf(full[3 * u + 2]));
    }
  }

  // Decodes row `row` (its first `length` tokens) of a contiguous int64 [N, R] response tensor, as verl's reward
  // manager does (tokenizer.decode with special tokens skipped, and the tokenizer's clean_up_tokenization_spaces), and
  // scores it with the prompt's rule scorer. Returns (text, score).
  absl::StatusOr<std::pair<std::string, double>> DecodeAndScore(const at::Tensor& responses, int64_t row,
                                                                int64_t length, const PromptInput& prompt) const {
    const int64_t* ids = responses.data_ptr<int64_t>() + row * responses.size(1);
    std::string text = tokenizer_->Decode(std::vector<int32_t>(ids, ids + length), /*skip_special_tokens=*/true);
    if (clean_up_tokenization_spaces_) text = CleanUpTokenizationSpaces(std::move(text));
    ASSIGN_OR_RETURN(double score, ComputeScore(prompt.data_source, text, prompt.ground_truth, prompt.extra_info_json));
    return std::make_pair(std::move(text), score);
  }
  // Shards the optimizers' state over the group (ZeRO-1) when there is a group and the settings ask for it; once.
  void ApplySharding() {
    if (!comm_ || GroupSize() <= 1) return;
    auto broadcast = [this](at::Tensor& t, int root) {
      at::Tensor buf = t.device() == CommDevice() ? t : t.to(CommDevice());
      if (buf.is_cuda()) SyncDevice();
      absl::Status s = comm_->Broadcast(buf.data_ptr(), buf.numel(), DType::kFloat32, root, comm_timeout_);
      if (!s.ok()) throw StatusError(s);
      if (!buf.is_same(t)) t.copy_(buf);
    };
    if (actor_ && config_.actor.shard_parameters && !actor_->sharded()) {
      // ZeRO-3: the actor's (and the ref's) parameters sharded, the optimizer rebuilt over the shards (a fresh one:
      // sharding happens when the group forms, before any update).
      ShardGroup group;
      group.rank = GroupRank();
      group.world = GroupSize();
      group.all_gather = [this](const at::Tensor& shard, const at::Tensor& full) {
        at::Tensor send = shard.to(CommDevice()).contiguous();
        at::Tensor recv = full.device() == CommDevice() ? full : at::empty(full.sizes(), send.options());
        if (send.is_cuda()) SyncDevice();
        absl::Status s = comm_->AllGather(send.data_ptr(), send.numel(), recv.data_ptr(),
                                          FromScalarType(send.scalar_type()), comm_timeout_);
        if (!s.ok()) throw StatusError(s);
        if (!recv.is_same(full)) full.copy_(recv);
      };
      group.reduce_scatter_sum = [this](const at::Tensor& full, const at::Tensor& shard) {
        at::Tensor send = full.to(CommDevice()).contiguous();
        at::Tensor recv = shard.device() == CommDevice() ? shard : at::empty(shard.sizes(), send.options());
        if (send.is_cuda()) SyncDevice();
        absl::Status s = comm_->ReduceScatter(send.data_ptr(), recv.data_ptr(), recv.numel(), DType::kFloat32,
                                              ReduceOp::kSum, comm_timeout_);
        if (!s.ok()) throw StatusError(s);
        if (!recv.is_same(shard)) shard.copy_(recv);
      };
      actor_->ShardParameters(group);
      if (ref_) ref_->ShardParameters(group);
      optimizer_ = std::make_unique<AdamW>(actor_->shard_parameters(), ActorOptimizerOptions());
    }
    if (optimizer_ && config_.actor.shard_optimizer_state && !optimizer_->sharded() && !actor_->sharded()) {
      optimizer_->Shard(AssignShardOwners(actor_->parameters(), GroupSize()), GroupRank(), broadcast);
    }
    if (critic_optimizer_ && config_.critic.shard_optimizer_state && !critic_optimizer_->sharded()) {
      critic_optimizer_->Shard(AssignShardOwners(critic_->parameters(), GroupSize()), GroupRank(), broadcast);
    }
  }
  // With `gather`, group rank 0 receives the optimizer state it does not own from its owners (every rank calls this,
  // in the same order): the moments and, where the optimizer keeps one (bf16 training, offload), the float32 master;
  // without, rank 0 drops them again. No-op for an unsharded optimizer.
  void GatherShardedMoments(AdamW* opt, bool gather) {
    if (opt == nullptr || !opt->sharded()) return;
    for (size_t i = 0; i < opt->params().size(); ++i) {
      const int owner = opt->owner(i);
      if (owner == 0) continue;
      if (!gather) {
        if (GroupRank() == 0) opt->exp_avg()[i] = opt->exp_avg_sq()[i] = opt->master()[i] = at::Tensor();
        continue;
      }
      std::vector<std::vector<at::Tensor>*> state = {&opt->exp_avg(), &opt->exp_avg_sq()};
      if (opt->keeps_master(i)) state.push_back(&opt->master());
      for (std::vector<at::Tensor>* moments : state) {
        at::Tensor& m = (*moments)[i];
        absl::Status s;
        if (GroupRank() == owner) {
          at::Tensor buf = m.to(CommDevice()).contiguous();
          if (buf.is_cuda()) SyncDevice();
          s = comm_->Send(buf.data_ptr(), buf.numel(), DType::kFloat32, 0, comm_timeout_);
        } else if (GroupRank() == 0) {
          at::Tensor buf = at::empty(opt->params()[i].second.sizes(), at::TensorOptions(at::kFloat).device(CommDevice()));
          if (buf.is_cuda()) SyncDevice();
          s = comm_->Recv(buf.data_ptr(), buf.numel(), DType::kFloat32, owner, comm_timeout_);
          m = buf.to(opt->offloaded() ? at::Device(at::kCPU) : device_);
        }
        if (!s.ok()) throw StatusError(s);
      }
    }
  }
  // A layer-by-layer rollout that no rank starts, since a peer cannot run its passes.
  absl::Status PeerCannotGenerate() const {
    return Error("Generate",
                 absl::FailedPreconditionError("a peer rank of the sharded group cannot generate (its own error says "
                                               "why), so no rank starts the layer-by-layer rollout"));
  }
  // The elementwise maximum of `values` over the group (every rank of it calls this, in the same order).
  std::vector<int64_t> GroupMax(const std::vector<int64_t>& values) const {
    const at::Tensor t = DpReduce(at::tensor(values, at::TensorOptions().dtype(at::kLong)), ReduceOp::kMax);
    return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  }
  // Where the communicator's buffers must be: this rank's device for NCCL, host memory for the host backend.
  at::Device CommDevice() const { return CommDeviceOf(comm_.get()); }
  at::Device CommDeviceOf(const Communicator* comm) const {
    return comm && comm->uses_device_memory() ? device_ : at::Device(at::kCPU);
  }
  // Calls fn(flat piece of a parameter, its offset in the window) for each parameter overlapping elements
  // [offset, offset + len) of the parameters' concatenation; the piece is a view of the parameter.
  static void ForEachOverlap(const std::vector<at::Tensor>& params, int64_t offset, int64_t len,
                             const std::function<void(at::Tensor, int64_t)>& fn) {
    int64_t begin = 0;
    for (const at::Tensor& p : params) {
      const int64_t end = begin + p.numel();
      const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + len);
      if (lo < hi) fn(p.view({-1}).narrow(0, lo - begin, hi - lo), lo - offset);
      begin = end;
      if (begin >= offset + len) break;
    }
  }
  // Point to point over the transfer group (staged through host memory for the host backend).
  void SendTensor(const at::Tensor& t, int peer) {
    at::Tensor buf = t.detach().to(CommDeviceOf(transfer_comm_.get())).contiguous();
    if (buf.is_cuda()) SyncDevice();
    absl::Status s = transfer_comm_->Send(buf.data_ptr(), buf.numel(), FromScalarType(buf.scalar_type()), peer,
                                          transfer_timeout_);
    if (!s.ok()) throw StatusError(s);
  }
  at::Tensor RecvTensor(std::vector<int64_t> shape, at::ScalarType dtype, int peer) {
    at::Tensor buf = at::empty(shape, at::TensorOptions(dtype).device(CommDeviceOf(transfer_comm_.get())));
    if (buf.is_cuda()) SyncDevice();
    absl::Status s = transfer_comm_->Recv(buf.data_ptr(), buf.numel(), FromScalarType(dtype), peer, transfer_timeout_);
    if (!s.ok()) throw StatusError(s);
    return buf;
  }
  // The receiving side of TransferBatch: every source's rows, then the step assembled in the plan's prompt order
  // (rows of different widths padded as Generate pads: prompts on the left, responses on the right).
  StepBatch ReceiveRows(const TransferPlan& plan, int64_t* bytes) {
    struct Part {
      at::Tensor prompts, prompt_mask, responses, response_mask, log_probs, rewards, baseline;
      int64_t next = 0;  // the next prompt's first row
    };
    std::map<int, int64_t> prompts_from;
    for (int s : plan.sources) ++prompts_from[s];
    std::map<int, Part> parts;
    for (const auto& [source, count] : prompts_from) {
      const at::Tensor header = RecvTensor({4}, at::kLong, source).cpu();
      const int64_t rows = header[0].item<int64_t>(), P = header[1].item<int64_t>(), R = header[2].item<int64_t>();
      if (rows != count * plan.n) {
        throw StatusError(absl::InvalidArgumentError(absl::StrCat("transfer rank ", source, " sent ", rows,
                                                                  " rows, expected ", count * plan.n)));
      }
      Part& part = parts[source];
      part.prompts = RecvTensor({rows, P}, at::kLong, source);
      part.prompt_mask = RecvTensor({rows, P}, at::kByte, source).to(at::kBool);
      part.responses = RecvTensor({rows, R}, at::kLong, source);
      part.response_mask = RecvTensor({rows, R}, at::kByte, source).to(at::kBool);
      part.log_probs = RecvTensor({rows, R}, at::kFloat, source);
      part.rewards = RecvTensor({rows, R}, at::kFloat, source).cpu();
      if (header[3].item<int64_t>() != 0) part.baseline = RecvTensor({rows}, at::kFloat, source).cpu();
      *bytes += rows * (P * 9 + R * 17);
    }
    int64_t P = 0, R = 0;
    for (const auto& [source, part] : parts) {
      P = std::max(P, part.prompts.size(1));
      R = std::max(R, part.responses.size(1));
    }
    const double pad = static_cast<double>(plan.pad_token_id);
    std::vector<at::Tensor> prompts, prompt_mask, responses, response_mask, log_probs, rewards, baseline;
    for (int s : plan.sources) {
      Part& part = parts.at(s);
      auto rows = [&](const at::Tensor& t) { return t.narrow(0, part.next, plan.n); };
      const int64_t left = P - part.prompts.size(1), right = R - part.responses.size(1);
      prompts.push_back(at::constant_pad_nd(rows(part.prompts), {left, 0}, pad));
      prompt_mask.push_back(at::constant_pad_nd(rows(part.prompt_mask), {left, 0}, 0));
      responses.push_back(at::constant_pad_nd(rows(part.responses), {0, right}, pad));
      response_mask.push_back(at::constant_pad_nd(rows(part.response_mask), {0, right}, 0));
      log_probs.push_back(at::constant_pad_nd(rows(part.log_probs), {0, right}, 0));
      rewards.push_back(at::constant_pad_nd(rows(part.rewards), {0, right}, 0));
      if (part.baseline.defined()) baseline.push_back(rows(part.baseline));
      part.next += plan.n;
    }
    StepBatch batch;
    batch.prompts = plan.prompts;
    batch.n = plan.n;
    RolloutBatch& r = batch.rollout;
    r.prompts = at::cat(prompts).to(device_);
    r.prompt_mask = at::cat(prompt_mask).to(device_);
    r.responses = at::cat(responses).to(device_);
    r.response_mask = at::cat(response_mask).to(device_);
    r.log_probs = at::cat(log_probs).to(device_);
    batch.token_level_rewards = at::cat(rewards);
    if (!baseline.empty() && baseline.size() == plan.sources.size()) batch.baseline_scores = at::cat(baseline);
    batch.seq = WithHostCopies({at::cat({r.prompts, r.responses}, 1), at::cat({r.prompt_mask, r.response_mask}, 1),
                                r.responses, r.response_mask});
    for (const PromptInput& p : plan.prompts) {
      for (int32_t j = 0; j < plan.n; ++j) batch.row_uids.push_back(p.uid);
    }
    return batch;
  }
  // Waits until the rank's device has finished its queued work (before a collective on another stream reads it; at
  // the end of a phase whose results stay on the device).
  void SyncDevice() const {
    if (device_.is_cuda()) c10::impl::getDeviceGuardImpl(device_.type())->synchronizeDevice(device_.index());
  }
  int GroupRank() const { return comm_ ? comm_->rank() : 0; }
  int GroupSize() const { return comm_ ? comm_->world_size() : 1; }
  // The trainer's passes divide the logits by the temperature (as verl's actor does): 0 would make them inf / NaN.
  absl::Status RequirePositiveTemperature(const std::string& what, double temperature) const {
    if (temperature > 0) return absl::OkStatus();
    return Error(what, absl::InvalidArgumentError(absl::StrCat(
                           "temperature ", temperature, ": the trainer's log-probs need a temperature > 0 (they divide "
                           "the logits by it; a greedy rollout keeps its temperature)")));
  }
  // The reduction of `t` over the data-parallel group (a copy of `t` without a group). Floating tensors travel as
  // float32 and come back in their own dtype; int64 stays int64. Throws StatusError (CatchTorch turns it back).
  at::Tensor DpReduce(const at::Tensor& t, ReduceOp op) const {
    if (!comm_) return t.clone();
    const bool integral = t.scalar_type() == at::kLong;
    // The buffer lives where the communicator works: the rank's GPU for NCCL (after the GPU has finished producing
    // it: NCCL runs on its own stream), host memory for the host backend (device tensors staged through the host).
    const at::Device where = CommDevice();
    at::Tensor buf = t.detach().to(where, integral ? at::kLong : at::kFloat, false, /*copy=*/true).contiguous();
    if (where.is_cuda()) SyncDevice();
    absl::Status s =
        comm_->AllReduce(buf.data_ptr(), buf.numel(), integral ? DType::kInt64 : DType::kFloat32, op, comm_timeout_);
    if (!s.ok()) throw StatusError(s);
    return buf.to(t.device(), t.scalar_type());
  }
  at::Tensor DpSum(const at::Tensor& t) const { return DpReduce(t, ReduceOp::kSum); }
  ReduceSumFn DpSumFn() const {
    if (!comm_) return nullptr;
    return [this](const at::Tensor& t) { return DpSum(t); };
  }
  // mean / max / min of `values` over the whole group (each rank may hold any number, including none).
  void AddGlobalStats(Metrics& m, const std::string& prefix, const at::Tensor& values) const {
    at::Tensor v = values.to(at::kDouble);
    const double inf = std::numeric_limits<double>::infinity();
    const bool any = v.numel() > 0;
    at::Tensor sums =
        DpSum(at::tensor({any ? v.sum().item<double>() : 0.0, static_cast<double>(v.numel())}, at::kDouble));
    at::Tensor extremes =
        DpReduce(at::tensor({any ? v.max().item<double>() : -inf, any ? -v.min().item<double>() : -inf}, at::kDouble),
                 ReduceOp::kMax);
    if (sums[1].item<double>() == 0) return;
    m[prefix + "/mean"] = sums[0].item<double>() / sums[1].item<double>();
    m[prefix + "/max"] = extremes[0].item<double>();
    m[prefix + "/min"] = -extremes[1].item<double>();
  }
  // Unbiased variance of `values` over the whole group (two passes: the mean, then the squared deviations).
  double GlobalVar(const at::Tensor& values) const {
    at::Tensor v = values.to(at::kDouble);
    at::Tensor first = DpSum(at::tensor({v.sum().item<double>(), static_cast<double>(v.numel())}, at::kDouble));
    const double n = first[1].item<double>();
    const double mean = n > 0 ? first[0].item<double>() / n : 0.0;
    const double sq = DpSum(at::tensor({(v - mean).pow(2).sum().item<double>()}, at::kDouble)).item<double>();
    return n > 1 ? sq / (n - 1) : std::numeric_limits<double>::quiet_NaN();
  }
  // A role's mini-batch on this rank, in sequences: ppo_mini_batch_size prompts of the global batch, times n, split
  // evenly over the ranks (verl's ppo_mini_batch_size * n // dp_size).
  absl::StatusOr<int64_t> PerRankMiniBatch(const std::string& role, int64_t mini_prompts, int32_t n) const {
    if (mini_prompts * n % GroupSize() != 0) {
      return Error(absl::StrCat("Update/", role),
                   absl::InvalidArgumentError(absl::StrCat(role, " ppo_mini_batch_size * n = ", mini_prompts * n,
                                                           " is not divisible by the ", GroupSize(),
                                                           " data-parallel ranks")));
    }
    return mini_prompts * n / GroupSize();
  }
  bool HasRole(const std::string& role) const {
    return std::find(config_.roles.begin(), config_.roles.end(), role) != config_.roles.end();
  }
  std::string Context(const std::string& stage) const { return absl::StrCat("rank ", rank_id_, " ", stage); }
  absl::Status Error(const std::string& stage, const absl::Status& s) const { return Annotate(s, Context(stage)); }
  absl::Status RequireModel(const std::string& stage) const {
    if (!actor_ && !critic_) return Error(stage, absl::FailedPreconditionError("no model loaded (call LoadModel first)"));
    return absl::OkStatus();
  }
  absl::Status RequireRollout(const std::string& stage) const {
    RETURN_IF_ERROR(RequireModel(stage));
    if (!actor_ || !tokenizer_) return Error(stage, absl::FailedPreconditionError("no rollout is placed on this rank"));
    return absl::OkStatus();
  }
  absl::StatusOr<StepBatch*> Find(const std::string& stage, const std::string& step_id) {
    RETURN_IF_ERROR(RequireModel(stage));
    auto it = batches_.find(step_id);
    if (it == batches_.end()) {
      return Error(stage, absl::NotFoundError(absl::StrCat("no batch for step '", step_id, "' (Generate first)")));
    }
    return &it->second;
  }
  static std::vector<std::vector<int32_t>> ToTokenLists(const std::vector<PromptInput>& prompts) {
    std::vector<std::vector<int32_t>> out;
    for (const PromptInput& p : prompts) out.push_back(p.token_ids);
    return out;
  }

  const int32_t rank_id_;
  RankConfig config_;
  // GPU ranks: the allocator's peaks before the current memory phase began (StartMemoryPhase); read by Memory() on
  // the metrics thread too.
  std::atomic<int64_t> lifetime_peak_allocated_{0};
  std::atomic<int64_t> lifetime_peak_reserved_{0};
  std::unique_ptr<DecoderModel> actor_;
  std::unique_ptr<DecoderModel> ref_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<ValueModel> critic_;
  std::unique_ptr<AdamW> critic_optimizer_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<double> peak_flops_;  // the GPU's dense peak for perf/mfu/actor (none: a CPU or an unknown GPU)
  bool clean_up_tokenization_spaces_ = false;  // the model's tokenizer_config.json; applied to decoded responses
  std::map<std::string, StepBatch> batches_;
  int64_t updates_done_ = 0;
  int64_t critic_updates_done_ = 0;
  // The data-parallel group; null: a group of one. Replaced only on the rank's thread, under comm_mu_, which other
  // threads hold to reach it (OnPeerAborted); the rank's thread reads it without the lock.
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Communicator> transfer_comm_;  // split placement: every rank of the job (same rules as comm_)
  absl::Duration transfer_timeout_ = absl::Minutes(10);
  mutable std::mutex comm_mu_;
  at::Device device_ = at::kCPU;         // where the models and the step's tensors live
  absl::Duration comm_timeout_ = absl::Minutes(10);
};

}  // namespace

std::unique_ptr<RankInterface> CreateCpuRank(int32_t rank_id) { return std::make_unique<CpuRank>(rank_id); }

}  // namespace verl

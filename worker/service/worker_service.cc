#include "worker/service/worker_service.h"

#include <unistd.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/rpc/metadata.h"
#include "common/status/grpc_status.h"
#include "common/status/status_macros.h"
#include "spdlog/spdlog.h"
#ifdef VERL_WITH_CUDA
#include "worker/comm/nccl_communicator.h"
#endif

namespace verl {
namespace {

LrSchedule FromProto(const v1::OptimConfig& o) {
  LrSchedule s;
  if (!o.lr_scheduler_type().empty()) s.type = o.lr_scheduler_type();
  s.warmup_steps = o.lr_warmup_steps();
  s.total_steps = o.total_training_steps();
  s.min_lr_ratio = o.min_lr_ratio();
  s.num_cycles = o.num_cycles();
  return s;
}

RankActorSettings FromProto(const v1::ActorConfig& a) {
  RankActorSettings s;
  s.lr = a.optim().lr();
  s.weight_decay = a.optim().weight_decay();
  s.beta1 = a.optim().beta1();
  s.beta2 = a.optim().beta2();
  s.eps = a.optim().eps();
  s.lr_schedule = FromProto(a.optim());
  s.grad_clip = a.grad_clip();
  s.clip_ratio_low = a.clip_ratio_low();
  s.clip_ratio_high = a.clip_ratio_high();
  s.clip_ratio_c = a.clip_ratio_c();
  s.loss_agg_mode = a.loss_agg_mode();
  s.loss_scale_factor = a.loss_scale_factor();
  s.entropy_coeff = a.entropy_coeff();
  s.use_kl_loss = a.use_kl_loss();
  s.kl_loss_coef = a.kl_loss_coef();
  s.kl_loss_type = a.kl_loss_type();
  s.ppo_mini_batch_size = a.ppo_mini_batch_size();
  s.ppo_micro_batch_size_per_gpu = a.ppo_micro_batch_size_per_gpu();
  s.ppo_epochs = a.ppo_epochs();
  s.shuffle = a.shuffle();
  s.log_prob_micro_batch_size_per_gpu = a.log_prob_micro_batch_size_per_gpu();
  s.ref_log_prob_micro_batch_size_per_gpu = a.ref_log_prob_micro_batch_size_per_gpu() > 0
                                                ? a.ref_log_prob_micro_batch_size_per_gpu()
                                                : a.log_prob_micro_batch_size_per_gpu();
  s.loss_mode = a.loss_mode().empty() ? "vanilla" : a.loss_mode();
  s.clip_cov_ratio = a.clip_cov_ratio();
  s.clip_cov_lb = a.clip_cov_lb();
  s.clip_cov_ub = a.clip_cov_ub();
  s.kl_cov_ratio = a.kl_cov_ratio();
  s.ppo_kl_coef = a.ppo_kl_coef();
  if (a.tau_pos() != 0) s.tau_pos = a.tau_pos();  // 0: a client that predates the keys (the defaults stay)
  if (a.tau_neg() != 0) s.tau_neg = a.tau_neg();
  s.tis_imp_ratio_cap = a.tis_imp_ratio_cap();
  s.reinforce_is_threshold = a.reinforce_is_threshold();
  s.rollout_corr_metrics = a.rollout_corr_metrics();
  s.shard_optimizer_state = a.shard_optimizer_state();
  s.shard_parameters = a.shard_parameters();
  s.optimizer_offload = a.optimizer_offload();
  s.ref_param_offload = a.ref_param_offload();
  s.rollout_gather_layer_by_layer = a.rollout_gather_layer_by_layer();
  s.rollout_enforce_eager = a.rollout_enforce_eager();
  s.rollout_share_prompts = !a.rollout_no_prompt_sharing();
  s.rollout_chunked_prefill = !a.has_rollout_enable_chunked_prefill() || a.rollout_enable_chunked_prefill();
  // 0 is proto3's "not set" (a client that predates the keys): the rank's defaults then.
  const RankActorSettings defaults;
  s.rollout_max_num_seqs = a.rollout_max_num_seqs() > 0 ? a.rollout_max_num_seqs() : defaults.rollout_max_num_seqs;
  s.ppo_max_token_len = a.ppo_max_token_len();
  s.log_prob_max_token_len = a.log_prob_max_token_len();
  s.ref_log_prob_max_token_len = a.ref_log_prob_max_token_len();
  s.gradient_checkpointing = a.gradient_checkpointing();
  s.recompute_num_layers = a.has_recompute_num_layers() ? a.recompute_num_layers() : -1;
  s.recompute_keep_projections = !a.has_recompute_keep_projections() || a.recompute_keep_projections();
  s.remove_padding = a.remove_padding();
  s.prefix_grouper = a.prefix_grouper();
  s.rollout_max_num_batched_tokens = a.rollout_max_num_batched_tokens() > 0 ? a.rollout_max_num_batched_tokens()
                                                                           : defaults.rollout_max_num_batched_tokens;
  s.rollout_gpu_memory_utilization = a.rollout_gpu_memory_utilization() > 0 ? a.rollout_gpu_memory_utilization()
                                                                           : defaults.rollout_gpu_memory_utilization;
  return s;
}

RankCriticSettings FromProto(const v1::CriticConfig& c) {
  RankCriticSettings s;
  s.model_path = c.model_path();
  s.lr = c.optim().lr();
  s.weight_decay = c.optim().weight_decay();
  s.beta1 = c.optim().beta1();
  s.beta2 = c.optim().beta2();
  s.eps = c.optim().eps();
  s.lr_schedule = FromProto(c.optim());
  s.grad_clip = c.grad_clip();
  s.cliprange_value = c.cliprange_value();
  s.loss_agg_mode = c.loss_agg_mode();
  s.ppo_mini_batch_size = c.ppo_mini_batch_size();
  s.ppo_micro_batch_size_per_gpu = c.ppo_micro_batch_size_per_gpu();
  s.forward_micro_batch_size_per_gpu = c.forward_micro_batch_size_per_gpu();
  s.ppo_max_token_len = c.ppo_max_token_len();
  s.forward_max_token_len = c.forward_max_token_len();
  s.gradient_checkpointing = c.gradient_checkpointing();
  s.recompute_num_layers = c.has_recompute_num_layers() ? c.recompute_num_layers() : -1;
  s.recompute_keep_projections = !c.has_recompute_keep_projections() || c.recompute_keep_projections();
  s.remove_padding = c.remove_padding();
  s.ppo_epochs = c.ppo_epochs();
  s.shuffle = c.shuffle();
  s.shard_optimizer_state = c.shard_optimizer_state();
  s.optimizer_offload = c.optimizer_offload();
  return s;
}

PromptInput FromProto(const v1::Prompt& p) {
  return {std::vector<int32_t>(p.token_ids().begin(), p.token_ids().end()), p.uid(), p.data_source(),
          p.ground_truth(), p.extra_info_json(), p.sample_index()};
}

SamplingSettings FromProto(const v1::SamplingParams& p) {
  SamplingSettings s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.do_sample = p.do_sample();
  s.n = p.n();
  s.max_new_tokens = p.max_new_tokens();
  s.eos_token_ids.assign(p.eos_token_ids().begin(), p.eos_token_ids().end());
  s.ignore_eos = p.ignore_eos();
  s.pad_token_id = p.pad_token_id();
  s.seed = p.seed();
  return s;
}

void ToProto(const HostTensor& h, v1::Tensor* t) {
  t->set_dtype(static_cast<v1::DType>(h.dtype));
  for (int64_t d : h.shape) t->add_shape(d);
  t->set_data(h.bytes);
}

void ToProto(const Metrics& m, google::protobuf::Map<std::string, double>* out) {
  for (const auto& [k, v] : m) (*out)[k] = v;
}

}  // namespace

WorkerServiceImpl::WorkerServiceImpl(std::string worker_id, std::vector<std::unique_ptr<RankInterface>> ranks,
                                     std::string comm_host, std::string device, std::function<void()> on_shutdown,
                                     std::shared_ptr<PrometheusRegistry> metrics)
    : worker_id_(std::move(worker_id)),
      comm_host_(std::move(comm_host)),
      device_(std::move(device)),
      metrics_(std::move(metrics)),
      on_shutdown_(std::move(on_shutdown)) {
  if (metrics_) {
    (void)metrics_->DeclareHistogram("verl_rpc_duration_seconds",
                                     "Time a rank spent on one WorkerService call (queueing excluded), by method.",
                                     {0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300});
    (void)metrics_->DeclareCounter("verl_rpc_errors_total", "WorkerService calls that failed, by method and code.");
    (void)metrics_->DeclareCounter("verl_tokens_generated_total", "Response tokens generated, by rank.");
    // GPU ranks only, updated after every call on the rank (the caching allocator's view, like torch.cuda.memory_*).
    (void)metrics_->DeclareGauge("verl_gpu_memory_allocated_bytes", "GPU memory held by tensors, by rank.");
    (void)metrics_->DeclareGauge("verl_gpu_memory_reserved_bytes", "GPU memory held by the caching allocator, by rank.");
    (void)metrics_->DeclareGauge("verl_gpu_memory_peak_allocated_bytes",
                                 "Most GPU memory held by tensors since the rank started, by rank.");
  }
  slots_.resize(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    slots_[i].rank = std::move(ranks[i]);
    slots_[i].executor = std::make_unique<RankExecutor>();
  }
}

WorkerServiceImpl::~WorkerServiceImpl() {
  // Join every rank thread before any rank goes away: a rank may be in a collective with a sibling.
  for (RankSlot& slot : slots_) slot.executor.reset();
}

grpc::ServerUnaryReactor* WorkerServiceImpl::RunOnRank(grpc::CallbackServerContext* ctx, const std::string& rpc,
                                                       int32_t local_rank, const std::string& step_id,
                                                       std::function<absl::Status(RankInterface&)> work) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (local_rank < 0 || local_rank >= static_cast<int32_t>(slots_.size())) {
    reactor->Finish(ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("worker ", worker_id_, " ", rpc, ": local_rank ", local_rank, " is out of range (this worker has ",
                     slots_.size(), " rank(s); start it with --ranks N for more)"))));
    return reactor;
  }
  RankSlot& slot = slots_[local_rank];
  slot.executor->Post([this, ctx, reactor, rpc, local_rank, step_id, &slot, work = std::move(work)] {
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = work(*slot.rank);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ctx->AddTrailingMetadata(kComputeSecondsMetadataKey, std::to_string(seconds));
    if (metrics_) {
      (void)metrics_->ObserveHistogram("verl_rpc_duration_seconds", {{"method", rpc}}, seconds);
      if (const DeviceMemory mem = slot.rank->Memory(); mem.on_gpu) {
        const PrometheusLabels rank_label = {{"rank", absl::StrCat(local_rank)}};
        (void)metrics_->SetGauge("verl_gpu_memory_allocated_bytes", rank_label, static_cast<double>(mem.allocated));
        (void)metrics_->SetGauge("verl_gpu_memory_reserved_bytes", rank_label, static_cast<double>(mem.reserved));
        (void)metrics_->SetGauge("verl_gpu_memory_peak_allocated_bytes", rank_label,
                                 static_cast<double>(mem.peak_allocated));
      }
      if (!status.ok()) {
        (void)metrics_->IncrementCounter("verl_rpc_errors_total",
                                         {{"method", rpc}, {"code", absl::StatusCodeToString(status.code())}});
      }
    }
    if (!status.ok()) {
      status = Annotate(status, absl::StrCat("worker ", worker_id_, " (pid ", getpid(), ") local rank ", local_rank,
                                             " ", rpc, step_id.empty() ? "" : " step " + step_id));
      spdlog::error("{}", std::string(status.message()));
      // Peers waiting for this rank in a collective fail now, naming it, instead of at their timeout.
      if (slot.in_group || slot.in_transfer_group) {
        slot.rank->AbortCommunicator();
        slot.in_group = slot.in_transfer_group = false;
      }
    }
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Health(grpc::CallbackServerContext* ctx, const v1::HealthRequest*,
                                                    v1::HealthResponse* resp) {
  // Answered on the gRPC thread: health must not queue behind a long generation.
  resp->set_worker_id(worker_id_);
  resp->set_num_ranks(static_cast<int32_t>(slots_.size()));
  resp->set_device(device_);
  resp->set_pid(getpid());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::ConfigureRoles(grpc::CallbackServerContext* ctx,
                                                            const v1::ConfigureRolesRequest* req,
                                                            v1::ConfigureRolesResponse*) {
  return RunOnRank(ctx, "ConfigureRoles", req->local_rank(), "", [this, req](RankInterface& rank) -> absl::Status {
    RankConfig c;
    c.roles.assign(req->roles().begin(), req->roles().end());
    c.model_path = req->model_path();
    c.actor = FromProto(req->actor());
    c.critic = FromProto(req->critic());
    c.num_threads = req->num_threads();
    c.seed = req->seed();
    c.dtype = req->dtype().empty() ? "float32" : req->dtype();
    c.device = device_ == "cuda" ? absl::StrCat("cuda:", req->local_rank()) : "cpu";
    c.world_size = req->world_size();
    RETURN_IF_ERROR(rank.Configure(c));
    if (c.world_size == 1) slots_[req->local_rank()].in_group = false;
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::PrepareCommunicator(grpc::CallbackServerContext* ctx,
                                                                 const v1::PrepareCommunicatorRequest* req,
                                                                 v1::PrepareCommunicatorResponse* resp) {
  const int32_t local_rank = req->local_rank();
  const std::string group = req->group();
  const bool create_id = req->create_nccl_unique_id();
  return RunOnRank(ctx, "PrepareCommunicator", local_rank, "", [this, local_rank, group, create_id,
                                                                resp](RankInterface&) {
    if (group != "" && group != "transfer") {
      return absl::InvalidArgumentError(absl::StrCat("unknown communicator group '", group, "'"));
    }
    RankSlot& slot = slots_[local_rank];
    const bool v6 = comm_host_.find(':') != std::string::npos;
    ASSIGN_OR_RETURN(HostListener listener,
                     HostCommunicator::Listen(absl::StrCat(v6 ? "[" : "", comm_host_, v6 ? "]" : "", ":0")));
    resp->set_address(listener.address);
    slot.listeners.insert_or_assign(group, std::move(listener));
#ifdef VERL_WITH_CUDA
    if (device_ == "cuda") {
      resp->set_nccl_capable(true);
      if (create_id) {
        ASSIGN_OR_RETURN(std::string id, NcclCommunicator::CreateUniqueId());
        resp->set_nccl_unique_id(id);
      }
    }
#endif
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::InitCommunicator(grpc::CallbackServerContext* ctx,
                                                              const v1::InitCommunicatorRequest* req,
                                                              v1::InitCommunicatorResponse*) {
  const int32_t local_rank = req->local_rank();
  return RunOnRank(ctx, "InitCommunicator", local_rank, "", [this, local_rank, req](RankInterface& rank) {
    RankSlot& slot = slots_[local_rank];
    const std::string& group = req->group();
    auto pending = slot.listeners.find(group);
    if (pending == slot.listeners.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("InitCommunicator before PrepareCommunicator", group.empty() ? "" : " (group " + group + ")"));
    }
    HostCommunicatorOptions options;
    options.rank = req->global_rank();
    options.world_size = req->addresses_size();
    options.addresses.assign(req->addresses().begin(), req->addresses().end());
    options.connect_timeout = absl::Seconds(req->connect_timeout_s() > 0 ? req->connect_timeout_s() : 60);
    if (options.rank < 0 || options.rank >= options.world_size ||
        options.addresses[options.rank] != pending->second.address) {
      return absl::InvalidArgumentError(absl::StrCat("global rank ", options.rank, " of ", options.world_size,
                                                     ": its address in the list is not this rank's listener ",
                                                     pending->second.address));
    }
    HostListener listener = std::move(pending->second);
    slot.listeners.erase(pending);
    std::unique_ptr<Communicator> comm;
    if (!req->nccl_unique_id().empty()) {
#ifdef VERL_WITH_CUDA
      if (device_ != "cuda") {
        return absl::FailedPreconditionError("an NCCL group needs a worker started with --device cuda");
      }
      NcclCommunicatorOptions nccl;
      nccl.rank = options.rank;
      nccl.world_size = options.world_size;
      nccl.unique_id = req->nccl_unique_id();
      nccl.cuda_device = local_rank;
      nccl.init_timeout = options.connect_timeout;
      ASSIGN_OR_RETURN(comm, NcclCommunicator::Create(nccl));
#else
      return absl::FailedPreconditionError("this worker was built without NCCL (VERL_WITH_CUDA=OFF)");
#endif
    } else {
      ASSIGN_OR_RETURN(comm, HostCommunicator::Create(options, std::move(listener)));
    }
    const absl::Duration timeout = absl::Seconds(req->collective_timeout_s() > 0 ? req->collective_timeout_s() : 600);
    if (group == "transfer") {
      RETURN_IF_ERROR(rank.SetTransferCommunicator(std::move(comm), timeout));
    } else {
      RETURN_IF_ERROR(rank.SetCommunicator(std::move(comm), timeout));
    }
    (group == "transfer" ? slot.in_transfer_group : slot.in_group) = true;
    spdlog::info("local rank {} joined the {} group as rank {} of {} ({})", local_rank,
                 group == "transfer" ? "transfer" : "data-parallel", options.rank, options.world_size,
                 req->nccl_unique_id().empty() ? "host backend" : "NCCL");
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::LoadModel(grpc::CallbackServerContext* ctx,
                                                       const v1::LoadModelRequest* req, v1::LoadModelResponse* resp) {
  return RunOnRank(ctx, "LoadModel", req->local_rank(), "", [resp](RankInterface& rank) -> absl::Status {
    ASSIGN_OR_RETURN(LoadModelOutput out, rank.LoadModel());
    resp->set_num_parameters(out.num_parameters);
    resp->set_vocab_size(out.vocab_size);
    spdlog::info("model loaded: {} parameters, vocabulary {}", out.num_parameters, out.vocab_size);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Generate(grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req,
                                                      v1::GenerateResponse* resp) {
  return RunOnRank(
      ctx, "Generate", req->local_rank(), req->step_id(), [this, req, resp](RankInterface& rank) -> absl::Status {
        std::vector<PromptInput> prompts;
        prompts.reserve(req->prompts_size());
        for (const v1::Prompt& p : req->prompts()) prompts.push_back(FromProto(p));
        ASSIGN_OR_RETURN(GenerateOutput out,
                         rank.Generate(req->step_id(), prompts, FromProto(req->sampling()), req->greedy_baseline()));
        ToProto(out.responses, resp->mutable_responses());
        resp->mutable_response_lengths()->Add(out.response_lengths.begin(), out.response_lengths.end());
        if (metrics_) {
          double tokens = 0;
          for (int32_t n : out.response_lengths) tokens += n;
          (void)metrics_->IncrementCounter("verl_tokens_generated_total",
                                           {{"rank", absl::StrCat(req->local_rank())}}, tokens);
        }
        resp->mutable_prompt_lengths()->Add(out.prompt_lengths.begin(), out.prompt_lengths.end());
        ToProto(out.metrics, resp->mutable_metrics());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Score(grpc::CallbackServerContext* ctx, const v1::ScoreRequest* req,
                                                   v1::ScoreResponse* resp) {
  return RunOnRank(ctx, "Score", req->local_rank(), req->step_id(), [req, resp](RankInterface& rank) -> absl::Status {
    ASSIGN_OR_RETURN(ScoreOutput out, rank.Score(req->step_id()));
    resp->mutable_scores()->Add(out.scores.begin(), out.scores.end());
    for (std::string& t : out.response_texts) resp->add_response_texts(std::move(t));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::ComputeLogProbs(grpc::CallbackServerContext* ctx,
                                                             const v1::ComputeLogProbsRequest* req,
                                                             v1::ComputeLogProbsResponse* resp) {
  return RunOnRank(
      ctx, "ComputeLogProbs", req->local_rank(), req->step_id(), [req, resp](RankInterface& rank) -> absl::Status {
        RankInterface::LogProbPass pass;
        pass.defer_first_mini_batch = req->defer_first_mini_batch();
        pass.update_seed = req->update_seed();
        pass.from_rollout = req->from_rollout();
        ASSIGN_OR_RETURN(Metrics m, rank.ComputeLogProbs(req->step_id(), req->role(), req->temperature(), pass));
        ToProto(m, resp->mutable_metrics());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::ComputeAdvantage(grpc::CallbackServerContext* ctx,
                                                              const v1::ComputeAdvantageRequest* req,
                                                              v1::ComputeAdvantageResponse* resp) {
  return RunOnRank(ctx, "ComputeAdvantage", req->local_rank(), req->step_id(),
                   [req, resp](RankInterface& rank) -> absl::Status {
                     AdvantageSettings a;
                     a.estimator = req->estimator();
                     a.norm_adv_by_std_in_grpo = req->norm_adv_by_std_in_grpo();
                     a.gamma = req->gamma();
                     a.lam = req->lam();
                     a.use_kl_in_reward = req->use_kl_in_reward();
                     a.kl_coef = req->kl_coef();
                     a.kl_penalty = req->kl_penalty().empty() ? "kl" : req->kl_penalty();
                     ASSIGN_OR_RETURN(Metrics m, rank.ComputeAdvantage(req->step_id(), a));
                     ToProto(m, resp->mutable_metrics());
                     return absl::OkStatus();
                   });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::ComputeValues(grpc::CallbackServerContext* ctx,
                                                           const v1::ComputeValuesRequest* req,
                                                           v1::ComputeValuesResponse* resp) {
  return RunOnRank(ctx, "ComputeValues", req->local_rank(), req->step_id(),
                   [req, resp](RankInterface& rank) -> absl::Status {
                     ASSIGN_OR_RETURN(Metrics m, rank.ComputeValues(req->step_id()));
                     ToProto(m, resp->mutable_metrics());
                     return absl::OkStatus();
                   });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::UpdateCritic(grpc::CallbackServerContext* ctx,
                                                          const v1::UpdateCriticRequest* req,
                                                          v1::UpdateCriticResponse* resp) {
  return RunOnRank(ctx, "UpdateCritic", req->local_rank(), req->step_id(),
                   [req, resp](RankInterface& rank) -> absl::Status {
                     ASSIGN_OR_RETURN(Metrics m, rank.UpdateCritic(req->step_id(), req->seed()));
                     ToProto(m, resp->mutable_metrics());
                     return absl::OkStatus();
                   });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::UpdateActor(grpc::CallbackServerContext* ctx,
                                                         const v1::UpdateActorRequest* req,
                                                         v1::UpdateActorResponse* resp) {
  return RunOnRank(ctx, "UpdateActor", req->local_rank(), req->step_id(),
                   [req, resp](RankInterface& rank) -> absl::Status {
                     ASSIGN_OR_RETURN(Metrics m, rank.UpdateActor(req->step_id(), req->temperature(), req->seed()));
                     ToProto(m, resp->mutable_metrics());
                     return absl::OkStatus();
                   });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::ReleaseBatch(grpc::CallbackServerContext* ctx,
                                                          const v1::ReleaseBatchRequest* req,
                                                          v1::ReleaseBatchResponse*) {
  return RunOnRank(ctx, "ReleaseBatch", req->local_rank(), req->step_id(),
                   [req](RankInterface& rank) { return rank.ReleaseBatch(req->step_id()); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::SyncWeights(grpc::CallbackServerContext* ctx,
                                                         const v1::SyncWeightsRequest* req,
                                                         v1::SyncWeightsResponse* resp) {
  return RunOnRank(ctx, "SyncWeights", req->local_rank(), "", [req, resp](RankInterface& rank) -> absl::Status {
    ASSIGN_OR_RETURN(Metrics m, rank.SyncWeights(req->bucket_bytes()));
    ToProto(m, resp->mutable_metrics());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::TransferBatch(grpc::CallbackServerContext* ctx,
                                                           const v1::TransferBatchRequest* req,
                                                           v1::TransferBatchResponse* resp) {
  return RunOnRank(ctx, "TransferBatch", req->local_rank(), req->step_id(),
                   [req, resp](RankInterface& rank) -> absl::Status {
                     TransferPlan plan;
                     for (const v1::TransferBatchRequest::Send& s : req->sends()) {
                       plan.sends.emplace_back(s.peer(), std::vector<int64_t>(s.prompt_indices().begin(),
                                                                              s.prompt_indices().end()));
                     }
                     for (const v1::Prompt& p : req->prompts()) plan.prompts.push_back(FromProto(p));
                     plan.sources.assign(req->sources().begin(), req->sources().end());
                     plan.n = req->n();
                     plan.pad_token_id = req->pad_token_id();
                     ASSIGN_OR_RETURN(Metrics m, rank.TransferBatch(req->step_id(), plan));
                     ToProto(m, resp->mutable_metrics());
                     return absl::OkStatus();
                   });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::TransferColumn(grpc::CallbackServerContext* ctx,
                                                            const v1::TransferColumnRequest* req,
                                                            v1::TransferColumnResponse* resp) {
  return RunOnRank(ctx, "TransferColumn", req->local_rank(), req->step_id(),
                   [req, resp](RankInterface& rank) -> absl::Status {
                     ASSIGN_OR_RETURN(Metrics m,
                                      rank.TransferColumn(req->step_id(), req->column(), req->peer(), req->send()));
                     ToProto(m, resp->mutable_metrics());
                     return absl::OkStatus();
                   });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::SaveCheckpoint(grpc::CallbackServerContext* ctx,
                                                            const v1::SaveCheckpointRequest* req,
                                                            v1::SaveCheckpointResponse*) {
  return RunOnRank(
      ctx, "SaveCheckpoint", req->local_rank(), absl::StrCat(req->global_step()),
      [req](RankInterface& rank) { return rank.SaveCheckpoint(req->dir(), req->global_step(), req->hf_export()); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::LoadCheckpoint(grpc::CallbackServerContext* ctx,
                                                            const v1::LoadCheckpointRequest* req,
                                                            v1::LoadCheckpointResponse*) {
  return RunOnRank(ctx, "LoadCheckpoint", req->local_rank(), absl::StrCat(req->global_step()),
                   [req](RankInterface& rank) { return rank.LoadCheckpoint(req->dir(), req->global_step()); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::AbortCommunicator(grpc::CallbackServerContext* ctx,
                                                               const v1::AbortCommunicatorRequest* req,
                                                               v1::AbortCommunicatorResponse*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const int32_t local_rank = req->local_rank();
  if (local_rank < 0 || local_rank >= static_cast<int32_t>(slots_.size())) {
    reactor->Finish(ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("worker ", worker_id_, " AbortCommunicator: local_rank ", local_rank, " is out of range"))));
    return reactor;
  }
  spdlog::warn("local rank {}: aborting its communicator: global rank {} failed ({})", local_rank,
               req->failed_global_rank(), req->reason());
  slots_[local_rank].rank->OnPeerAborted(req->failed_global_rank());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Shutdown(grpc::CallbackServerContext* ctx, const v1::ShutdownRequest*,
                                                      v1::ShutdownResponse*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  if (!shutdown_requested_.exchange(true) && on_shutdown_) on_shutdown_();
  return reactor;
}

}  // namespace verl

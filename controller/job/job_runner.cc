#include "controller/job/job_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <condition_variable>
#include <fstream>
#include <iostream>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/data/dataset.h"
#include "common/data/sampler.h"
#include "common/metrics/console_sink.h"
#include "common/metrics/jsonl_sink.h"
#include "common/metrics/metrics_util.h"
#include "common/metrics/multi_sink.h"
#include "common/metrics/metrics_http_server.h"
#include "common/metrics/prometheus_registry.h"
#include "common/metrics/prometheus_sink.h"
#include "common/metrics/tensorboard_sink.h"
#include "common/status/status_macros.h"
#include "common/text/chat_template.h"
#include "common/text/tokenizer.h"
#include "controller/cluster/local_worker_launcher.h"
#include "controller/cluster/rank_group.h"
#include "controller/cluster/worker_client.h"
#include "controller/job/checkpoint_manager.h"
#include "controller/job/kl_controller.h"
#include "controller/job/val_generations.h"
#include "spdlog/spdlog.h"
#include "worker/model/hf_config.h"

namespace verl {
namespace fs = std::filesystem;

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kInit: return "init";
    case JobState::kLoading: return "loading";
    case JobState::kValidating: return "validating";
    case JobState::kStepRollout: return "step/rollout";
    case JobState::kStepReward: return "step/reward";
    case JobState::kStepOldLogProb: return "step/old_log_prob";
    case JobState::kStepRefLogProb: return "step/ref_log_prob";
    case JobState::kStepValues: return "step/values";
    case JobState::kStepAdvantage: return "step/advantage";
    case JobState::kStepCriticUpdate: return "step/critic_update";
    case JobState::kStepActorUpdate: return "step/actor_update";
    case JobState::kCheckpointing: return "checkpointing";
    case JobState::kDone: return "done";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "?";
}

namespace {

// verl's file logger's path (verl/utils/tracking.py FileLogger): $VERL_FILE_LOGGER_PATH, else
// ${VERL_FILE_LOGGER_ROOT:-.}/<project_name>/<experiment_name>.jsonl, a leading ~ of the root being $HOME. Its lines
// are ours: {"step": N, "data": {...}}.
std::string VerlFileLoggerPath(const TrainerConfig& t) {
  if (const char* path = std::getenv("VERL_FILE_LOGGER_PATH"); path != nullptr && *path != '\0') return path;
  std::string root = ".";
  if (const char* r = std::getenv("VERL_FILE_LOGGER_ROOT"); r != nullptr && *r != '\0') root = r;
  if (const char* home = std::getenv("HOME"); home != nullptr && (root == "~" || root.rfind("~/", 0) == 0)) {
    root = home + root.substr(1);
  }
  return root + "/" + t.project_name + "/" + t.experiment_name + ".jsonl";
}

using Clock = std::chrono::steady_clock;
using Metrics = std::map<std::string, double>;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// A prompt ready for the workers: chat template applied and tokenized once, at load time.
struct PreparedExample {
  std::vector<int32_t> token_ids;
  std::string data_source;
  std::string ground_truth;
  std::string extra_info_json;
};

void MergeInto(Metrics& dst, const google::protobuf::Map<std::string, double>& src) {
  for (const auto& [k, v] : src) dst[k] = v;
}

}  // namespace

class JobRunner::Impl {
 public:
  Impl(JobRunner* owner, JobConfig config, JobRunnerOptions options)
      : owner_(owner), config_(std::move(config)), options_(std::move(options)) {}

  ~Impl() { StopWorkers(); }

  absl::Status Run() {
    absl::Status status = RunInner();
    StopWorkers();
    absl::Status closed = sinks_.Close();
    if (status.ok()) status = closed;
    if (absl::IsCancelled(status)) {
      SetState(JobState::kCancelled);
    } else if (!status.ok()) {
      SetState(JobState::kFailed);
    } else {
      SetState(JobState::kDone);
    }
    return status;
  }

  Metrics LastMetrics() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_metrics_;
  }

  // Called from another thread (Ctrl-C): cancels the RPCs in flight.
  void CancelInFlight() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : workers_) w->CancelInFlight();
    if (ranks_) ranks_->CancelInFlight();
  }

 private:
  void SetLastMetrics(const Metrics& m) {
    std::lock_guard<std::mutex> lock(mu_);
    last_metrics_ = m;
  }

  absl::Status RunInner() {
    SetState(JobState::kInit);
    RETURN_IF_ERROR(PrepareInputs());
    RETURN_IF_ERROR(CheckInterrupt());
    SetState(JobState::kLoading);
    RETURN_IF_ERROR(StartWorkers());
    RETURN_IF_ERROR(LoadModels());
    RETURN_IF_ERROR(MaybeResume());
    RETURN_IF_ERROR(OpenSinks());
    while (true) {
      absl::Status status = RunSteps();
      if (absl::Status hb = HeartbeatFailure(); !status.ok() && !hb.ok()) status = hb;
      if (status.ok()) return status;
      // A worker failure, also one while recovering from the last (a restarted worker killed again while it loads,
      // a second pod evicted), is recovered from while cluster.max_worker_restarts allows.
      bool recovering = false;  // status came from a recovery
      while (!status.ok()) {
        if (!IsWorkerFailure(status)) return status;
        if (restarts_ >= config_.cluster.max_worker_restarts) {
          return Annotate(status, absl::StrCat("giving up after ", restarts_,
                                               " worker restart(s) (cluster.max_worker_restarts)"));
        }
        ++restarts_;
        spdlog::warn("{}", std::string(status.message()));
        spdlog::warn("worker failure {}: {} ({} of at most {}) and resuming from {}",
                     recovering ? std::string("while recovering") : absl::StrCat("during step ", global_step_ + 1),
                     launcher_ ? "restarting the workers" : "waiting for the workers at their addresses", restarts_,
                     config_.cluster.max_worker_restarts,
                     last_checkpoint_dir_.empty() ? "the start" : last_checkpoint_dir_);
        status = Recover();
        if (absl::Status hb = HeartbeatFailure(); !status.ok() && !hb.ok()) status = hb;
        recovering = true;
      }
    }
  }

  // The steps from where the job stands (after a start, a resume or a recovery) to the end.
  absl::Status RunSteps() {
    const TrainerConfig& t = config_.trainer;
    const bool has_val = !val_.empty() && t.test_freq > 0;
    // Split placement: the rollout ranks take the actor's weights as the job starts, resumes or recovers.
    RETURN_IF_ERROR(SyncRolloutWeights().status());
    if (has_val && t.val_before_train && global_step_ == 0) {
      ASSIGN_OR_RETURN(Metrics val, Validate(0));
      SetLastMetrics(val);
      RETURN_IF_ERROR(LogMetrics(0, val));
    }
    while (global_step_ < total_steps_) {
      RETURN_IF_ERROR(CheckInterrupt());
      const int64_t step = global_step_ + 1;
      const bool last = step == total_steps_;
      auto step_start = Clock::now();
      const double compute_before = WorkerComputeSeconds();
      ASSIGN_OR_RETURN(Metrics metrics, TrainStep(step));
      if (has_val && (last || step % t.test_freq == 0)) {
        auto start = Clock::now();
        ASSIGN_OR_RETURN(Metrics val, Validate(step));
        metrics.insert(val.begin(), val.end());
        metrics["timing_s/testing"] = Seconds(start);
      }
      global_step_ = step;
      // The step's metrics are logged before a checkpoint of this step is committed (its tracker written): a resume
      // from it must find them on disk, and one from an earlier checkpoint drops them with the steps it repeats.
      auto finish_and_log = [&]() -> absl::Status {
        metrics["timing_s/step"] = Seconds(step_start);
        // Ours (BENCHMARKS.md B0): the part of the step that is not rank compute (RPC, serialisation, bookkeeping).
        metrics["perf/controller_overhead"] =
            std::max(0.0, 1.0 - (WorkerComputeSeconds() - compute_before) / metrics["timing_s/step"]);
        metrics["training/global_step"] = static_cast<double>(step);
        metrics["training/worker_restarts"] = static_cast<double>(restarts_);
        metrics["training/epoch"] = static_cast<double>(sampler_->state().epoch);
        const double tokens = metrics["perf/total_num_tokens"];
        metrics["perf/time_per_step"] = metrics["timing_s/step"];
        metrics["perf/throughput"] = tokens / metrics["timing_s/step"] / static_cast<double>(t.WorldSize());
        SetLastMetrics(metrics);
        return LogMetrics(step, metrics);
      };
      if (t.save_freq > 0 && (last || step % t.save_freq == 0)) {
        SetState(JobState::kCheckpointing);
        auto start = Clock::now();
        RETURN_IF_ERROR(checkpoints_->Save(step, sampler_->state(), /*hf_export=*/last,
                                           {{"kl_ctrl.value", kl_ctrl_->value()},
                                            {"data.train_examples", static_cast<double>(sampler_->dataset_size())}},
                                           [&]() -> absl::Status {
                                             metrics["timing_s/save_checkpoint"] = Seconds(start);
                                             return finish_and_log();
                                           }));
        last_checkpoint_dir_ = checkpoints_->StepDir(step);
      } else {
        RETURN_IF_ERROR(finish_and_log());
      }
    }
    spdlog::info("job finished: {} steps", global_step_);
    return absl::OkStatus();
  }

  absl::Status LogMetrics(int64_t step, const Metrics& metrics) {
    RETURN_IF_ERROR(sinks_.Log(step, metrics));
    if (options_.on_metrics) options_.on_metrics(step, metrics);
    return absl::OkStatus();
  }

  void SetState(JobState s) {
    if (prometheus_) (void)PrometheusSink::SetJobState(*prometheus_, PrometheusJobLabels(), JobStateName(s));
    JobState prev = owner_->state_.exchange(s);
    if (prev != s && options_.on_state) options_.on_state(s);
    const double dt = Seconds(state_since_);
    state_since_ = Clock::now();
    if (prev != s) spdlog::debug("state {} -> {} ({:.3f} s in {})", JobStateName(prev), JobStateName(s), dt,
                                 JobStateName(prev));
  }

  // Called between stages: Cancelled once the job is cancelled, and a worker's missed heartbeat once one is missed.
  // The heartbeat cancels the calls in flight on that worker, but it may have none (a split placement's trainers
  // idle during rollout): the next stage then recovers instead of calling a worker that stopped answering.
  absl::Status CheckInterrupt() {
    if (owner_->cancel_requested_.load()) return absl::CancelledError("job cancelled");
    return HeartbeatFailure();
  }

  // Where an example is in its file, for messages: "line N" in a JSONL file, "row N" in a parquet file.
  static std::string Where(const Example& ex) {
    return ex.location.empty() ? absl::StrCat("row ", ex.row) : ex.location;
  }

  // Checks and loads everything from disk before any worker starts.
  absl::Status PrepareInputs() {
    const std::string& model_dir = config_.actor_rollout_ref.model.path;
    if (!fs::is_directory(model_dir)) {
      // verl takes a Hugging Face Hub id ("Qwen/Qwen2.5-0.5B-Instruct") and downloads it; nothing here reaches the
      // network on its own, so say how to get the directory.
      const bool hub_id = !model_dir.empty() && model_dir.front() != '/' && model_dir.front() != '.' &&
                          std::count(model_dir.begin(), model_dir.end(), '/') == 1;
      return absl::NotFoundError(absl::StrCat(
          "actor_rollout_ref.model.path: model directory '", model_dir, "' does not exist",
          hub_id ? absl::StrCat(" (a Hugging Face Hub id? the model is read from a local directory only: download it "
                                "first, e.g. `huggingface-cli download ",
                                model_dir, " --local-dir DIR`, and set the path to DIR)")
                 : ""));
    }
    auto model_config = LoadDecoderConfig(model_dir);
    if (!model_config.ok()) return Annotate(model_config.status(), "actor_rollout_ref.model.path");
    model_config_ = *std::move(model_config);
    const std::string tok_path = model_dir + "/tokenizer.json";
    if (!fs::exists(tok_path)) {
      return absl::NotFoundError(absl::StrCat("actor_rollout_ref.model.path: ", model_dir,
                                              " has no tokenizer.json (only HF tokenizer.json is supported)"));
    }
    ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::FromFile(tok_path));
    tokenizer_ = std::make_unique<Tokenizer>(std::move(tok));
    if (tokenizer_->vocab_size() > model_config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          tok_path, ": the tokenizer has ", tokenizer_->vocab_size(), " ids but ", model_dir,
          "/config.json has vocab_size ", model_config_.vocab_size, "; they do not belong to the same model"));
    }
    ASSIGN_OR_RETURN(chat_options_, ChatTemplateOptionsFromTokenizerConfig(model_dir + "/tokenizer_config.json"));
    RETURN_IF_ERROR(CheckChatTemplateFits(chat_options_, *tokenizer_, model_dir + "/tokenizer_config.json"));
    eos_ids_ = model_config_.eos_token_ids;
    if (eos_ids_.empty()) {
      for (const char* name : {"<|im_end|>", "<|endoftext|>", "</s>"}) {
        if (auto id = tokenizer_->TokenToId(name)) {
          eos_ids_.push_back(*id);
          break;
        }
      }
    }
    if (eos_ids_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(model_dir, ": no eos_token_id in generation_config.json or ",
                                                     "config.json, and no known EOS token in tokenizer.json"));
    }
    pad_id_ = model_config_.pad_token_id.value_or(
        tokenizer_->TokenToId("<|endoftext|>").value_or(eos_ids_.front()));

    const DataConfig& d = config_.data;
    ASSIGN_OR_RETURN(train_, Prepare(d.train_files, "data.train_files"));
    if (!d.val_files.empty()) {
      ASSIGN_OR_RETURN(val_, Prepare(d.val_files, "data.val_files"));
    }
    if (static_cast<int64_t>(train_.size()) < d.train_batch_size) {
      return absl::InvalidArgumentError(absl::StrCat("data.train_batch_size=", d.train_batch_size,
                                                     " is larger than the training set (", train_.size(),
                                                     " prompts in ", absl::StrJoin(d.train_files, ", "), ")"));
    }
    ASSIGN_OR_RETURN(ResumableSampler sampler,
                     ResumableSampler::Create(static_cast<int64_t>(train_.size()), d.train_batch_size, d.shuffle,
                                              static_cast<uint64_t>(d.seed)));
    sampler_ = std::make_unique<ResumableSampler>(std::move(sampler));
    const AlgorithmConfig& al = config_.algorithm;
    ASSIGN_OR_RETURN(KlController kl, KlController::Create(al.kl_ctrl.type, al.kl_ctrl.kl_coef,
                                                           al.kl_ctrl.target_kl, al.kl_ctrl.horizon));
    kl_ctrl_ = std::make_unique<KlController>(kl);
    const TrainerConfig& t = config_.trainer;
    total_steps_ = t.total_training_steps.value_or(sampler_->steps_per_epoch() * t.total_epochs);
    if (options_.on_total_steps) options_.on_total_steps(total_steps_);
    std::optional<int64_t> keep;  // a step directory holds actor and critic: keep what either limit wants
    if (t.max_actor_ckpt_to_keep && (!config_.UseCritic() || t.max_critic_ckpt_to_keep)) {
      keep = std::max(*t.max_actor_ckpt_to_keep, config_.UseCritic() ? *t.max_critic_ckpt_to_keep : int64_t{0});
    }
    checkpoints_ = std::make_unique<CheckpointManager>(
        t.default_local_dir,
        [this](const std::string& dir, int64_t step, bool hf) { return SaveOnWorkers(dir, step, hf); }, keep);
    spdlog::info("{} training prompts, {} validation prompts, {} steps", train_.size(), val_.size(), total_steps_);
    return absl::OkStatus();
  }

  // The prompts of `paths` (a data.*_files list), the files' rows one after another in the list's order, as verl
  // concatenates them.
  absl::StatusOr<std::vector<PreparedExample>> Prepare(const std::vector<std::string>& paths, const std::string& key) {
    std::vector<PreparedExample> out;
    for (const std::string& path : paths) {
      ASSIGN_OR_RETURN(std::vector<PreparedExample> part, PrepareFile(path, key));
      out.insert(out.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
    if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(absl::StrJoin(paths, ", "), ": no usable prompts"));
    return out;
  }

  absl::StatusOr<std::vector<PreparedExample>> PrepareFile(const std::string& path, const std::string& key) {
    if (!fs::exists(path)) return absl::NotFoundError(absl::StrCat(key, ": dataset '", path, "' does not exist"));
    DatasetOptions opts;
    opts.prompt_key = config_.data.prompt_key;
    auto loaded = LoadDataset(path, opts);
    if (!loaded.ok()) return Annotate(loaded.status(), key);
    std::vector<Example> examples = *std::move(loaded);
    std::vector<PreparedExample> out;
    const int64_t max_len = config_.data.max_prompt_length;
    int64_t filtered = 0;
    for (const Example& ex : examples) {
      auto text = RenderChatTemplate(ex.prompt, true, chat_options_);
      if (!text.ok()) {
        return Annotate(text.status(), absl::StrCat(path, ": ", Where(ex), ": applying the chat template of ",
                                                    config_.actor_rollout_ref.model.path));
      }
      std::vector<int32_t> ids = tokenizer_->Encode(*text);
      if (static_cast<int64_t>(ids.size()) > max_len) {
        if (config_.data.filter_overlong_prompts) {
          ++filtered;
          continue;
        }
        const std::string& mode = config_.data.truncation;
        if (mode == "left") {
          ids.erase(ids.begin(), ids.end() - max_len);
        } else if (mode == "right") {
          ids.resize(max_len);
        } else {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ": ", Where(ex), ": prompt is ", ids.size(), " tokens, longer than data.max_prompt_length=",
              max_len, " (set data.truncation=left|right or data.filter_overlong_prompts=true)"));
        }
      }
      out.push_back({std::move(ids), ex.data_source, ex.ground_truth, ex.extra_info_json});
    }
    if (filtered > 0) spdlog::info("{}: filtered {} prompts longer than {} tokens", path, filtered, max_len);
    return out;
  }

  // Starts (or connects to) the workers, numbers their ranks and forms the data-parallel group. Worker w's ranks are
  // global ranks w * n_gpus_per_node ... (w + 1) * n_gpus_per_node - 1.
  absl::Status StartWorkers() {
    const ClusterConfig& c = config_.cluster;
    // Ctrl-C, CancelJob and a server shutdown end the waits for workers at once, as they end calls in flight.
    const std::function<bool()> cancelled = [this] { return owner_->cancel_requested_.load(); };
    const TrainerConfig& t = config_.trainer;
    std::vector<std::pair<std::string, std::string>> targets;  // id, address
    if (c.worker_addresses.empty()) {
      if (t.device == "cpu" && !recovering_) {  // said once, at the job's start
        if (const int gpus = CountDriverGpus(); gpus > 0) {
          spdlog::warn("trainer.device is cpu: the {} rank(s) run on CPU slots although this machine has {} NVIDIA "
                       "GPU(s); set trainer.device=cuda to train on them (verl's default is cuda, ours cpu)",
                       t.nnodes * t.n_gpus_per_node, gpus);
        }
      }
      const std::string binary = c.worker_binary.empty() ? options_.default_worker_binary : c.worker_binary;
      launcher_ = std::make_unique<LocalWorkerLauncher>();
      ASSIGN_OR_RETURN(auto launched, launcher_->Launch(binary, static_cast<int>(t.nnodes), t.log_dir + "/workers",
                                                        c.worker_start_timeout_s, static_cast<int>(t.n_gpus_per_node),
                                                        t.device, cancelled));
      for (const LaunchedWorker& w : launched) {
        spdlog::info("started {} (pid {}) on {}", w.worker_id, w.pid, w.address);
        targets.emplace_back(w.worker_id, w.address);
      }
    } else {
      // The config check guarantees one address per node.
      for (size_t i = 0; i < c.worker_addresses.size(); ++i) {
        targets.emplace_back(absl::StrCat("worker-", i), c.worker_addresses[i]);
      }
    }
    std::vector<RankAddress> ranks;
    for (const auto& [id, address] : targets) {
      std::function<absl::Status()> liveness;
      if (launcher_) liveness = [this, id = id] { return launcher_->CheckAlive(id); };
      auto client = std::make_unique<WorkerClient>(id, address, c.rpc_timeout_s, liveness);
      // A listed worker that failed: wait for whatever restarts it (a supervisor, Kubernetes) to bring one back.
      const bool replacing = recovering_ && !launcher_;
      if (replacing) {
        spdlog::info("waiting up to {:.0f} s for {} at {} (cluster.worker_replacement_timeout_s)",
                     c.worker_replacement_timeout_s, id, address);
      } else if (!launcher_) {
        spdlog::info("connecting to {} at {} (up to {:.0f} s, cluster.worker_start_timeout_s)", id, address,
                     c.worker_start_timeout_s);
      }
      ASSIGN_OR_RETURN(
          v1::HealthResponse health,
          client->WaitHealthy(replacing ? c.worker_replacement_timeout_s : c.worker_start_timeout_s, cancelled));
      if (replacing) spdlog::info("{} at {} answers (pid {})", id, address, health.pid());
      spdlog::debug("{} healthy: pid {}, {} rank(s) on {}", id, health.pid(), health.num_ranks(), health.device());
      if (health.device() != t.device) {
        return absl::InvalidArgumentError(absl::StrCat("the worker at ", address, " runs on ", health.device(),
                                                       " but trainer.device is ", t.device, " (start it with --device ",
                                                       t.device, ")"));
      }
      if (health.num_ranks() != t.n_gpus_per_node) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the worker at ", address, " hosts ", health.num_ranks(), " rank(s) but trainer.n_gpus_per_node is ",
            t.n_gpus_per_node, " (start it with --ranks ", t.n_gpus_per_node, ")"));
      }
      for (int32_t l = 0; l < health.num_ranks(); ++l) ranks.push_back({id, address, l});
      std::lock_guard<std::mutex> lock(mu_);
      workers_.push_back(std::move(client));
    }
    {
      std::function<absl::Status(const std::string&)> liveness;
      if (launcher_) liveness = [this](const std::string& id) { return launcher_->CheckAlive(id); };
      auto group = std::make_unique<RankGroup>(std::move(ranks), c.rpc_timeout_s, liveness);
      std::lock_guard<std::mutex> lock(mu_);
      ranks_ = std::move(group);
    }
    if (Trainers() > 1) {
      const auto start = Clock::now();
      std::string backend;
      RETURN_IF_ERROR(Annotate(ranks_->InitCommunicators(c.worker_start_timeout_s, c.comm_timeout_s,
                                                         c.comm_backend == "auto", &backend, TrainerRanks()),
                               "forming the data-parallel group"));
      spdlog::info("data-parallel group of {} ranks on {} worker(s) formed in {:.2f} s ({} backend)", Trainers(),
                   targets.size(), Seconds(start), backend);
    }
    if (CriticSplit() && CriticRanks().size() > 1) {
      RETURN_IF_ERROR(Annotate(ranks_->InitCommunicators(c.worker_start_timeout_s, c.comm_timeout_s,
                                                         c.comm_backend == "auto", nullptr, CriticRanks()),
                               "forming the critic's data-parallel group"));
    }
    if (Placed()) {
      const auto start = Clock::now();
      std::string backend;
      RETURN_IF_ERROR(Annotate(ranks_->InitCommunicators(c.worker_start_timeout_s, c.comm_timeout_s,
                                                         c.comm_backend == "auto", &backend, {}, "transfer"),
                               "forming the transfer group (split placement)"));
      spdlog::info("split placement: actor on ranks {}-{}, critic on {}-{}, rollout on {}-{}; transfer group formed "
                   "in {:.2f} s ({} backend)",
                   TrainerRanks().front(), TrainerRanks().back(), CriticRanks().front(), CriticRanks().back(),
                   RolloutRanks().front(), RolloutRanks().back(), Seconds(start), backend);
    }
    StartHeartbeat();
    return absl::OkStatus();
  }

  // graceful: ask each worker to shut down first (not for a worker that already failed: it may not answer).
  void StopWorkers(bool graceful = true) {
    StopHeartbeat();
    if (launcher_) {
      if (graceful) {
        for (auto& w : workers_) (void)w->Shutdown();
      }
      // Close our connections before waiting for the workers to exit: a worker's graceful server shutdown waits
      // for its clients to disconnect, and an idle channel of ours would only notice the worker's GOAWAY at gRPC's
      // next backup poll (5 s), which made every job end (and Ctrl-C) take about 5 s.
      ClearWorkers();
      launcher_->StopAll(graceful ? 5.0 : 1.0);
      launcher_.reset();
    }
    ClearWorkers();
  }

  // Checks every cluster.heartbeat_interval_s that each worker answers Health (answered on the worker's gRPC thread,
  // so a busy rank still answers). A worker that does not answer within cluster.heartbeat_timeout_s has its call in
  // flight cancelled, and the job treats it as failed (and recovers when it launched it).
  void StartHeartbeat() {
    StopHeartbeat();
    {
      std::lock_guard<std::mutex> lock(mu_);
      heartbeat_stop_ = false;
      heartbeat_failure_ = absl::OkStatus();
    }
    heartbeat_ = std::thread([this] {
      const ClusterConfig& c = config_.cluster;
      std::unique_lock<std::mutex> lock(mu_);
      while (!heartbeat_cv_.wait_for(lock, std::chrono::duration<double>(c.heartbeat_interval_s),
                                     [this] { return heartbeat_stop_; })) {
        for (auto& w : workers_) {
          WorkerClient* client = w.get();
          lock.unlock();
          absl::Status alive = client->Ping(c.heartbeat_timeout_s);
          lock.lock();
          if (heartbeat_stop_) return;
          if (!alive.ok()) {
            spdlog::warn("{}", std::string(alive.message()));
            heartbeat_failure_ = alive;
            // The step's calls are in flight on the per-rank clients: cancel them all (the job recovers or fails).
            client->CancelInFlight();
            if (ranks_) ranks_->CancelInFlight(client->worker_id(), std::string(alive.message()));
            return;
          }
        }
      }
    });
  }

  void StopHeartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      heartbeat_stop_ = true;
    }
    heartbeat_cv_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
  }

  absl::Status HeartbeatFailure() {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeat_failure_;
  }

  void ClearWorkers() {
    std::lock_guard<std::mutex> lock(mu_);
    workers_.clear();
    ranks_.reset();
  }

  // Rank compute so far, averaged over the ranks (they compute concurrently).
  double WorkerComputeSeconds() const { return ranks_ ? ranks_->MeanComputeSeconds() : 0.0; }

  int World() const { return ranks_->size(); }
  // Split placement (resource_pool.rollout_ranks > 0): the first TrainingRanks() ranks train, the rest generate.
  // Placement (resource_pool): ranks [0, A) hold the actor (with the ref, and the critic unless it has ranks of its
  // own), [A, A + K) the critic alone, the last R the rollout alone. Colocated (K = R = 0): every role everywhere.
  bool Split() const { return config_.resource_pool.rollout_ranks > 0; }  // the rollout has ranks of its own
  bool CriticSplit() const { return config_.resource_pool.critic_ranks > 0; }
  bool Placed() const { return Split() || CriticSplit(); }  // some role has ranks of its own: a transfer group
  int Trainers() const { return Placed() ? static_cast<int>(config_.TrainingRanks()) : World(); }
  static std::vector<int> Range(int begin, int end) {
    std::vector<int> out;
    for (int r = begin; r < end; ++r) out.push_back(r);
    return out;
  }
  std::vector<int> TrainerRanks() const { return Range(0, Trainers()); }
  std::vector<int> CriticRanks() const {
    return CriticSplit() ? Range(Trainers(), Trainers() + static_cast<int>(config_.resource_pool.critic_ranks))
                         : TrainerRanks();
  }
  std::vector<int> RolloutRanks() const {
    return Split() ? Range(World() - static_cast<int>(config_.resource_pool.rollout_ranks), World()) : TrainerRanks();
  }
  // The ranks that hold a checkpoint's parts: the actor's, and the critic's when it has its own.
  std::vector<int> CheckpointRanks() const {
    std::vector<int> out = TrainerRanks();
    if (CriticSplit()) {
      for (int r : CriticRanks()) out.push_back(r);
    }
    return out;
  }
  // `count` prompts assigned (AssignPrompts) over `ranks`, as a per-rank list of World() entries.
  static std::vector<std::vector<int64_t>> AssignTo(const std::vector<int>& ranks, int world, int64_t count,
                                                    int64_t block) {
    std::vector<std::vector<int64_t>> out(world);
    const auto parts = AssignPrompts(count, static_cast<int>(ranks.size()), block);
    for (size_t i = 0; i < ranks.size(); ++i) out[ranks[i]] = parts[i];
    return out;
  }

  // Split placement: every rank joins SyncWeights; the rollout ranks end with the actor's weights. No-op otherwise.
  absl::StatusOr<Metrics> SyncRolloutWeights() {
    if (!Split()) return Metrics{};
    const auto start = Clock::now();
    v1::SyncWeightsRequest req;
    req.set_bucket_bytes(config_.actor_rollout_ref.rollout.update_weights_bucket_megabytes << 20);
    Metrics m;
    ASSIGN_OR_RETURN(auto all, OnAllRanks(req, &WorkerClient::SyncWeights));
    MergeMetrics(m, all);
    m["timing_s/weight_sync"] = Seconds(start);
    return m;
  }

  // Sends `request` (its local_rank set per rank) to every rank through `call`, concurrently; returns the responses
  // in rank order.
  template <typename Req, typename Resp>
  absl::StatusOr<std::vector<Resp>> OnAllRanks(const Req& request,
                                               absl::StatusOr<Resp> (WorkerClient::*call)(const Req&),
                                               std::vector<int> only = {}) {
    return ranks_->ForEach<Resp>(
        [&](int r) { return (ranks_->client(r).*call)(ranks_->For(r, request)); }, std::move(only));
  }

  // The ranks' metrics of one stage, merged (MergeRankMetrics), into `m`.
  template <typename Resp>
  static void MergeMetrics(Metrics& m, const std::vector<Resp>& responses) {
    std::vector<Metrics> per_rank;
    for (const Resp& r : responses) per_rank.emplace_back(r.metrics().begin(), r.metrics().end());
    for (const auto& [k, v] : MergeRankMetrics(per_rank)) m[k] = v;
  }

  // The optimizer's settings for a role, its schedule resolved as verl does: lr_warmup_steps when set (>= 0), else
  // lr_warmup_steps_ratio of the run's total steps, which is also a cosine schedule's length.
  void SetOptim(const OptimConfig& optim, v1::OptimConfig* out) const {
    out->set_lr(optim.lr);
    out->set_weight_decay(optim.weight_decay);
    out->set_beta1(optim.betas.at(0));
    out->set_beta2(optim.betas.at(1));
    out->set_eps(optim.eps);
    out->set_lr_warmup_steps(optim.lr_warmup_steps >= 0 ? optim.lr_warmup_steps
                                                        : static_cast<int64_t>(optim.lr_warmup_steps_ratio *
                                                                               static_cast<double>(total_steps_)));
    out->set_lr_scheduler_type(optim.lr_scheduler_type);
    out->set_total_training_steps(total_steps_);
    out->set_min_lr_ratio(optim.min_lr_ratio);
    out->set_num_cycles(optim.num_cycles);
  }

  // The ref model is needed for a KL loss or an in-reward KL penalty.
  bool NeedRef() const {
    return config_.actor_rollout_ref.actor.use_kl_loss || config_.algorithm.use_kl_in_reward;
  }

  absl::Status LoadModels() {
    const ActorRolloutRefConfig& arr = config_.actor_rollout_ref;
    const ActorConfig& a = arr.actor;
    v1::ConfigureRolesRequest req;
    req.add_roles("actor");
    if (!Split()) req.add_roles("rollout");  // colocated: the rollout reads the actor's weights in place
    if (NeedRef()) req.add_roles("ref");
    if (config_.UseCritic()) {
      if (!CriticSplit()) req.add_roles("critic");
      const CriticConfig& c = config_.critic;
      v1::CriticConfig* cc = req.mutable_critic();
      cc->set_model_path(fs::absolute(c.model_path).string());
      SetOptim(c.optim, cc->mutable_optim());
      cc->set_grad_clip(c.grad_clip);
      cc->set_cliprange_value(c.cliprange_value);
      cc->set_loss_agg_mode(c.loss_agg_mode);
      cc->set_ppo_mini_batch_size(static_cast<int32_t>(c.ppo_mini_batch_size));
      const int64_t critic_mini_seqs = c.ppo_mini_batch_size * arr.rollout.n / Trainers();
      cc->set_ppo_micro_batch_size_per_gpu(static_cast<int32_t>(c.ppo_micro_batch_size_per_gpu.value_or(critic_mini_seqs)));
      cc->set_forward_micro_batch_size_per_gpu(static_cast<int32_t>(c.forward_micro_batch_size_per_gpu.value_or(
          config_.data.train_batch_size * arr.rollout.n / Trainers())));
      cc->set_gradient_checkpointing(c.enable_gradient_checkpointing);
      if (c.recompute_num_layers) cc->set_recompute_num_layers(static_cast<int32_t>(*c.recompute_num_layers));
      cc->set_recompute_keep_projections(c.recompute_keep_projections);
      cc->set_remove_padding(c.use_remove_padding);
      if (c.use_dynamic_bsz) {
        cc->set_ppo_max_token_len(c.ppo_max_token_len_per_gpu);
        cc->set_forward_max_token_len(c.forward_max_token_len_per_gpu);
      }
      cc->set_ppo_epochs(static_cast<int32_t>(c.ppo_epochs));
      cc->set_shuffle(c.shuffle);
      cc->set_shard_optimizer_state(c.shard_optimizer_state);
      cc->set_optimizer_offload(c.optimizer_offload);
    }
    req.set_model_path(fs::absolute(arr.model.path).string());
    req.set_world_size(static_cast<int32_t>(Trainers()));
    req.set_num_threads(static_cast<int32_t>(config_.cluster.num_threads_per_rank));
    req.set_seed(static_cast<uint64_t>(config_.trainer.seed));
    req.set_dtype(arr.model.dtype);
    v1::ActorConfig* ac = req.mutable_actor();
    SetOptim(a.optim, ac->mutable_optim());
    ac->set_grad_clip(a.grad_clip);
    ac->set_clip_ratio_low(a.ClipRatioLow());
    ac->set_clip_ratio_high(a.ClipRatioHigh());
    ac->set_clip_ratio_c(a.clip_ratio_c);
    ac->set_loss_agg_mode(a.loss_agg_mode);
    ac->set_loss_scale_factor(static_cast<double>(a.loss_scale_factor.value_or(0)));
    ac->set_entropy_coeff(a.entropy_coeff);
    ac->set_use_kl_loss(a.use_kl_loss);
    ac->set_kl_loss_coef(a.kl_loss_coef);
    ac->set_kl_loss_type(a.kl_loss_type);
    ac->set_ppo_mini_batch_size(static_cast<int32_t>(a.ppo_mini_batch_size));
    const int64_t mini_seqs = a.ppo_mini_batch_size * arr.rollout.n / Trainers();
    ac->set_ppo_micro_batch_size_per_gpu(static_cast<int32_t>(a.ppo_micro_batch_size_per_gpu.value_or(mini_seqs)));
    ac->set_ppo_epochs(static_cast<int32_t>(a.ppo_epochs));
    ac->set_shuffle(a.shuffle);
    const AlgorithmConfig::RolloutCorrection& rc = config_.algorithm.rollout_correction;
    // verl's bypass mode replaces the policy loss with its own (apply_bypass_mode): PPO-clip against the rollout's
    // log-probs (vanilla with them as the old ones; the loader allows no other loss_mode with it), or REINFORCE.
    const bool reinforce = rc.bypass_mode && rc.loss_type == "reinforce";
    ac->set_loss_mode(reinforce ? "reinforce" : a.policy_loss.loss_mode);
    ac->set_clip_cov_ratio(a.policy_loss.clip_cov_ratio);
    ac->set_clip_cov_lb(a.policy_loss.clip_cov_lb);
    ac->set_clip_cov_ub(a.policy_loss.clip_cov_ub);
    ac->set_kl_cov_ratio(a.policy_loss.kl_cov_ratio);
    ac->set_ppo_kl_coef(a.policy_loss.ppo_kl_coef);
    ac->set_tau_pos(a.tau_pos);
    ac->set_tau_neg(a.tau_neg);
    // verl's rollout_correction.rollout_is=token is the same truncated IS (the loader refuses both set at once). In
    // bypass mode its weights are pi / pi_rollout, which only REINFORCE applies (PPO-clip's ratio is that already).
    if (rc.bypass_mode) {
      if (reinforce && rc.rollout_is == "token") ac->set_reinforce_is_threshold(rc.rollout_is_threshold);
    } else {
      ac->set_tis_imp_ratio_cap(rc.rollout_is == "token" ? rc.rollout_is_threshold : a.tis_imp_ratio_cap);
    }
    // verl's actor reports rollout_corr/* when the batch carries the rollout's log-probs: with
    // rollout.calculate_log_probs, which bypass mode requires there (ours are always there).
    ac->set_rollout_corr_metrics(arr.rollout.calculate_log_probs || rc.bypass_mode);
    ac->set_shard_optimizer_state(a.shard_optimizer_state);
    ac->set_shard_parameters(a.shard_parameters);
    ac->set_optimizer_offload(a.optimizer_offload);
    ac->set_ref_param_offload(config_.actor_rollout_ref.ref.param_offload);
    ac->set_rollout_gather_layer_by_layer(arr.rollout.gather_layer_by_layer);
    ac->set_rollout_enforce_eager(arr.rollout.enforce_eager);
    ac->set_rollout_no_prompt_sharing(!arr.rollout.enable_prefix_caching);
    ac->set_gradient_checkpointing(arr.model.enable_gradient_checkpointing);
    if (arr.model.recompute_num_layers) ac->set_recompute_num_layers(static_cast<int32_t>(*arr.model.recompute_num_layers));
    ac->set_recompute_keep_projections(arr.model.recompute_keep_projections);
    ac->set_remove_padding(arr.model.use_remove_padding);
    ac->set_prefix_grouper(a.use_prefix_grouper);
    if (a.use_dynamic_bsz) ac->set_ppo_max_token_len(a.ppo_max_token_len_per_gpu);
    if (arr.rollout.log_prob_use_dynamic_bsz) ac->set_log_prob_max_token_len(arr.rollout.log_prob_max_token_len_per_gpu);
    if (arr.ref.log_prob_use_dynamic_bsz) ac->set_ref_log_prob_max_token_len(arr.ref.log_prob_max_token_len_per_gpu);
    ac->set_rollout_max_num_seqs(static_cast<int32_t>(arr.rollout.max_num_seqs));
    ac->set_rollout_max_num_batched_tokens(arr.rollout.max_num_batched_tokens);
    ac->set_rollout_enable_chunked_prefill(arr.rollout.enable_chunked_prefill);
    ac->set_rollout_gpu_memory_utilization(arr.rollout.gpu_memory_utilization);
    const int64_t step_seqs = config_.data.train_batch_size * arr.rollout.n / Trainers();
    ac->set_log_prob_micro_batch_size_per_gpu(
        static_cast<int32_t>(arr.rollout.log_prob_micro_batch_size_per_gpu.value_or(step_seqs)));
    ac->set_ref_log_prob_micro_batch_size_per_gpu(
        static_cast<int32_t>(arr.ref.log_prob_micro_batch_size_per_gpu.value_or(step_seqs)));
    if (Placed()) {
      // The rollout ranks hold only the rollout (the actor's weights, no optimizer) and no data-parallel group; the
      // critic's ranks only the critic, in a group of their own.
      v1::ConfigureRolesRequest rollout = req;
      rollout.clear_roles();
      rollout.add_roles("rollout");
      rollout.set_world_size(1);
      v1::ConfigureRolesRequest critic = req;
      critic.clear_roles();
      critic.add_roles("critic");
      critic.set_world_size(static_cast<int32_t>(CriticRanks().size()));
      const int critic_end = Trainers() + static_cast<int>(config_.resource_pool.critic_ranks);
      RETURN_IF_ERROR(ranks_
                          ->ForEach<v1::ConfigureRolesResponse>([&](int r) {
                            const v1::ConfigureRolesRequest& mine =
                                r < Trainers() ? req : r < critic_end ? critic : rollout;
                            return ranks_->client(r).ConfigureRoles(ranks_->For(r, mine));
                          })
                          .status());
    } else {
      RETURN_IF_ERROR(OnAllRanks(req, &WorkerClient::ConfigureRoles).status());
    }
    ASSIGN_OR_RETURN(std::vector<v1::LoadModelResponse> loaded,
                     OnAllRanks(v1::LoadModelRequest(), &WorkerClient::LoadModel));
    spdlog::info("model loaded on {} rank(s): {} parameters", loaded.size(), loaded.front().num_parameters());
    return absl::OkStatus();
  }

  absl::Status OpenSinks() {
    const TrainerConfig& t = config_.trainer;
    if (options_.prometheus) {
      prometheus_ = options_.prometheus;
      ASSIGN_OR_RETURN(auto sink, PrometheusSink::Create(prometheus_, PrometheusJobLabels()));
      sinks_.Add(std::move(sink));
    }
    for (const std::string& logger : t.logger) {
      if (logger == "console") {
        sinks_.Add(std::make_unique<ConsoleSink>(options_.console ? options_.console : &std::cout, total_steps_));
      } else if (logger == "jsonl" || logger == "file") {
        // Keep the lines of the steps that stand (those up to the checkpoint resumed from); a fresh start keeps none.
        const std::string path = logger == "jsonl" ? t.log_dir + "/metrics.jsonl" : VerlFileLoggerPath(t);
        RETURN_IF_ERROR(JsonlSink::KeepStepsUpTo(path, global_step_ > 0 ? global_step_ : -1));
        ASSIGN_OR_RETURN(auto sink, JsonlSink::Open(path));
        spdlog::info("metrics: {}", sink->path());
        sinks_.Add(std::move(sink));
      } else if (logger == "prometheus") {
        if (options_.prometheus) continue;  // fed above, served by the JobService's endpoint
        // The registry and its endpoint live for the whole job (across recoveries); the sink feeds them.
        if (!prometheus_) {
          auto registry = std::make_shared<PrometheusRegistry>();
          MetricsHttpServerOptions o;
          o.listen = t.prometheus_listen;
          auto server = MetricsHttpServer::Start(o, [registry] {
            return MetricsHttpServer::Response{PrometheusRegistry::kContentType, registry->Render()};
          });
          if (!server.ok()) return Annotate(server.status(), "trainer.prometheus_listen");
          metrics_server_ = *std::move(server);
          prometheus_ = registry;
          spdlog::info("prometheus metrics: http://{}/metrics", metrics_server_->address());
        }
        ASSIGN_OR_RETURN(auto sink, PrometheusSink::Create(prometheus_, PrometheusJobLabels()));
        sinks_.Add(std::move(sink));
      } else if (logger == "tensorboard") {
        ASSIGN_OR_RETURN(auto sink, TensorBoardSink::Open(t.log_dir + "/tensorboard"));
        spdlog::info("tensorboard events: {}", sink->path());
        sinks_.Add(std::move(sink));
      } else {
        return absl::UnimplementedError(absl::StrCat("trainer.logger: '", logger, "' is not available in this build"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status MaybeResume() {
    ASSIGN_OR_RETURN(std::optional<CheckpointManager::Found> found,
                     checkpoints_->Find(config_.trainer.resume_mode, config_.trainer.resume_from_path));
    if (!found) return absl::OkStatus();
    return ResumeFrom(*found);
  }

  absl::Status ResumeFrom(const CheckpointManager::Found& found) {
    v1::LoadCheckpointRequest req;
    req.set_dir(fs::absolute(found.dir).string());
    req.set_global_step(found.global_step);
    RETURN_IF_ERROR(OnAllRanks(req, &WorkerClient::LoadCheckpoint, CheckpointRanks()).status());
    // The data position is where the checkpoint left it in a training set of the same size (and, for the same seed,
    // the same order); a set that changed since moves the position or the order.
    const std::string data_json = found.dir + "/data.json";
    if (auto it = found.controller_state.find("data.train_examples"); it != found.controller_state.end() &&
                                                                       it->second != sampler_->dataset_size()) {
      spdlog::warn("{} was saved with {} training examples; data.train_files has {} now: the resumed data order is "
                   "not the one the checkpointed run would have followed",
                   data_json, static_cast<int64_t>(it->second), sampler_->dataset_size());
    }
    RETURN_IF_ERROR(Annotate(sampler_->Restore(found.sampler_state),
                             absl::StrCat(data_json, " (data.train_files has ", sampler_->dataset_size(),
                                          " examples after filtering)")));
    if (auto it = found.controller_state.find("kl_ctrl.value"); it != found.controller_state.end()) {
      kl_ctrl_->set_value(it->second);
    }
    global_step_ = found.global_step;
    last_checkpoint_dir_ = found.dir;
    spdlog::info("resumed from {} (global step {})", found.dir, global_step_);
    return absl::OkStatus();
  }

  // A local worker died (or stopped answering): the step in flight is abandoned, the workers are restarted, and the
  // job continues from the last checkpoint this run wrote or resumed from (from the start when there is none).
  // Metrics of the abandoned steps are dropped from the JSONL file when the sinks reopen, so each step is recorded
  // once.
  //
  // Workers listed in cluster.worker_addresses (not started by us) cannot be restarted from here: the controller
  // waits up to cluster.worker_replacement_timeout_s for each address to answer again (a restarted daemon, a pod
  // that came back under its stable name), and sets every worker up from scratch, survivors included
  // (ConfigureRoles resets a rank: no batch, update count or communicator of the failed run is kept).
  absl::Status Recover() {
    const auto start = Clock::now();
    StopWorkers(/*graceful=*/false);
    (void)sinks_.Close();
    sinks_ = MultiSink();
    recovering_ = true;
    absl::Status started = StartWorkers();
    recovering_ = false;
    RETURN_IF_ERROR(started);
    RETURN_IF_ERROR(LoadModels());
    RETURN_IF_ERROR(sampler_->Restore(ResumableSampler::State{}));
    kl_ctrl_->set_value(config_.algorithm.kl_ctrl.kl_coef);
    global_step_ = 0;
    if (!last_checkpoint_dir_.empty()) {
      ASSIGN_OR_RETURN(std::optional<CheckpointManager::Found> found,
                       checkpoints_->Find("resume_path", last_checkpoint_dir_));
      RETURN_IF_ERROR(ResumeFrom(*found));
    }
    RETURN_IF_ERROR(OpenSinks());
    spdlog::info("recovered in {:.1f} s; continuing at step {}", Seconds(start), global_step_ + 1);
    return absl::OkStatus();
  }

  // Whether `status` comes from a worker that died or stopped answering: a local one we restart, or a listed one
  // whose replacement we wait for.
  bool IsWorkerFailure(const absl::Status& status) {
    if (owner_->cancel_requested_.load()) return false;
    if (launcher_ && !launcher_->CheckAlive().ok()) return true;
    return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
  }

  v1::SamplingParams Sampling(bool validation, int64_t step) const {
    const RolloutConfig& r = config_.actor_rollout_ref.rollout;
    v1::SamplingParams s;
    if (validation) {
      s.set_temperature(r.val_kwargs.temperature > 0 ? r.val_kwargs.temperature : 1.0);
      s.set_top_k(static_cast<int32_t>(r.val_kwargs.top_k));
      s.set_top_p(r.val_kwargs.top_p);
      s.set_do_sample(r.val_kwargs.do_sample);
      s.set_n(static_cast<int32_t>(r.val_kwargs.n));
    } else {
      s.set_temperature(r.temperature);
      s.set_top_k(static_cast<int32_t>(r.top_k));
      s.set_top_p(r.top_p);
      s.set_do_sample(r.do_sample);
      s.set_n(static_cast<int32_t>(r.n));
    }
    s.set_max_new_tokens(static_cast<int32_t>(config_.data.max_response_length));
    for (int32_t id : eos_ids_) s.add_eos_token_ids(id);
    s.set_ignore_eos(r.ignore_eos);
    s.set_pad_token_id(pad_id_);
    s.set_seed(static_cast<uint64_t>(config_.trainer.seed) * 1000003ULL + static_cast<uint64_t>(step) * 7919ULL +
               (validation ? 1 : 0));
    return s;
  }

  static void AddPrompt(v1::GenerateRequest& req, const PreparedExample& ex, const std::string& uid,
                        int64_t sample_index) {
    FillPrompt(req.add_prompts(), ex, uid, sample_index);
  }
  static void FillPrompt(v1::Prompt* p, const PreparedExample& ex, const std::string& uid, int64_t sample_index) {
    p->mutable_token_ids()->Add(ex.token_ids.begin(), ex.token_ids.end());
    p->set_uid(uid);
    p->set_data_source(ex.data_source);
    p->set_ground_truth(ex.ground_truth);
    p->set_extra_info_json(ex.extra_info_json);
    p->set_sample_index(sample_index);
  }

  // Which prompts (indices into a list of `count`) each of `parts` ranks gets; whole prompts, so all rollout.n samples
  // of a prompt stay on one rank. With `block` > 0 (the mini-batch, in prompts) that both count and parts divide, each
  // consecutive block of prompts is split evenly over the ranks: rank r's k-th local mini-batch is then exactly its
  // share of the k-th global mini-batch, so an update over several mini-batches gives what one rank would get.
  // Otherwise rank r gets a contiguous, nearly equal slice (possibly empty).
  static std::vector<std::vector<int64_t>> AssignPrompts(int64_t count, int parts, int64_t block) {
    std::vector<std::vector<int64_t>> out(parts);
    if (block > 0 && count % block == 0 && block % parts == 0) {
      const int64_t share = block / parts;
      for (int64_t i = 0; i < count; ++i) out[(i % block) / share].push_back(i);
      return out;
    }
    const int64_t base = count / parts;
    const int64_t extra = count % parts;
    for (int r = 0; r < parts; ++r) {
      const int64_t begin = r * base + std::min<int64_t>(r, extra);
      const int64_t end = begin + base + (r < extra ? 1 : 0);
      for (int64_t i = begin; i < end; ++i) out[r].push_back(i);
    }
    return out;
  }

  // Generates for prompts[i] (uid uid_prefix + (first_index + i), sample index first_index + i) on the ranks as
  // `assignment` says; ranks assigned nothing get no call. Returns the ranks called and their responses, in rank order.
  absl::StatusOr<std::pair<std::vector<int>, std::vector<v1::GenerateResponse>>> GenerateOnRanks(
      const std::string& step_id, const std::vector<const PreparedExample*>& prompts,
      const std::vector<std::vector<int64_t>>& assignment, const std::string& uid_prefix, int64_t first_index,
      const v1::SamplingParams& sampling, bool greedy_baseline) {
    std::vector<v1::GenerateRequest> requests(World());
    std::vector<int> called, joining;
    // With the actor's parameters sharded over its ranks, a rank without prompts still joins the gathers (an empty
    // Generate); its answer is dropped.
    const bool sharded = !Split() && config_.actor_rollout_ref.actor.shard_parameters && Trainers() > 1;
    for (int r = 0; r < World(); ++r) {
      if (assignment[r].empty()) {
        if (sharded) {
          requests[r].set_step_id(step_id);
          *requests[r].mutable_sampling() = sampling;
          requests[r].set_greedy_baseline(greedy_baseline);
          joining.push_back(r);
        }
        continue;
      }
      called.push_back(r);
      v1::GenerateRequest& req = requests[r];
      req.set_step_id(step_id);
      for (int64_t i : assignment[r]) {
        AddPrompt(req, *prompts[i], absl::StrCat(uid_prefix, first_index + i), first_index + i);
      }
      *req.mutable_sampling() = sampling;
      req.set_greedy_baseline(greedy_baseline);
    }
    std::vector<int> all = called;
    all.insert(all.end(), joining.begin(), joining.end());
    std::sort(all.begin(), all.end());
    ASSIGN_OR_RETURN(std::vector<v1::GenerateResponse> answers,
                     ranks_->ForEach<v1::GenerateResponse>(
                         [&](int r) { return ranks_->client(r).Generate(ranks_->For(r, requests[r])); }, all));
    std::vector<v1::GenerateResponse> out;
    for (size_t i = 0; i < all.size(); ++i) {
      if (!assignment[all[i]].empty()) out.push_back(std::move(answers[i]));
    }
    return std::make_pair(called, std::move(out));
  }

  // Split placement: moves each prompt's rows from the rollout rank that generated and scored them to the training
  // rank that trains on them, rank to rank (TransferBatch on every rank at once; the controller sends only the plan
  // and the prompts' metadata).
  absl::StatusOr<Metrics> TransferRows(const std::string& step_id, int64_t step,
                                       const std::vector<const PreparedExample*>& prompts,
                                       const std::vector<std::vector<int64_t>>& gen_assignment,
                                       const std::vector<std::vector<int64_t>>& train_assignment) {
    // Where each prompt was generated: rank and position in that rank's Generate request.
    std::vector<std::pair<int, int64_t>> held(prompts.size(), {-1, -1});
    for (int r = 0; r < World(); ++r) {
      for (size_t k = 0; k < gen_assignment[r].size(); ++k) held[gen_assignment[r][k]] = {r, static_cast<int64_t>(k)};
    }
    std::vector<v1::TransferBatchRequest> requests(World());
    for (auto& req : requests) {
      req.set_step_id(step_id);
      req.set_n(static_cast<int32_t>(config_.actor_rollout_ref.rollout.n));
      req.set_pad_token_id(pad_id_);
    }
    for (int t = 0; t < World(); ++t) {
      for (int64_t i : train_assignment[t]) {  // ascending, so each source's rows come in its own order too
        const auto [source, local] = held[i];
        FillPrompt(requests[t].add_prompts(), *prompts[i], absl::StrCat(step, "-", i), i);
        requests[t].add_sources(source);
        v1::TransferBatchRequest& from = requests[source];
        if (from.sends_size() == 0 || from.sends(from.sends_size() - 1).peer() != t) from.add_sends()->set_peer(t);
        from.mutable_sends(from.sends_size() - 1)->add_prompt_indices(local);
      }
    }
    ASSIGN_OR_RETURN(std::vector<v1::TransferBatchResponse> moved,
                     ranks_->ForEach<v1::TransferBatchResponse>(
                         [&](int r) { return ranks_->client(r).TransferBatch(ranks_->For(r, requests[r])); }));
    Metrics m;
    MergeMetrics(m, moved);
    return m;
  }

  // Critic on ranks of its own: `column` of the step goes from from[i] to to[i] (the same rows on both), every pair at
  // once. No-op when the critic is on the actor's ranks (from == to).
  absl::Status MoveColumn(const std::string& step_id, const std::string& column, const std::vector<int>& from,
                          const std::vector<int>& to) {
    if (from == to) return absl::OkStatus();
    std::vector<v1::TransferColumnRequest> requests(World());
    std::vector<int> called;
    for (size_t i = 0; i < from.size(); ++i) {
      for (auto [rank, peer, send] : {std::tuple{from[i], to[i], true}, std::tuple{to[i], from[i], false}}) {
        requests[rank].set_step_id(step_id);
        requests[rank].set_column(column);
        requests[rank].set_peer(peer);
        requests[rank].set_send(send);
        called.push_back(rank);
      }
    }
    std::sort(called.begin(), called.end());
    return ranks_
        ->ForEach<v1::TransferColumnResponse>(
            [&](int r) { return ranks_->client(r).TransferColumn(ranks_->For(r, requests[r])); }, called)
        .status();
  }

  absl::StatusOr<Metrics> TrainStep(int64_t step) {
    const std::string step_id = absl::StrCat("train-", step);
    const ActorRolloutRefConfig& arr = config_.actor_rollout_ref;
    const double temperature = arr.rollout.temperature;
    Metrics m;
    std::vector<int64_t> indices = sampler_->NextBatch();

    SetState(JobState::kStepRollout);
    auto t0 = Clock::now();
    std::vector<const PreparedExample*> prompts;
    for (int64_t index : indices) prompts.push_back(&train_[index]);
    const int64_t count = static_cast<int64_t>(prompts.size());
    // The training ranks' prompts: each mini-batch split evenly over them (see AssignPrompts).
    const auto train_assignment =
        AssignTo(TrainerRanks(), World(), count,
                 config_.actor_rollout_ref.actor.shuffle ? 0 : config_.actor_rollout_ref.actor.ppo_mini_batch_size);
    // Colocated, each rank generates its own training prompts; split, the rollout ranks generate contiguous slices.
    const auto gen_assignment = Split() ? AssignTo(RolloutRanks(), World(), count, 0) : train_assignment;
    ASSIGN_OR_RETURN(auto generated, GenerateOnRanks(step_id, prompts, gen_assignment, absl::StrCat(step, "-"), 0,
                                                     Sampling(false, step),
                                                     config_.algorithm.adv_estimator == "remax"));
    if (!Split() && generated.first.size() != TrainerRanks().size()) {
      return absl::InternalError("every rank must hold prompts of a training step");
    }
    m["timing_s/gen"] = Seconds(t0);
    MergeMetrics(m, generated.second);
    RETURN_IF_ERROR(CheckInterrupt());

    SetState(JobState::kStepReward);
    t0 = Clock::now();
    v1::ScoreRequest score_req;
    score_req.set_step_id(step_id);
    ASSIGN_OR_RETURN(std::vector<v1::ScoreResponse> scored,
                     OnAllRanks(score_req, &WorkerClient::Score, generated.first));
    m["timing_s/reward"] = Seconds(t0);
    std::vector<double> scores;
    for (const v1::ScoreResponse& s : scored) scores.insert(scores.end(), s.scores().begin(), s.scores().end());
    AddMeanMaxMin("critic/score", scores, &m);
    RETURN_IF_ERROR(CheckInterrupt());

    if (Split()) {
      t0 = Clock::now();
      ASSIGN_OR_RETURN(Metrics moved, TransferRows(step_id, step, prompts, gen_assignment, train_assignment));
      m.insert(moved.begin(), moved.end());
      m["timing_s/transfer_batch"] = Seconds(t0);
    }
    const std::vector<int> trainers = TrainerRanks();
    if (CriticSplit()) {
      // Each critic rank takes the rows of its actor rank (actor rank i -> critic rank A + i).
      t0 = Clock::now();
      std::vector<std::vector<int64_t>> critic_assignment(World());
      const std::vector<int> critics = CriticRanks();
      for (size_t i = 0; i < critics.size(); ++i) critic_assignment[critics[i]] = train_assignment[trainers[i]];
      RETURN_IF_ERROR(TransferRows(step_id, step, prompts, train_assignment, critic_assignment).status());
      m["timing_s/transfer_batch"] += Seconds(t0);
    }

    const uint64_t update_seed = static_cast<uint64_t>(config_.trainer.seed) * 31ULL + static_cast<uint64_t>(step);
    const bool actor_updates = config_.trainer.critic_warmup <= step;
    SetState(JobState::kStepOldLogProb);
    t0 = Clock::now();
    v1::ComputeLogProbsRequest lp;
    lp.set_step_id(step_id);
    lp.set_role("actor");
    lp.set_temperature(temperature);
    // verl's bypass mode: the rollout's log-probs are the old ones, no forward (and, as in verl, no old_log_prob time
    // nor the trainer-against-rollout figures, which would compare them with themselves).
    const bool bypass = config_.algorithm.rollout_correction.bypass_mode;
    lp.set_from_rollout(bypass);
    // Otherwise the update's first mini-batch takes its old log-probs from its own forward (the policy is still the
    // rollout's then), unless the advantage needs them before the update or no update comes this step.
    lp.set_defer_first_mini_batch(!bypass && config_.actor_rollout_ref.actor.defer_first_mini_batch_log_probs &&
                                  !config_.algorithm.use_kl_in_reward && actor_updates);
    lp.set_update_seed(update_seed);
    ASSIGN_OR_RETURN(auto old_lp, OnAllRanks(lp, &WorkerClient::ComputeLogProbs, trainers));
    MergeMetrics(m, old_lp);
    if (!bypass) m["timing_s/old_log_prob"] = Seconds(t0);

    if (NeedRef()) {
      SetState(JobState::kStepRefLogProb);
      t0 = Clock::now();
      lp.set_role("ref");
      lp.set_defer_first_mini_batch(false);
      lp.set_from_rollout(false);
      ASSIGN_OR_RETURN(auto ref_lp, OnAllRanks(lp, &WorkerClient::ComputeLogProbs, trainers));
      MergeMetrics(m, ref_lp);
      m["timing_s/ref"] = Seconds(t0);
    }
    RETURN_IF_ERROR(CheckInterrupt());

    if (config_.UseCritic()) {
      SetState(JobState::kStepValues);
      t0 = Clock::now();
      v1::ComputeValuesRequest vr;
      vr.set_step_id(step_id);
      ASSIGN_OR_RETURN(auto values, OnAllRanks(vr, &WorkerClient::ComputeValues, CriticRanks()));
      MergeMetrics(m, values);
      RETURN_IF_ERROR(MoveColumn(step_id, "values", CriticRanks(), trainers));  // for the advantage
      m["timing_s/values"] = Seconds(t0);
    }
    RETURN_IF_ERROR(CheckInterrupt());

    SetState(JobState::kStepAdvantage);
    t0 = Clock::now();
    const AlgorithmConfig& al = config_.algorithm;
    v1::ComputeAdvantageRequest adv;
    adv.set_step_id(step_id);
    adv.set_estimator(al.adv_estimator);
    adv.set_norm_adv_by_std_in_grpo(al.norm_adv_by_std_in_grpo);
    adv.set_gamma(al.gamma);
    adv.set_lam(al.lam);
    adv.set_use_kl_in_reward(al.use_kl_in_reward);
    adv.set_kl_coef(kl_ctrl_->value());
    adv.set_kl_penalty(al.kl_penalty);
    ASSIGN_OR_RETURN(auto adv_resp, OnAllRanks(adv, &WorkerClient::ComputeAdvantage, trainers));
    MergeMetrics(m, adv_resp);
    if (al.use_kl_in_reward) {
      kl_ctrl_->Update(m["actor/reward_kl_penalty"], static_cast<int64_t>(scores.size()));
    }
    m["timing_s/adv"] = Seconds(t0);

    // With the critic on ranks of its own its update runs alongside the actor's (joined before the step ends, also
    // when the actor's fails); on the actor's ranks, before it.
    std::optional<absl::StatusOr<std::vector<v1::UpdateCriticResponse>>> critic_resp;
    double critic_seconds = 0;
    std::thread critic_thread;
    struct Joiner {
      std::thread& t;
      ~Joiner() {
        if (t.joinable()) t.join();
      }
    } joiner{critic_thread};
    if (config_.UseCritic()) {
      SetState(JobState::kStepCriticUpdate);
      v1::UpdateCriticRequest cr;
      cr.set_step_id(step_id);
      cr.set_seed(update_seed);
      RETURN_IF_ERROR(MoveColumn(step_id, "returns", trainers, CriticRanks()));
      auto update_critic = [this, cr, &critic_resp, &critic_seconds] {
        const auto start = Clock::now();
        critic_resp = OnAllRanks(cr, &WorkerClient::UpdateCritic, CriticRanks());
        critic_seconds = Seconds(start);
      };
      if (CriticSplit()) {
        critic_thread = std::thread(update_critic);
      } else {
        update_critic();
      }
    }
    auto finish_critic = [&]() -> absl::Status {
      if (critic_thread.joinable()) critic_thread.join();
      if (!critic_resp) return absl::OkStatus();
      RETURN_IF_ERROR(critic_resp->status());
      MergeMetrics(m, **critic_resp);
      m["timing_s/update_critic"] = critic_seconds;
      return absl::OkStatus();
    };
    if (!CriticSplit()) RETURN_IF_ERROR(finish_critic());

    // verl: the actor starts updating once the critic has warmed up.
    absl::Status actor_status = [&]() -> absl::Status {
      if (!actor_updates) return absl::OkStatus();
      SetState(JobState::kStepActorUpdate);
      t0 = Clock::now();
      v1::UpdateActorRequest upd;
      upd.set_step_id(step_id);
      upd.set_temperature(temperature);
      upd.set_seed(update_seed);
      ASSIGN_OR_RETURN(auto upd_resp, OnAllRanks(upd, &WorkerClient::UpdateActor, trainers));
      MergeMetrics(m, upd_resp);
      m["timing_s/update_actor"] = Seconds(t0);
      // Split placement: the rollout ranks generate the next step with the updated weights.
      ASSIGN_OR_RETURN(Metrics synced, SyncRolloutWeights());
      m.insert(synced.begin(), synced.end());
      return absl::OkStatus();
    }();
    absl::Status critic_status = finish_critic();
    // With the critic on ranks of its own, a failed critic rank has every rank's communicator aborted (the relay), so
    // the actor's calls fail too, as ABORTED: the critic's error is then the cause (and tells a worker failure, which
    // is recovered from, from an abort, which is not).
    if (!actor_status.ok() && !critic_status.ok() &&
        (absl::IsAborted(actor_status) || absl::IsCancelled(actor_status))) {
      return critic_status;
    }
    RETURN_IF_ERROR(actor_status);
    RETURN_IF_ERROR(critic_status);

    v1::ReleaseBatchRequest rel;
    rel.set_step_id(step_id);
    RETURN_IF_ERROR(OnAllRanks(rel, &WorkerClient::ReleaseBatch).status());  // ranks without the step: a no-op

    std::vector<double> resp_len, prompt_len;
    for (const v1::GenerateResponse& g : generated.second) {
      resp_len.insert(resp_len.end(), g.response_lengths().begin(), g.response_lengths().end());
      prompt_len.insert(prompt_len.end(), g.prompt_lengths().begin(), g.prompt_lengths().end());
    }
    // Length statistics, verl's names.
    const double max_resp = static_cast<double>(config_.data.max_response_length);
    const double max_prompt = static_cast<double>(config_.data.max_prompt_length);
    AddMeanMaxMin("response_length", resp_len, &m);
    AddMeanMaxMin("prompt_length", prompt_len, &m);
    double resp_clipped = 0, prompt_clipped = 0, tokens = 0;
    for (double v : resp_len) resp_clipped += v >= max_resp ? 1 : 0;
    for (double v : prompt_len) prompt_clipped += v >= max_prompt ? 1 : 0;
    for (size_t i = 0; i < resp_len.size(); ++i) tokens += resp_len[i] + prompt_len[i];
    m["response_length/clip_ratio"] = resp_len.empty() ? 0 : resp_clipped / resp_len.size();
    m["prompt_length/clip_ratio"] = prompt_len.empty() ? 0 : prompt_clipped / prompt_len.size();
    m["perf/total_num_tokens"] = tokens;
    return m;
  }

  // Generates once (val_kwargs) for every validation prompt and reports the mean score per data source.
  absl::StatusOr<Metrics> Validate(int64_t step) {
    SetState(JobState::kValidating);
    const int64_t chunk = config_.data.val_batch_size.value_or(static_cast<int64_t>(val_.size()));
    std::map<std::string, std::vector<double>> by_source;
    std::vector<ValGeneration> generations;  // with trainer.log_val_generations
    for (int64_t begin = 0, part = 0; begin < static_cast<int64_t>(val_.size()); begin += chunk, ++part) {
      RETURN_IF_ERROR(CheckInterrupt());
      const int64_t end = std::min<int64_t>(begin + chunk, val_.size());
      const std::string step_id = absl::StrCat("val-", step, "-", part);
      std::vector<const PreparedExample*> prompts;
      for (int64_t i = begin; i < end; ++i) prompts.push_back(&val_[i]);
      const v1::SamplingParams sampling = Sampling(true, step);
      const int64_t n = sampling.n();
      // Validation prompts need not divide evenly: ranks get nearly equal slices, and none when there are fewer
      // prompts than ranks.
      ASSIGN_OR_RETURN(auto generated,
                       GenerateOnRanks(step_id, prompts, AssignTo(RolloutRanks(), World(), end - begin, 0),
                                       "val-", begin, sampling, false));
      const std::vector<int>& called = generated.first;
      v1::ScoreRequest sr;
      sr.set_step_id(step_id);
      ASSIGN_OR_RETURN(std::vector<v1::ScoreResponse> scored, OnAllRanks(sr, &WorkerClient::Score, called));
      int64_t i = 0;
      std::string input;  // with log_val_generations: the prompt of sample i, decoded once for its n samples
      for (const v1::ScoreResponse& s : scored) {
        for (int k = 0; k < s.scores_size(); ++k, ++i) {
          const PreparedExample& example = val_[begin + i / n];
          by_source[example.data_source].push_back(s.scores(k));
          if (config_.trainer.log_val_generations > 0) {
            if (i % n == 0) input = tokenizer_->Decode(example.token_ids, /*skip_special_tokens=*/true);
            generations.push_back({input, k < s.response_texts_size() ? s.response_texts(k) : std::string(),
                                   s.scores(k)});
          }
        }
      }
      v1::ReleaseBatchRequest rel;
      rel.set_step_id(step_id);
      RETURN_IF_ERROR(OnAllRanks(rel, &WorkerClient::ReleaseBatch, called).status());
    }
    if (config_.trainer.log_val_generations > 0) {
      const std::vector<ValGeneration> picked =
          PickValGenerations(std::move(generations), config_.trainer.log_val_generations);
      RETURN_IF_ERROR(sinks_.LogText(step, "val/generations", ValGenerationsMarkdown(step, picked)));
    }
    Metrics m;
    const int64_t n = config_.actor_rollout_ref.rollout.val_kwargs.n;
    for (const auto& [source, scores] : by_source) {
      m[absl::StrCat("val-core/", source, "/reward/mean@", n)] =
          std::accumulate(scores.begin(), scores.end(), 0.0) / static_cast<double>(scores.size());
    }
    return m;
  }

  JobRunner* owner_;
  JobConfig config_;
  JobRunnerOptions options_;
  Clock::time_point state_since_ = Clock::now();

  DecoderConfig model_config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplateOptions chat_options_;
  std::vector<int32_t> eos_ids_;
  int32_t pad_id_ = 0;
  std::vector<PreparedExample> train_;
  std::vector<PreparedExample> val_;
  std::unique_ptr<ResumableSampler> sampler_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<KlController> kl_ctrl_;
  int64_t total_steps_ = 0;
  int64_t global_step_ = 0;
  // The newest checkpoint this run wrote or resumed from (trainer.resume_from_path may lie outside
  // trainer.default_local_dir); empty before there is one.
  std::string last_checkpoint_dir_;
  int64_t restarts_ = 0;
  bool recovering_ = false;  // StartWorkers is setting up again after a worker failure

  std::unique_ptr<LocalWorkerLauncher> launcher_;
  // Guards workers_ (read by CancelInFlight from a signal thread and by the heartbeat), last_metrics_ and the
  // heartbeat's state.
  mutable std::mutex mu_;
  std::thread heartbeat_;
  std::condition_variable heartbeat_cv_;
  bool heartbeat_stop_ = true;
  absl::Status heartbeat_failure_;
  std::vector<std::unique_ptr<WorkerClient>> workers_;  // one per worker: health, heartbeat, shutdown
  std::unique_ptr<RankGroup> ranks_;                    // one client per rank: the step calls
  std::shared_ptr<PrometheusRegistry> prometheus_;      // with trainer.logger prometheus
  std::unique_ptr<MetricsHttpServer> metrics_server_;

  PrometheusLabels PrometheusJobLabels() const {
    PrometheusLabels labels = options_.prometheus_labels;
    labels["project"] = config_.trainer.project_name;
    labels["experiment"] = config_.trainer.experiment_name;
    return labels;
  }
  Metrics last_metrics_;
  MultiSink sinks_;

 public:
  // The checkpoint manager calls back into the workers through this.
  absl::Status SaveOnWorkers(const std::string& dir, int64_t step, bool hf_export) {
    v1::SaveCheckpointRequest req;
    req.set_dir(fs::absolute(dir).string());
    req.set_global_step(step);
    req.set_hf_export(hf_export);
    return OnAllRanks(req, &WorkerClient::SaveCheckpoint, CheckpointRanks()).status();
  }
};

JobRunner::JobRunner(JobConfig config, JobRunnerOptions options)
    : impl_(std::make_unique<Impl>(this, std::move(config), std::move(options))) {}

JobRunner::~JobRunner() = default;

void JobRunner::RequestCancel() {
  cancel_requested_.store(true);
  impl_->CancelInFlight();
}

absl::Status JobRunner::Run() { return impl_->Run(); }

std::map<std::string, double> JobRunner::last_metrics() const { return impl_->LastMetrics(); }

}  // namespace verl

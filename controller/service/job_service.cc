#include "controller/service/job_service.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config/config_loader.h"
#include "common/rpc/credentials.h"
#include "common/status/grpc_status.h"
#include "controller/job/job_runner.h"
#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/spdlog.h"

namespace verl {
namespace {

constexpr char kJobsGauge[] = "verl_jobs";
constexpr char kSubmittedConfigName[] = "submitted config";
constexpr size_t kLogChunkBytes = 64 * 1024;
constexpr auto kPollInterval = std::chrono::milliseconds(250);

grpc::Status NotFound(const std::string& id) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("no job '", id, "'"));
}

}  // namespace

bool JobService::IsEnded(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED || state == v1::JOB_STATE_CANCELLED;
}

const char* JobService::StateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_QUEUED: return "queued";
    case v1::JOB_STATE_RUNNING: return "running";
    case v1::JOB_STATE_SUCCEEDED: return "succeeded";
    case v1::JOB_STATE_FAILED: return "failed";
    case v1::JOB_STATE_CANCELLED: return "cancelled";
    default: return "unspecified";
  }
}

int64_t JobService::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::unique_ptr<JobService>> JobService::Create(JobServiceOptions options) {
  auto store = JobStore::Open(options.state_dir);
  if (!store.ok()) return store.status();
  auto stored = (*store)->LoadAll();
  if (!stored.ok()) return stored.status();
  if (options.prometheus) {
    if (absl::Status s = options.prometheus->DeclareGauge(kJobsGauge, "Jobs of this JobService by state."); !s.ok()) {
      return s;
    }
  }
  std::unique_ptr<JobService> service(new JobService(std::move(options), *std::move(store)));
  std::lock_guard<std::mutex> lock(service->mu_);
  for (auto& s : *stored) {
    Entry entry{std::move(s.job), std::move(s.metrics)};
    if (entry.job.state() == v1::JOB_STATE_RUNNING && entry.job.cancel_requested()) {
      // Cancelled, but the server stopped before the job did: it stays cancelled.
      entry.job.set_state(v1::JOB_STATE_CANCELLED);
      entry.job.set_stage("");
      if (entry.job.error().empty()) entry.job.set_error("cancelled (the server stopped before the job did)");
      entry.job.set_end_time_ms(NowMs());
      spdlog::warn("{} was being cancelled when the server stopped: cancelled", entry.job.id());
      service->CommitLocked(entry);
    } else if (entry.job.state() == v1::JOB_STATE_RUNNING) {
      // The server stopped while this job ran: it runs again first and resumes from its last checkpoint.
      entry.job.set_state(v1::JOB_STATE_QUEUED);
      entry.job.set_stage("");
      entry.job.set_restarts(entry.job.restarts() + 1);
      spdlog::warn("{} was running when the server stopped: queued again (restart {})", entry.job.id(),
                   entry.job.restarts());
      service->CommitLocked(entry);
    }
    std::string id = entry.job.id();
    service->jobs_.emplace(std::move(id), std::move(entry));
  }
  service->UpdateGaugesLocked();
  spdlog::info("job service: {} job(s) in {}", service->jobs_.size(), service->options_.state_dir);
  return service;
}

JobService::JobService(JobServiceOptions options, std::unique_ptr<JobStore> store)
    : options_(std::move(options)), store_(std::move(store)) {}

JobService::~JobService() { Shutdown(); }

void JobService::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || shutting_down_) return;
  thread_ = std::thread([this] { RunLoop(); });
}

void JobService::Shutdown() {
  std::shared_ptr<JobRunner> running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    running = running_;
    ++version_;
  }
  cv_.notify_all();
  if (running) running->RequestCancel();
  if (thread_.joinable()) thread_.join();
}

JobService::Entry* JobService::FindLocked(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobService::CommitLocked(const Entry& entry) {
  if (absl::Status s = store_->Save(entry.job); !s.ok()) spdlog::error("job service: {}", std::string(s.message()));
  UpdateGaugesLocked();
  ++version_;
  cv_.notify_all();
}

void JobService::UpdateGaugesLocked() {
  if (!options_.prometheus) return;
  std::map<v1::JobState, int> counts;
  for (auto state : {v1::JOB_STATE_QUEUED, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED,
                     v1::JOB_STATE_CANCELLED}) {
    counts[state] = 0;
  }
  for (const auto& [id, e] : jobs_) ++counts[e.job.state()];
  for (const auto& [state, n] : counts) {
    (void)options_.prometheus->SetGauge(kJobsGauge, {{"state", StateName(state)}}, n);
  }
}

void JobService::RunLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    std::string next;
    cv_.wait(lock, [&] {
      if (shutting_down_) return true;
      for (const auto& [id, e] : jobs_) {  // ids sort in submission order
        if (e.job.state() == v1::JOB_STATE_QUEUED) {
          next = id;
          return true;
        }
      }
      return false;
    });
    if (shutting_down_) return;
    lock.unlock();
    RunJob(next);
    lock.lock();
  }
}

void JobService::RunJob(const std::string& id) {
  std::string yaml;
  std::vector<std::string> overrides;
  std::string log_path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry* e = FindLocked(id);
    if (e == nullptr || e->job.state() != v1::JOB_STATE_QUEUED) return;
    e->job.set_state(v1::JOB_STATE_RUNNING);
    e->job.set_stage("init");
    e->job.set_start_time_ms(NowMs());
    e->job.clear_error();
    yaml = e->job.config_yaml();
    overrides.assign(e->job.overrides().begin(), e->job.overrides().end());
    log_path = store_->LogPath(id);
    cancel_running_ = false;
    CommitLocked(*e);
  }

  // The job's log: the console progress (through `console`) and, while it runs, every line of the default logger.
  std::ofstream console(log_path, std::ios::app);
  console << std::unitbuf;
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> file_sink;
  if (options_.log_tee) {
    try {
      file_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_path, /*truncate=*/false);
      file_sink->set_pattern("[%H:%M:%S] [controller] [%l] %v");
      options_.log_tee->add_sink(file_sink);
    } catch (const spdlog::spdlog_ex& e) {
      spdlog::error("{}: cannot open its log '{}': {}", id, log_path, e.what());
    }
  }
  spdlog::info("{}: started", id);

  absl::Status status;
  auto loaded = LoadConfigFromString(yaml, kSubmittedConfigName, overrides);
  if (!loaded.ok()) {
    status = loaded.status();  // validated at submit time; a changed schema (new server version) can still refuse it
  } else {
    JobRunnerOptions ro;
    ro.default_worker_binary = options_.default_worker_binary;
    ro.console = &console;
    ro.prometheus = options_.prometheus;
    ro.prometheus_labels = {{"job_id", id}};
    ro.on_state = [this, id](JobState s) {
      std::lock_guard<std::mutex> lock(mu_);
      if (Entry* e = FindLocked(id)) {
        e->job.set_stage(JobStateName(s));
        ++version_;
        cv_.notify_all();
      }
    };
    ro.on_total_steps = [this, id](int64_t total) {
      std::lock_guard<std::mutex> lock(mu_);
      if (Entry* e = FindLocked(id)) {
        e->job.set_total_steps(total);
        CommitLocked(*e);
      }
    };
    ro.on_metrics = [this, id](int64_t step, const std::map<std::string, double>& metrics) {
      std::lock_guard<std::mutex> lock(mu_);
      Entry* e = FindLocked(id);
      if (e == nullptr) return;
      v1::StepMetrics record;
      record.set_step(step);
      record.mutable_metrics()->insert(metrics.begin(), metrics.end());
      // A resumed job repeats the steps after its checkpoint: their old records go.
      const bool rewrite = !e->metrics.empty() && e->metrics.back().step() >= step;
      if (rewrite) {
        e->metrics.erase(std::remove_if(e->metrics.begin(), e->metrics.end(),
                                        [step](const v1::StepMetrics& r) { return r.step() >= step; }),
                         e->metrics.end());
        e->rewrites_from.push_back(step);
      }
      if (absl::Status s = store_->AppendMetrics(id, record, e->metrics, rewrite); !s.ok()) {
        spdlog::error("job service: {}", std::string(s.message()));
      }
      e->metrics.push_back(record);
      if (step > 0) e->job.set_current_step(step);
      *e->job.mutable_last_metrics() = record.metrics();
      CommitLocked(*e);
    };
    auto runner = std::make_shared<JobRunner>(std::move(loaded->job), std::move(ro));
    bool cancel_now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = runner;
      running_id_ = id;
      cancel_now = cancel_running_ || shutting_down_;
    }
    if (cancel_now) runner->RequestCancel();
    status = runner->Run();
  }

  std::lock_guard<std::mutex> lock(mu_);
  running_.reset();
  running_id_.clear();
  Entry* e = FindLocked(id);
  if (e == nullptr) return;
  e->job.set_stage("");
  if (status.ok()) {
    e->job.set_state(v1::JOB_STATE_SUCCEEDED);
    spdlog::info("{}: succeeded", id);
  } else if (absl::IsCancelled(status) && shutting_down_ && !cancel_running_) {
    // Interrupted by the server's shutdown, not by a client: runs again (resuming) on the next start.
    e->job.set_state(v1::JOB_STATE_QUEUED);
    e->job.set_restarts(e->job.restarts() + 1);
    spdlog::info("{}: interrupted by the server's shutdown; stays queued", id);
  } else if (absl::IsCancelled(status)) {
    e->job.set_state(v1::JOB_STATE_CANCELLED);
    e->job.set_error("cancelled by CancelJob while running");
    spdlog::info("{}: cancelled", id);
  } else {
    e->job.set_state(v1::JOB_STATE_FAILED);
    e->job.set_error(std::string(status.message()));
    spdlog::error("{}: failed: {}", id, std::string(status.message()));
  }
  if (IsEnded(e->job.state())) e->job.set_end_time_ms(NowMs());
  cancel_running_ = false;
  if (file_sink) options_.log_tee->remove_sink(file_sink);
  CommitLocked(*e);
}

grpc::Status JobService::SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                                   v1::Job* reply) {
  if (grpc::Status auth = CheckBearerToken(*context, options_.token); !auth.ok()) return auth;
  const std::vector<std::string> overrides(request->overrides().begin(), request->overrides().end());
  auto loaded = LoadConfigFromString(request->config_yaml(), kSubmittedConfigName, overrides);
  if (!loaded.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("invalid job config:\n", std::string(loaded.status().message())));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
  Entry entry;
  v1::Job& job = entry.job;
  job.set_id(store_->NextId());
  job.set_name(request->name().empty() ? loaded->job.trainer.experiment_name : request->name());
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_submit_time_ms(NowMs());
  job.set_config_yaml(request->config_yaml());
  *job.mutable_overrides() = request->overrides();
  if (absl::Status s = store_->Save(job); !s.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("cannot store the job: ", s.message()));
  }
  spdlog::info("{} submitted ({})", job.id(), job.name());
  *reply = job;
  const std::string id = job.id();
  jobs_.emplace(id, std::move(entry));
  UpdateGaugesLocked();
  ++version_;
  cv_.notify_all();
  return grpc::Status::OK;
}

grpc::Status JobService::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request, v1::Job* reply) {
  if (grpc::Status auth = CheckBearerToken(*context, options_.token); !auth.ok()) return auth;
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = FindLocked(request->job_id());
  if (e == nullptr) return NotFound(request->job_id());
  *reply = e->job;
  return grpc::Status::OK;
}

grpc::Status JobService::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* /*request*/,
                                  v1::ListJobsResponse* reply) {
  if (grpc::Status auth = CheckBearerToken(*context, options_.token); !auth.ok()) return auth;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    v1::Job* job = reply->add_jobs();
    *job = it->second.job;
    job->clear_config_yaml();  // GetJob has it; a list of many jobs stays small
  }
  return grpc::Status::OK;
}

grpc::Status JobService::CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                                   v1::Job* reply) {
  if (grpc::Status auth = CheckBearerToken(*context, options_.token); !auth.ok()) return auth;
  std::shared_ptr<JobRunner> to_cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry* e = FindLocked(request->job_id());
    if (e == nullptr) return NotFound(request->job_id());
    if (e->job.state() == v1::JOB_STATE_QUEUED) {
      e->job.set_state(v1::JOB_STATE_CANCELLED);
      e->job.set_error("cancelled before it started");
      e->job.set_end_time_ms(NowMs());
      CommitLocked(*e);
      spdlog::info("{}: cancelled while queued", e->job.id());
    } else if (e->job.state() == v1::JOB_STATE_RUNNING) {
      cancel_running_ = true;
      if (running_id_ == e->job.id()) to_cancel = running_;
      e->job.set_cancel_requested(true);
      CommitLocked(*e);  // on disk before the reply: a server that dies before the job stops does not run it again
      spdlog::info("{}: cancelling", e->job.id());
    }
    *reply = e->job;
  }
  if (to_cancel) to_cancel->RequestCancel();
  return grpc::Status::OK;
}

grpc::Status JobService::WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                                  grpc::ServerWriter<v1::JobEvent>* writer) {
  if (grpc::Status auth = CheckBearerToken(*context, options_.token); !auth.ok()) return auth;
  std::unique_lock<std::mutex> lock(mu_);
  if (FindLocked(request->job_id()) == nullptr) return NotFound(request->job_id());
  bool first = true;
  v1::JobState sent_state = v1::JOB_STATE_UNSPECIFIED;
  int64_t sent_total = 0;
  int64_t sent_step = -1;
  size_t seen_rewrites = 0;
  uint64_t seen_version = 0;
  while (true) {
    Entry* e = FindLocked(request->job_id());
    // Steps re-run after a recovery replaced records already sent: send them again from the first replaced one.
    if (first) seen_rewrites = e->rewrites_from.size();
    for (; seen_rewrites < e->rewrites_from.size(); ++seen_rewrites) {
      sent_step = std::min(sent_step, e->rewrites_from[seen_rewrites] - 1);
    }
    // First the job as it stands, then its history; later, new records before the state change they led to.
    std::vector<v1::JobEvent> events;
    std::optional<v1::JobEvent> job_event;
    if (first || e->job.state() != sent_state || e->job.total_steps() != sent_total) {
      job_event.emplace();
      *job_event->mutable_job() = e->job;
      job_event->mutable_job()->clear_config_yaml();
      sent_state = e->job.state();
      sent_total = e->job.total_steps();
    }
    if (first && job_event) events.push_back(*std::move(job_event));
    for (const auto& record : e->metrics) {
      if (record.step() <= sent_step) continue;
      v1::JobEvent ev;
      *ev.mutable_metrics() = record;
      events.push_back(std::move(ev));
      sent_step = record.step();
    }
    if (!first && job_event) events.push_back(*std::move(job_event));
    first = false;
    const bool ended = IsEnded(e->job.state());
    seen_version = version_;
    lock.unlock();
    for (const auto& ev : events) {
      if (!writer->Write(ev)) return grpc::Status::OK;  // the client went away; the job goes on
    }
    lock.lock();
    if (ended) return grpc::Status::OK;
    if (shutting_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
    cv_.wait_for(lock, kPollInterval, [&] { return version_ != seen_version || shutting_down_; });
    if (context->IsCancelled()) return grpc::Status::OK;
  }
}

grpc::Status JobService::GetJobLogs(grpc::ServerContext* context, const v1::GetJobLogsRequest* request,
                                    grpc::ServerWriter<v1::LogChunk>* writer) {
  if (grpc::Status auth = CheckBearerToken(*context, options_.token); !auth.ok()) return auth;
  if (request->offset() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "GetJobLogs: offset must not be negative");
  }
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (FindLocked(request->job_id()) == nullptr) return NotFound(request->job_id());
    path = store_->LogPath(request->job_id());
  }
  int64_t offset = request->offset();
  std::string buffer(kLogChunkBytes, '\0');
  while (true) {
    bool ended = false;
    uint64_t seen_version = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended = IsEnded(FindLocked(request->job_id())->job.state()) || shutting_down_;
      seen_version = version_;
    }
    // Everything written so far (after `ended` was read, so nothing written before the end is missed).
    std::ifstream in(path, std::ios::binary);
    if (in) {
      in.seekg(offset);
      while (in) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        const std::streamsize n = in.gcount();
        if (n <= 0) break;
        v1::LogChunk chunk;
        chunk.set_offset(offset);
        chunk.set_data(buffer.data(), static_cast<size_t>(n));
        if (!writer->Write(chunk)) return grpc::Status::OK;
        offset += n;
      }
    }
    if (!request->follow() || ended || context->IsCancelled()) return grpc::Status::OK;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kPollInterval, [&] { return version_ != seen_version || shutting_down_; });
  }
}

}  // namespace verl
